package sqlite_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/steaderr"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url     string
		want    sqlite.Config
		wantErr bool
	}{
		{url: "sqlite://./data/s.db", want: sqlite.Config{Path: "./data/s.db"}},
		{url: "sqlite://data/x.db", want: sqlite.Config{Path: "data/x.db"}},
		{url: "sqlite:///var/lib/s.db", want: sqlite.Config{Path: "/var/lib/s.db"}},
		{url: "sqlite://s.db", want: sqlite.Config{Path: "s.db"}},
		{url: "sqlite://my%20dir/a%3Fb.db", want: sqlite.Config{Path: "my dir/a?b.db"}},
		{url: "sqlite://s.db?", want: sqlite.Config{Path: "s.db"}},
		{
			url:  "sqlite://s.db?synchronous=full&busy_timeout=250ms&read_conns=2",
			want: sqlite.Config{Path: "s.db", Synchronous: "FULL", BusyTimeout: 250 * time.Millisecond, ReadConns: 2},
		},
		{
			url:  "sqlite://s.db?SYNCHRONOUS=Normal&Busy_Timeout=1M&READ_CONNS=16",
			want: sqlite.Config{Path: "s.db", Synchronous: "NORMAL", BusyTimeout: time.Minute, ReadConns: 16},
		},
		{url: "sqlite://s.db?synchronous=FULL", want: sqlite.Config{Path: "s.db", Synchronous: "FULL"}},

		{url: "", wantErr: true},
		{url: "sqlite://", wantErr: true},
		{url: "sqlite://?synchronous=full", wantErr: true},
		{url: "sqlite:", wantErr: true},
		{url: "sqlite:/s.db", wantErr: true},
		{url: "sqlite3://s.db", wantErr: true},
		{url: "postgres://host/db", wantErr: true},
		{url: "mem://", wantErr: true},
		{url: "s.db", wantErr: true},
		{url: "sqlite://s.db?journal_mode=wal", wantErr: true},
		{url: "sqlite://s.db?_pragma=foreign_keys(0)", wantErr: true},
		{url: "sqlite://s.db?synchronous=off", wantErr: true},
		{url: "sqlite://s.db?synchronous=extra", wantErr: true},
		{url: "sqlite://s.db?synchronous=", wantErr: true},
		{url: "sqlite://s.db?synchronous", wantErr: true},
		{url: "sqlite://s.db?synchronous=full&synchronous=full", wantErr: true},
		{url: "sqlite://s.db?synchronous=full&SYNCHRONOUS=full", wantErr: true},
		{url: "sqlite://s.db?busy_timeout=5", wantErr: true},
		{url: "sqlite://s.db?busy_timeout=0s", wantErr: true},
		{url: "sqlite://s.db?busy_timeout=-1s", wantErr: true},
		{url: "sqlite://s.db?busy_timeout=100000h", wantErr: true},
		{url: "sqlite://s.db?read_conns=0", wantErr: true},
		{url: "sqlite://s.db?read_conns=-1", wantErr: true},
		{url: "sqlite://s.db?read_conns=two", wantErr: true},
		{url: "sqlite://s.db?read_conns=99999999999999999999", wantErr: true},
		{url: "sqlite://s.db?read_conns=%zz", wantErr: true},
		{url: "sqlite://s%zz.db", wantErr: true},
		{url: "sqlite://s%00.db", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			t.Parallel()
			got, err := sqlite.ParseURL(tt.url)
			if tt.wantErr {
				if !errors.Is(err, steaderr.ErrInvalidArgument) {
					t.Fatalf("ParseURL(%q) = %+v, %v; want an error wrapping ErrInvalidArgument", tt.url, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.url, err)
			}
			if got != tt.want {
				t.Fatalf("ParseURL(%q) = %+v, want %+v", tt.url, got, tt.want)
			}
		})
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"sqlite://./data/s.db",
		"sqlite:///var/lib/s.db",
		"sqlite://data/x.db?synchronous=full&busy_timeout=5s&read_conns=4",
		"sqlite://s.db?READ_CONNS=1&busy_timeout=1m30s",
		"sqlite://%41?x=%zz",
		"sqlite://",
		"mem://",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := sqlite.ParseURL(s)
		if err != nil {
			if !errors.Is(err, steaderr.ErrInvalidArgument) {
				t.Fatalf("ParseURL(%q): %v does not wrap ErrInvalidArgument", s, err)
			}
			return
		}
		if cfg.Path == "" {
			t.Fatalf("ParseURL(%q) = %+v: empty path without an error", s, cfg)
		}
		if cfg.ReadConns < 0 || cfg.BusyTimeout < 0 {
			t.Fatalf("ParseURL(%q) = %+v: negative setting", s, cfg)
		}
	})
}

func TestOpenRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, cfg := range []sqlite.Config{
		{},
		{Path: dir + "/s.db", Synchronous: "OFF"},
		{Path: dir + "/s.db", BusyTimeout: -time.Second},
		{Path: dir + "/s.db", ReadConns: -1},
		{Path: dir + "/s\x00.db"},
	} {
		e, err := sqlite.Open(t.Context(), cfg)
		if !errors.Is(err, steaderr.ErrInvalidArgument) {
			if e != nil {
				e.Close()
			}
			t.Errorf("Open(%+v) = %v, want an error wrapping ErrInvalidArgument", cfg, err)
		}
	}
}

// A database in a directory that does not exist is a mistyped path, not a
// new store: Open refuses it, naming the directory, and creates nothing.
func TestOpenRefusesMissingDirectory(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no", "such")
	e, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(missing, "s.db")})
	if e != nil {
		e.Close()
	}
	if !errors.Is(err, steaderr.ErrInvalidArgument) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Open in a missing directory = %v, want ErrInvalidArgument naming %s", err, missing)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open created %s: %v", filepath.Dir(missing), err)
	}
}

// A path whose directory is a file, or that names a directory, is refused
// with an error saying how a path is written, not the driver's "unable to
// open database file": sqlite://afile/x.db reads afile as a directory.
func TestOpenRefusesPathNotAFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(file, "x.db"), dir} {
		e, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
		if e != nil {
			e.Close()
		}
		if !errors.Is(err, steaderr.ErrInvalidArgument) || !strings.Contains(err.Error(), "sqlite:///") {
			t.Errorf("Open(%s) = %v, want ErrInvalidArgument showing how a path is written", path, err)
		}
	}
}
