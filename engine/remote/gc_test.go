package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
)

// TestGoSourceRefused checks that a Go-function liveness source, which
// cannot cross HTTP, is refused with an error that says what to do.
func TestGoSourceRefused(t *testing.T) {
	t.Parallel()
	_, eng, _ := pinServer(t, "mem://", false)
	col := gc.New(eng.GC(), gc.Options{})
	err := col.RegisterSource(t.Context(), gc.Source{Name: "refs", Referenced: func(context.Context, blob.Key) (bool, error) { return false, nil }})
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "server's process") {
		t.Fatalf("RegisterSource(Go function) = %v, want ErrUnsupported saying where to register it", err)
	}
	if srcs, err := col.Sources(t.Context()); err != nil || len(srcs) != 0 {
		t.Fatalf("Sources = %v, %v", srcs, err)
	}
	// A sweep through the remote engine runs under the server's lease.
	rep, err := col.Sweep(t.Context(), gc.SweepOptions{AllUnreferenced: true})
	if err != nil || rep.Aborted != "" {
		t.Fatalf("Sweep = %+v, %v", rep, err)
	}
}
