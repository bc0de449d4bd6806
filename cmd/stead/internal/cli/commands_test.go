package cli

import (
	"bytes"
	"context"
	"database/sql"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/steadkit/stead/blob"
)

// stores returns the URLs the command tests run against: a SQLite file
// and a stead server over another, both seeded.
func stores(t *testing.T) map[string]string {
	t.Helper()
	file := storeURL(t)
	seed(t, file)
	behind := storeURL(t)
	seed(t, behind)
	return map[string]string{"sqlite": file, "remote": serve(t, behind)}
}

// TestBlobCommands runs put, stat, ls, get and rm against a local and a
// remote store: the same output from both.
func TestBlobCommands(t *testing.T) {
	t.Parallel()
	for name, db := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			in := filepath.Join(dir, "in")
			os.WriteFile(in, []byte("hello, stead"), 0o644)
			code, stdout, stderr := run(t, ctx, "--db", db, "put", in)
			key := strings.TrimSpace(stdout)
			if code != 0 || !strings.HasPrefix(key, "sha256:") {
				t.Fatalf("put = %d %q %q", code, stdout, stderr)
			}
			if code, stdout, _ := run(t, ctx, "--db", db, "ls"); code != 0 || !strings.Contains(stdout, key+" 12\n") {
				t.Fatalf("ls = %d %q, want the key put", code, stdout)
			}
			out := filepath.Join(dir, "out")
			if code, _, stderr := run(t, ctx, "--db", db, "get", key, "-o", out); code != 0 {
				t.Fatalf("get -o = %d %q", code, stderr)
			}
			if b, _ := os.ReadFile(out); string(b) != "hello, stead" {
				t.Fatalf("get -o wrote %q", b)
			}
			if code, stdout, _ := run(t, ctx, "--db", db, "get", key); code != 0 || stdout != "hello, stead" {
				t.Fatalf("get = %d %q", code, stdout)
			}
			// The put's pin protects the blob for a minute: rm refuses.
			if code, _, stderr := run(t, ctx, "--db", db, "rm", key); code == 0 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "protected") {
				t.Fatalf("rm of a pinned blob = %d %q, want a failure saying protected, one line", code, stderr)
			}
			if code, _, stderr := run(t, ctx, "--db", db, "stat", key); code != 0 {
				t.Fatalf("stat after a refused rm = %d %q", code, stderr)
			}
		})
	}
}

// TestLargeBlobCommands puts a file of several chunks and gets it back, to
// a file and to stdout, locally and through a server (whose remote engine
// takes the chunked path over HTTP).
func TestLargeBlobCommands(t *testing.T) {
	t.Parallel()
	value := make([]byte, 3<<20+123)
	rand.NewChaCha8([32]byte{7}).Read(value)
	want := blob.KeyOf(value).String()
	for name, db := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dir := t.TempDir()
			in := filepath.Join(dir, "in")
			os.WriteFile(in, value, 0o644)
			if code, stdout, stderr := run(t, ctx, "--db", db, "put", in); code != 0 || strings.TrimSpace(stdout) != want {
				t.Fatalf("put FILE = %d %q %q, want %s", code, stdout, stderr, want)
			}
			out := filepath.Join(dir, "out")
			if code, _, stderr := run(t, ctx, "--db", db, "get", want, "-o", out); code != 0 {
				t.Fatalf("get -o = %d %q", code, stderr)
			}
			if b, _ := os.ReadFile(out); !bytes.Equal(b, value) {
				t.Fatalf("get -o wrote %d bytes, not the %d put", len(b), len(value))
			}
			if code, stdout, _ := run(t, ctx, "--db", db, "get", want); code != 0 || stdout != string(value) {
				t.Fatalf("get to stdout = %d, %d bytes", code, len(stdout))
			}
		})
	}
}

// TestRecordCommands runs records ls, show and claim, locally and
// remotely.
func TestRecordCommands(t *testing.T) {
	t.Parallel()
	for name, db := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if _, stdout, _ := run(t, ctx, "--db", db, "records", "show", "--payload", "job-1"); stdout != "first" {
				t.Fatalf("show --payload = %q", stdout)
			}
			code, stdout, stderr := run(t, ctx, "--db", db, "records", "claim", "job-2", "--group", "workers", "--owner", "operator")
			if code != 0 || !strings.Contains(stdout, "operator until") || !strings.Contains(stdout, "incarnation:  1") {
				t.Fatalf("claim = %d %q %q", code, stdout, stderr)
			}
			if code, _, stderr := run(t, ctx, "--db", db, "records", "claim", "job-2", "--group", "workers", "--owner", "intruder"); code != 1 || !strings.Contains(stderr, "leased") {
				t.Fatalf("claim of a leased record = %d %q", code, stderr)
			}
			if code, _, _ := run(t, ctx, "--db", db, "records", "show", "nobody"); code != exitNotFound {
				t.Fatalf("show of an absent record = %d, want 3", code)
			}
			if code, stdout, _ := run(t, ctx, "--db", db, "records", "ls", "idle"); code != 0 || strings.Count(stdout, "\n") != 1 {
				t.Errorf("records ls of an empty group = %d %q, want 0 and the header alone", code, stdout)
			}
			for _, args := range [][]string{{"records", "ls", "nogroup"}, {"records", "ls", "--json", "nogroup"}} {
				code, stdout, stderr := run(t, ctx, append([]string{"--db", db}, args...)...)
				if code != exitNotFound || stdout != "" || stderr != "stead records ls: group \"nogroup\": stead: unknown group\n" {
					t.Errorf("stead %v = %d, stdout %q, stderr %q; want 3 and one line saying the group is unknown", args, code, stdout, stderr)
				}
			}
		})
	}
}

// TestDoctorAndMigrate checks doctor's lines and exit code as the schema
// moves, and migrate status.
func TestDoctorAndMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	code, stdout, _ := run(t, ctx, "--db", db, "migrate", "status")
	if code != 0 || !strings.Contains(stdout, "schema version 0 of") || !strings.Contains(stdout, "behind") {
		t.Fatalf("migrate status on a new file = %d %q", code, stdout)
	}
	code, stdout, _ = run(t, ctx, "--db", db, "doctor")
	if code != exitWarn || !strings.Contains(stdout, "warn  schema") {
		t.Fatalf("doctor before migrate = %d %q, want 4 and a schema warning", code, stdout)
	}
	if code, _, _ := run(t, ctx, "--db", db, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up = %d", code)
	}
	code, stdout, _ = run(t, ctx, "--db", db, "doctor")
	if code != 0 {
		t.Fatalf("doctor after migrate = %d %q", code, stdout)
	}
	code, stdout, _ = run(t, ctx, "--db", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "doctor")
	if code != exitFailure || !strings.HasPrefix(stdout, "fail  connect") {
		t.Fatalf("doctor of an unreachable database = %d %q", code, stdout)
	}
}

// TestMigrateRefusesNewerSchema: migrate and migrate status refuse a
// database newer than the binary, saying to upgrade.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	db := "sqlite://" + path
	if code, _, _ := run(t, ctx, "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate = %d", code)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec("INSERT INTO schema_version (version, name) VALUES (99, 'from_the_future')"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	for _, args := range [][]string{{"migrate"}, {"migrate", "up"}, {"migrate", "status"}} {
		code, _, stderr := run(t, ctx, append([]string{"--db", db}, args...)...)
		if code != exitFailure || !strings.Contains(stderr, "upgrade stead") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("stead %v on a newer schema = %d %q, want 1 and one line saying to upgrade", args, code, stderr)
		}
	}
}
