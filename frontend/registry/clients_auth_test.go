package registry_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
)

// serveWithUsers serves a registry over SQLite with the users and rules
// of the access tests, returning its host:port.
func serveWithUsers(t *testing.T) string {
	t.Helper()
	st, err := stead.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{})
	addr := fronttest.Serve(t, st, server.Options{Access: authority(t, authRules), Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	t.Cleanup(func() {
		st.Close()
	})
	return addr
}

// refused runs a client that must fail, and checks that its output names
// the spec's refusal.
func refused(t *testing.T, dir, bin, want string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := fronttestRun(ctx, dir, bin, args...)
	if err == nil || !strings.Contains(strings.ToLower(string(out)), want) {
		t.Fatalf("%s %s: %v\n%s\nwant a failure saying %q", filepath.Base(bin), strings.Join(args, " "), err, out, want)
	}
}

func creds(user string) string { return user + ":" + authUsers[user] }

// TestSkopeoLogin: skopeo pushes and pulls with --dest-creds and
// --src-creds through the token flow, and a pull-only user's push is
// denied.
func TestSkopeoLogin(t *testing.T) {
	t.Parallel()
	skopeo := fronttest.Tool(t, "skopeo", "STEAD_SKOPEO", "STEAD_REQUIRE_SKOPEO")
	addr := serveWithUsers(t)
	dir := t.TempDir()
	src, back := filepath.Join(dir, "src"), filepath.Join(dir, "back")
	img := writeLayout(t, src, "v1", 7, 2, 100<<10)
	ref := "docker://" + addr + "/team/app:v1"
	run(t, dir, skopeo, "copy", "--preserve-digests", "--dest-tls-verify=false", "--dest-creds", creds("alice"), "oci:"+src+":v1", ref)
	run(t, dir, skopeo, "copy", "--preserve-digests", "--src-tls-verify=false", "--src-creds", creds("bob"), ref, "oci:"+back+":v1")
	sameBlobs(t, src, back, img)
	refused(t, dir, skopeo, "denied", "copy", "--dest-tls-verify=false", "--dest-creds", creds("bob"), "oci:"+src+":v1", "docker://"+addr+"/team/bob:v1")
	refused(t, dir, skopeo, "unauthorized", "copy", "--src-tls-verify=false", "--src-creds", "bob:wrong", ref, "oci:"+back+":v2")
}

// TestOrasLogin: oras login stores a user's credentials and pushes with
// them; -u/-p pulls; a pull-only user's push is denied.
func TestOrasLogin(t *testing.T) {
	t.Parallel()
	oras := fronttest.Tool(t, "oras", "STEAD_ORAS", "STEAD_REQUIRE_ORAS")
	addr := serveWithUsers(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello stead\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, oras, "login", "--plain-http", "-u", "alice", "-p", authUsers["alice"], addr)
	run(t, dir, oras, "push", "--plain-http", addr+"/team/art:v1", "hello.txt:text/plain")
	out := run(t, dir, oras, "repo", "ls", "--plain-http", addr)
	if !strings.Contains(string(out), "team/art") {
		t.Fatalf("oras repo ls = %s; want team/art", out)
	}
	pulled := filepath.Join(dir, "pulled")
	run(t, dir, oras, "pull", "--plain-http", "-u", "bob", "-p", authUsers["bob"], "-o", pulled, addr+"/team/art:v1")
	if got, err := os.ReadFile(filepath.Join(pulled, "hello.txt")); err != nil || string(got) != "hello stead\n" {
		t.Fatalf("pulled %q, %v", got, err)
	}
	refused(t, dir, oras, "denied", "push", "--plain-http", "-u", "bob", "-p", authUsers["bob"], addr+"/team/art:v2", "hello.txt:text/plain")
	refused(t, dir, oras, "unauthorized", "login", "--plain-http", "-u", "alice", "-p", "wrong", addr)
}

// TestCraneLogin: crane auth login stores a user's credentials; crane
// copies within the registry (a cross-repository mount) and lists the
// catalog with them; a pull-only user's copy is denied.
func TestCraneLogin(t *testing.T) {
	t.Parallel()
	crane := fronttest.Tool(t, "crane", "STEAD_CRANE", "STEAD_REQUIRE_CRANE")
	skopeo := fronttest.Tool(t, "skopeo", "STEAD_SKOPEO", "STEAD_REQUIRE_SKOPEO")
	addr := serveWithUsers(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeLayout(t, src, "v1", 8, 2, 50<<10)
	run(t, dir, skopeo, "copy", "--dest-tls-verify=false", "--dest-creds", creds("alice"), "oci:"+src+":v1", "docker://"+addr+"/team/app:v1")
	run(t, dir, crane, "auth", "login", addr, "-u", "alice", "-p", authUsers["alice"])
	run(t, dir, crane, "--insecure", "copy", addr+"/team/app:v1", addr+"/team/copy:v1")
	d1 := strings.TrimSpace(string(run(t, dir, crane, "--insecure", "digest", addr+"/team/app:v1")))
	d2 := strings.TrimSpace(string(run(t, dir, crane, "--insecure", "digest", addr+"/team/copy:v1")))
	if d1 == "" || d1 != d2 {
		t.Fatalf("copy's digest %q; want %q", d2, d1)
	}
	if out := string(run(t, dir, crane, "--insecure", "catalog", addr)); !strings.Contains(out, "team/app") || !strings.Contains(out, "team/copy") {
		t.Fatalf("crane catalog = %s", out)
	}
	run(t, dir, crane, "auth", "login", addr, "-u", "bob", "-p", authUsers["bob"])
	refused(t, dir, crane, "denied", "--insecure", "copy", addr+"/team/app:v1", addr+"/team/bob:v1")
	if out := string(run(t, dir, crane, "--insecure", "catalog", addr)); strings.Contains(out, "carol") {
		t.Fatalf("bob's catalog = %s", out)
	}
}

// TestRegctlLogin: regctl registry login stores a user's credentials;
// regctl lists the catalog and tags, and copies within the registry with
// them; a pull-only user's copy is denied.
func TestRegctlLogin(t *testing.T) {
	t.Parallel()
	regctl := fronttest.Tool(t, "regctl", "STEAD_REGCTL", "STEAD_REQUIRE_REGCTL")
	skopeo := fronttest.Tool(t, "skopeo", "STEAD_SKOPEO", "STEAD_REQUIRE_SKOPEO")
	addr := serveWithUsers(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeLayout(t, src, "v1", 9, 2, 50<<10)
	run(t, dir, skopeo, "copy", "--dest-tls-verify=false", "--dest-creds", creds("alice"), "oci:"+src+":v1", "docker://"+addr+"/team/app:v1")
	run(t, dir, regctl, "registry", "set", "--tls", "disabled", addr)
	run(t, dir, regctl, "registry", "login", addr, "-u", "alice", "-p", authUsers["alice"])
	run(t, dir, regctl, "image", "copy", addr+"/team/app:v1", addr+"/team/copy:v1")
	if out := string(run(t, dir, regctl, "repo", "ls", addr)); !strings.Contains(out, "team/copy") {
		t.Fatalf("regctl repo ls = %s", out)
	}
	if out := string(run(t, dir, regctl, "tag", "ls", addr+"/team/copy")); strings.TrimSpace(out) != "v1" {
		t.Fatalf("regctl tag ls = %s", out)
	}
	run(t, dir, regctl, "registry", "login", addr, "-u", "bob", "-p", authUsers["bob"])
	refused(t, dir, regctl, "denied", "image", "copy", addr+"/team/app:v1", addr+"/team/bob:v1")
}
