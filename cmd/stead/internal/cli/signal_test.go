package cli

import (
	"context"
	"syscall"
	"testing"
)

// TestInterruptExit: a command cut off by SIGINT exits 130, by SIGTERM 143.
func TestInterruptExit(t *testing.T) {
	t.Parallel()
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(Signalled(sig))
		if code, _, stderr := runIn(ctx, "--db", storeURL(t), "ls"); code != want {
			t.Errorf("stead ls cut off by %v = exit %d (stderr %q), want %d", sig, code, stderr, want)
		}
	}
}
