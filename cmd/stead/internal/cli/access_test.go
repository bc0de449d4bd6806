package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestUserAdd: user add writes a bcrypt line into the file, replacing the
// user's own and keeping the others'.
func TestUserAdd(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "htpasswd")
	add := func(name, pass string) {
		var stdout, stderr bytes.Buffer
		if code := execute(context.Background(), []string{"user", "add", "--htpasswd", file, name}, &env{stdin: strings.NewReader(pass + "\n"), stdout: &stdout, stderr: &stderr}); code != 0 {
			t.Fatalf("user add %s = %d %s", name, code, stderr.String())
		}
	}
	add("alice", "one")
	add("bob", "two")
	add("alice", "three")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "bob:") || !strings.HasPrefix(lines[1], "alice:") {
		t.Fatalf("htpasswd = %q", b)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(strings.TrimPrefix(lines[1], "alice:")), []byte("three")); err != nil {
		t.Fatalf("alice's hash: %v", err)
	}
	var stderr bytes.Buffer
	if code := execute(context.Background(), []string{"user", "add", "token"}, &env{stdin: strings.NewReader("x\n"), stdout: io.Discard, stderr: &stderr}); code != exitUsage {
		t.Fatalf("user add token = %d %s; want a usage error (the name is reserved)", code, stderr.String())
	}
}

// TestServeUsers: serve with --htpasswd and --access lets a user in with
// Basic on /v1 within its rules only, and keeps the token working.
func TestServeUsers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file, rules := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "access.yaml")
	if code := execute(context.Background(), []string{"user", "add", "--htpasswd", file, "reader"}, &env{stdin: strings.NewReader("pw\n"), stdout: io.Discard, stderr: io.Discard}); code != 0 {
		t.Fatal(code)
	}
	if err := os.WriteFile(rules, []byte("rules:\n  - who: [reader]\n    v1: [read]\n  - who: [token]\n    v1: [read, write]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServe(t, nil, "--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--token-file", tokenFile, "--htpasswd", file, "--access", rules).url(t, "http://")
	for _, c := range []struct {
		method, user, pass string
		want               int
	}{
		{"GET", "reader", "pw", 200},
		{"POST", "reader", "pw", 403},
		{"GET", "reader", "wrong", 401},
		{"POST", "token", "tok", 201},
	} {
		req, _ := http.NewRequest(c.method, base+"/v1/blobs", strings.NewReader("hi"))
		if c.method == "GET" {
			req, _ = http.NewRequest(c.method, base+"/v1/info", nil)
		}
		req.SetBasicAuth(c.user, c.pass)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s as %s:%s = %d; want %d", c.method, c.user, c.pass, resp.StatusCode, c.want)
		}
	}
}

// TestUserAddKeepsCost: user add hashes at the cost of the file's hashes,
// so that the file keeps one cost and an unknown name takes as long as a
// known one (the server's dummy hash has the file's most common cost).
func TestUserAddKeepsCost(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "htpasswd")
	h, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	if err := os.WriteFile(file, []byte("alice:"+string(h)+"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := execute(context.Background(), []string{"user", "add", "--htpasswd", file, "bob"}, &env{stdin: strings.NewReader("pw\n"), stdout: io.Discard, stderr: &stderr}); code != 0 {
		t.Fatalf("user add = %d %s", code, stderr.String())
	}
	b, _ := os.ReadFile(file)
	_, bob, _ := strings.Cut(strings.Split(strings.TrimSpace(string(b)), "\n")[1], ":")
	if c, err := bcrypt.Cost([]byte(bob)); err != nil || c != bcrypt.MinCost {
		t.Fatalf("bob's hash cost %d, %v; want the file's %d", c, err, bcrypt.MinCost)
	}
}

// TestUserAddHostileNames: a name with a newline, a leading #, a colon or
// white space is a usage error, and leaves the file as it was.
func TestUserAddHostileNames(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "htpasswd")
	h, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	before := "alice:" + string(h) + "\n"
	if err := os.WriteFile(file, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a\nb", "#x", "a:b", "a b", "a\x00b"} {
		var stderr bytes.Buffer
		if code := execute(context.Background(), []string{"user", "add", "--htpasswd", file, name}, &env{stdin: strings.NewReader("pw\n"), stdout: io.Discard, stderr: &stderr}); code != exitUsage {
			t.Errorf("user add %q = %d %s; want a usage error", name, code, stderr.String())
		}
	}
	if b, _ := os.ReadFile(file); string(b) != before {
		t.Fatalf("htpasswd after refused names = %q", b)
	}
}

// TestUserAddKeepsMode: user add keeps an existing file's mode (a file
// the server's group reads stays readable to it); a new file is 0600.
func TestUserAddKeepsMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	add := func(file string) {
		t.Helper()
		var stderr bytes.Buffer
		if code := execute(context.Background(), []string{"user", "add", "--htpasswd", file, "bob"}, &env{stdin: strings.NewReader("pw\n"), stdout: io.Discard, stderr: &stderr}); code != 0 {
			t.Fatalf("user add = %d %s", code, stderr.String())
		}
	}
	existing := filepath.Join(dir, "existing")
	h, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	if err := os.WriteFile(existing, []byte("alice:"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(existing, 0o640); err != nil {
		t.Fatal(err)
	}
	add(existing)
	fresh := filepath.Join(dir, "fresh")
	add(fresh)
	for file, want := range map[string]os.FileMode{existing: 0o640, fresh: 0o600} {
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", filepath.Base(file), fi.Mode().Perm(), err, want)
		}
	}
}

// TestServeTrustedProxyMalformed: a --trusted-proxy that is no CIDR nor
// address is a usage error naming it.
func TestServeTrustedProxyMalformed(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "htpasswd")
	h, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	if err := os.WriteFile(file, []byte("alice:"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.internal", "10.0.0.0/8,,"} {
		var stderr bytes.Buffer
		code := execute(context.Background(), []string{"--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--htpasswd", file, "--trusted-proxy", bad}, &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr})
		if code != exitUsage || !strings.Contains(stderr.String(), "--trusted-proxy") {
			t.Errorf("--trusted-proxy %q = %d %s; want a usage error naming it", bad, code, stderr.String())
		}
	}
}
