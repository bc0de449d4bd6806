package cli

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// TestBenchRemovesWhatItWrote runs stead bench twice against a store that
// holds other users' data, locally and through a server: afterwards the
// store holds the same blobs and records as before, among them a blob
// nothing protects any more, and the bench's group and locks (one per
// worker) do not pile up from one run to the next.
func TestBenchRemovesWhatItWrote(t *testing.T) {
	t.Parallel()
	for _, remote := range []bool{false, true} {
		name := map[bool]string{false: "sqlite", true: "remote"}[remote]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "stead.db")
			db := "sqlite://" + path
			seed(t, db)
			// Another user's blob whose pin lapsed long ago: a Delete
			// would remove it.
			past := time.Now().Add(-time.Hour)
			old, err := stead.Open(t.Context(), db, stead.WithClock(func() time.Time { return past }))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := old.Blobs.Put(t.Context(), strings.NewReader("unprotected")); err != nil {
				t.Fatal(err)
			}
			old.Close()
			if remote {
				st := openStore(t, db)
				srv := httptest.NewServer(server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
				t.Cleanup(srv.Close)
				db = srv.URL
			}
			raw, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			blobs := func() []string {
				t.Helper()
				var keys []string
				for info, err := range openStore(t, "sqlite://"+path).Blobs.All(t.Context(), blob.Key{}) {
					if err != nil {
						t.Fatal(err)
					}
					keys = append(keys, info.Key.String())
				}
				return keys
			}
			count := func(query string) int {
				t.Helper()
				var n int
				if err := raw.QueryRow(query).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			const records, groups, locks = "SELECT count(*) FROM records", "SELECT count(*) FROM record_groups", "SELECT count(*) FROM locks"
			beforeBlobs, beforeRecords, beforeGroups, beforeLocks := blobs(), count(records), count(groups), count(locks)
			for i := range 2 {
				code, stdout, stderr := run(t, context.Background(), "--db", db, "bench", "--duration", "50ms", "--concurrency", "2")
				if code != 0 || !strings.Contains(stdout, "blob put") {
					t.Fatalf("bench = %d %q %q", code, stdout, stderr)
				}
				if got := blobs(); !slices.Equal(got, beforeBlobs) {
					t.Fatalf("after bench run %d: %d blobs, want the %d there before; stdout %q stderr %q", i+1, len(got), len(beforeBlobs), stdout, stderr)
				}
				if got := count(records); got != beforeRecords {
					t.Fatalf("after bench run %d: %d records, want the %d there before", i+1, got, beforeRecords)
				}
				if g, l := count(groups), count(locks); g > beforeGroups+1 || l > beforeLocks+2 {
					t.Fatalf("after bench run %d: %d groups and %d lock rows, want at most one group and a lock per worker more than the %d and %d before", i+1, g, l, beforeGroups, beforeLocks)
				}
			}
		})
	}
}
