package registry_test

import (
	"path/filepath"
	"testing"

	"github.com/steadkit/stead/internal/testing/fronttest"
)

// TestPodmanLogin: podman logs in through the token flow, pulls an image
// pushed by skopeo into its own storage and pushes it to another
// repository; a pull-only user's push is denied and a wrong password is
// refused at login (podman words a 401 as "invalid username/password").
func TestPodmanLogin(t *testing.T) {
	t.Parallel()
	podman := fronttest.Tool(t, "podman", "STEAD_PODMAN", "STEAD_REQUIRE_PODMAN")
	skopeo := fronttest.Tool(t, "skopeo", "STEAD_SKOPEO", "STEAD_REQUIRE_SKOPEO")
	addr := serveWithUsers(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	writeLayout(t, src, "v1", 10, 2, 50<<10)
	run(t, dir, skopeo, "copy", "--dest-tls-verify=false", "--dest-creds", creds("alice"), "oci:"+src+":v1", "docker://"+addr+"/team/app:v1")
	auth := filepath.Join(dir, "auth.json")
	// Storage of its own, no daemon, no cgroups or events outside dir.
	pm := func(args ...string) []string {
		return append([]string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
			"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none"}, args...)
	}
	run(t, dir, podman, pm("login", "--tls-verify=false", "--authfile", auth, "-u", "alice", "-p", authUsers["alice"], addr)...)
	run(t, dir, podman, pm("pull", "--tls-verify=false", "--authfile", auth, addr+"/team/app:v1")...)
	run(t, dir, podman, pm("push", "--tls-verify=false", "--authfile", auth, addr+"/team/app:v1", "docker://"+addr+"/team/copy:v1")...)
	run(t, dir, podman, pm("pull", "--tls-verify=false", "--authfile", auth, addr+"/team/copy:v1")...)
	run(t, dir, podman, pm("login", "--tls-verify=false", "--authfile", auth, "-u", "bob", "-p", authUsers["bob"], addr)...)
	refused(t, dir, podman, "denied", pm("push", "--tls-verify=false", "--authfile", auth, addr+"/team/app:v1", "docker://"+addr+"/team/bob:v1")...)
	refused(t, dir, podman, "invalid username/password", pm("login", "--tls-verify=false", "--authfile", auth, "-u", "alice", "-p", "wrong", addr)...)
}
