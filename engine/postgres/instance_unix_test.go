//go:build unix

package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// TestInstanceClaimStoppedHolder: a process holding an instance id that
// is stopped (SIGSTOP) keeps it no longer than its session's idle timeout
// (here 1 s) after its last probe: then the server ends the session and
// another engine may claim the id.
func TestInstanceClaimStoppedHolder(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), claimChildEnv+"="+db.StoreURL())
	cmd.Stderr = os.Stderr
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
	ctx := context.Background()
	if err := e.ClaimInstance(ctx, "stopped", nil); !errors.Is(err, steaderr.ErrLeased) {
		t.Fatalf("a claim while the holder runs = %v, want ErrLeased", err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for {
		err := e.ClaimInstance(ctx, "stopped", nil)
		if err == nil {
			break
		}
		if !errors.Is(err, steaderr.ErrLeased) {
			t.Fatal(err)
		}
		if time.Since(stopped) > 20*time.Second {
			t.Fatalf("the stopped holder still holds the id after %v", time.Since(stopped))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the id was free %v after the holder stopped", time.Since(stopped).Round(time.Millisecond))
}
