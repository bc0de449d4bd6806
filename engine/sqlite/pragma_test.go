package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestPragmas checks the settings every pooled connection gets.
func TestPragmas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg            Config
		wantSync       int
		wantBusyMillis int
		wantReadConns  int
	}{
		{Config{}, 1, 5000, DefaultReadConns},
		{Config{Synchronous: "full", BusyTimeout: 1500 * time.Millisecond, ReadConns: 2}, 2, 1500, 2},
	}
	for _, tt := range tests {
		tt.cfg.Path = filepath.Join(t.TempDir(), "s.db")
		e, err := Open(t.Context(), tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		for _, db := range []struct {
			name      string
			db        *sql.DB
			queryOnly int
		}{{"writer", e.writer, 0}, {"reader", e.reader, 1}} {
			for pragma, want := range map[string]any{
				"journal_mode": "wal",
				"synchronous":  tt.wantSync,
				"busy_timeout": tt.wantBusyMillis,
				"foreign_keys": 1,
				"query_only":   db.queryOnly,
			} {
				var got any
				if err := db.db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil {
					t.Fatalf("%s: PRAGMA %s: %v", db.name, pragma, err)
				}
				if n, ok := got.(int64); ok {
					got = int(n)
				}
				if got != want {
					t.Errorf("%+v: %s: PRAGMA %s = %v, want %v", tt.cfg, db.name, pragma, got, want)
				}
			}
		}
		if got := e.reader.Stats().MaxOpenConnections; got != tt.wantReadConns {
			t.Errorf("%+v: reader pool size %d, want %d", tt.cfg, got, tt.wantReadConns)
		}
		if got := e.writer.Stats().MaxOpenConnections; got != 1 {
			t.Errorf("%+v: writer pool size %d, want 1", tt.cfg, got)
		}
	}
}
