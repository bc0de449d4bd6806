//go:build unix

package sqlite_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/steadkit/stead/steaderr"
)

// claimHolderEnv makes the test binary a process that claims an instance
// id on a database and holds it until killed (TestClaimHolderProcess).
const claimHolderEnv = "STEAD_TEST_SQLITE_CLAIM_HOLDER"

// TestClaimHolderProcess is the holder process of TestInstanceClaimKilled;
// run directly, it does nothing.
func TestClaimHolderProcess(t *testing.T) {
	path := os.Getenv(claimHolderEnv)
	if path == "" {
		return
	}
	e := openEngine(t, path)
	if err := e.ClaimInstance(t.Context(), "worker-1", nil); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("claimed\n")
	select {} // until killed
}

// TestInstanceClaimKilled: a process holding an instance id that is
// killed (SIGKILL, no Close) frees it at once, and its lock file does not
// keep the id from being claimed again; a live holder in another process
// refuses the claim with an error naming the id and its process.
func TestInstanceClaimKilled(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	mustMigrate(t, openEngine(t, path))
	cmd := exec.Command(os.Args[0], "-test.run=^TestClaimHolderProcess$")
	cmd.Env = append(os.Environ(), claimHolderEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "claimed\n" {
		t.Fatalf("the holder process said %q, %v", line, err)
	}
	e := openEngine(t, path)
	err = e.ClaimInstance(t.Context(), "worker-1", nil)
	if !errors.Is(err, steaderr.ErrLeased) || !strings.Contains(err.Error(), `"worker-1"`) || !strings.Contains(err.Error(), "process") {
		t.Fatalf("a claim while another process holds the id = %v, want ErrLeased naming the id and the process", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := e.ClaimInstance(t.Context(), "worker-1", nil); err != nil {
		t.Fatalf("a claim after the holder was killed = %v", err)
	}
}

// TestInstanceClaimFiles: claims exclude each other within one process
// too, and Close removes the lock file, leaving only the database's own
// files beside it.
func TestInstanceClaimFiles(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	a, b := openEngine(t, path), openEngine(t, path)
	mustMigrate(t, a)
	if err := a.ClaimInstance(t.Context(), "x", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.ClaimInstance(t.Context(), "x", nil); !errors.Is(err, steaderr.ErrLeased) {
		t.Fatalf("a second engine's claim in this process = %v, want ErrLeased", err)
	}
	if err := b.ClaimInstance(t.Context(), "y", nil); err != nil {
		t.Fatalf("a claim of another id = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.ClaimInstance(t.Context(), "z", nil); !errors.Is(err, steaderr.ErrClosed) {
		t.Fatalf("a claim on a closed engine = %v, want ErrClosed", err)
	}
	files, err := filepath.Glob(path + "-instance-*")
	if err != nil || len(files) != 0 {
		t.Fatalf("lock files left after Close: %v, %v", files, err)
	}
	c := openEngine(t, path)
	if err := c.ClaimInstance(t.Context(), "x", nil); err != nil {
		t.Fatalf("a claim after its holder closed = %v", err)
	}
}
