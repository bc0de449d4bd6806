package cli

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run runs the CLI in process and returns its exit code and output.
func run(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args   []string
		code   int
		output string
	}{
		{nil, 2, "Usage:"},
		{[]string{"help"}, 0, "Available Commands:"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"--nope"}, 2, "unknown flag: --nope"},
		{[]string{"serve", "-h"}, 0, "--addr"},
		{[]string{"serve", "extra"}, 2, "unknown command"},
		{[]string{"get"}, 2, "want 1 argument"},
		{[]string{"get", "sha256:nope"}, 2, "invalid key"},
		{[]string{"--log-level", "loud", "ls"}, 2, "--log-level"},
	}
	for _, tt := range tests {
		code, stdout, stderr := run(t, context.Background(), tt.args...)
		if code != tt.code || !strings.Contains(stdout+stderr, tt.output) {
			t.Errorf("stead %v = %d, output %q; want %d containing %q", tt.args, code, stdout+stderr, tt.code, tt.output)
		}
		if code != 0 && strings.Count(stderr, "\n") > 1 && !strings.Contains(stderr, "Usage:") {
			t.Errorf("stead %v: error is not one line: %q", tt.args, stderr)
		}
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	code, stdout, stderr := run(t, context.Background(), "--db", db, "migrate")
	if code != 0 || !strings.Contains(stdout, "migrated schema from version 0 to") {
		t.Fatalf("first migrate = %d %q %q", code, stdout, stderr)
	}
	code, stdout, _ = run(t, context.Background(), "--db", db, "migrate")
	if code != 0 || !strings.Contains(stdout, "schema is current") {
		t.Fatalf("second migrate = %d %q", code, stdout)
	}
	code, _, stderr = run(t, context.Background(), "--db", "nope://", "migrate")
	if code != 1 || !strings.Contains(stderr, "unknown URL scheme") {
		t.Fatalf("migrate with a bad URL = %d %q", code, stderr)
	}
}

func TestServeRefusesOpenBindWithoutToken(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t, context.Background(), "--db", "mem://", "serve", "--addr", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "STEAD_TOKEN") {
		t.Fatalf("serve on 0.0.0.0 without a token = %d %q", code, stderr)
	}
}

// TestServe starts the server on a free port, stores and reads a blob over
// HTTP, and stops it by cancelling its context.
func TestServe(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--db", "mem://", "serve", "--addr", "127.0.0.1:0")
	resp, err := http.Post(s.url(t, "http://")+"/v1/blobs", "application/octet-stream", strings.NewReader("hi"))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("PUT: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, stderr := s.stop(); code != 0 {
		t.Fatalf("serve exited %d after cancel: %q", code, stderr)
	}
}

// TestUsageHidesSecrets checks that the store URL and token taken from the
// environment are used but never printed, not even as flag defaults.
func TestUsageHidesSecrets(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "secret-pw.db")
	t.Setenv("STEAD_DB", db)
	t.Setenv("STEAD_TOKEN", "secret-token")
	for _, args := range [][]string{nil, {"help"}, {"serve", "-h"}, {"serve", "-nope"}} {
		_, stdout, stderr := run(t, context.Background(), args...)
		if out := stdout + stderr; strings.Contains(out, "secret") {
			t.Errorf("stead %v printed a secret from the environment: %q", args, out)
		}
	}
	code, stdout, stderr := run(t, context.Background(), "migrate")
	if code != 0 || !strings.Contains(stdout, "migrated schema") {
		t.Fatalf("migrate with STEAD_DB = %d %q %q; want the store STEAD_DB names", code, stdout, stderr)
	}
	if got := redacted("postgres://alice:secret-pw@db.internal/app"); strings.Contains(got, "secret") || !strings.Contains(got, "alice") {
		t.Errorf("redacted = %q, want the password masked", got)
	}
	for _, db := range []string{
		"postgres://alice@db/app?password=secret-pw",
		"postgres://alice@db/app?pgbouncer=true&listen_url=" + url.QueryEscape("postgres://alice:secret-pw@direct/app"),
		"postgres://db/app?sslpassword=secret-pw",
	} {
		if got := redacted(db); strings.Contains(got, "secret") {
			t.Errorf("redacted(%q) = %q, want the password masked", db, got)
		}
	}
	if got := redacted("mem://"); got != "mem://" {
		t.Errorf("redacted(mem://) = %q", got)
	}
}

// TestErrorsHideSecrets runs commands against store URLs that fail to open
// or parse and checks no printed error carries the password or token.
func TestErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	dbs := []string{
		"postgres://u:SECRETPW%ZZ@127.0.0.1/x",
		"postgres://u:SECRETPW@[::1/x",
		"postgres://u@127.0.0.1:1/x?password=SECRETPW%ZZ",
		"host=127.0.0.1 port=1 password=SECRETPW",
		"http://127.0.0.1:1?token=SECRETPW",
		"http://u:SECRETPW@127.0.0.1:1",
	}
	for _, db := range dbs {
		for _, args := range [][]string{{"stat", "k"}, {"doctor"}, {"migrate", "status"}} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			code, stdout, stderr := run(t, ctx, append([]string{"--db", db}, args...)...)
			cancel()
			if code == 0 {
				t.Errorf("stead --db %q %v succeeded", db, args)
			}
			if out := stdout + stderr; strings.Contains(out, "SECRETPW") {
				t.Errorf("stead --db %q %v printed the secret: %q", db, args, out)
			}
		}
	}
}

// TestServeTrimsEnvToken: STEAD_TOKEN is trimmed like a token file, so a
// trailing newline does not lock every client out.
func TestServeTrimsEnvToken(t *testing.T) {
	t.Setenv("STEAD_TOKEN", "tok\n")
	base := startServe(t, nil, "--db", "mem://", "serve", "--addr", "127.0.0.1:0").url(t, "http://")
	req, _ := http.NewRequest("GET", base+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/info with the trimmed token = %d, want 200", resp.StatusCode)
	}
}

// A mistyped SQLite path fails, naming the missing directory, and creates
// nothing: reading an empty new store would say "nothing there".
func TestMistypedSQLitePath(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nonexistent", "dir")
	code, stdout, stderr := run(t, context.Background(), "--db", "sqlite://"+filepath.Join(missing, "x.db"), "ls")
	if code == 0 || !strings.Contains(stderr, missing) {
		t.Fatalf("ls of a mistyped path = %d %q %q, want a failure naming %s", code, stdout, stderr, missing)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ls created %s: %v", filepath.Dir(missing), err)
	}
}

// The default store (no --db, no STEAD_DB) is created with its directory,
// as the README's quick start has it.
func TestDefaultStoreCreatesItsDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("STEAD_DB", "")
	if code, stdout, stderr := run(t, context.Background(), "ls"); code != 0 {
		t.Fatalf("ls of the default store = %d %q %q", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join("stead-data", "stead.db")); err != nil {
		t.Fatalf("the default store: %v", err)
	}
}
