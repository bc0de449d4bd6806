package chunkid_test

import (
	"errors"
	"math"
	"testing"

	"github.com/steadkit/stead/internal/chunkid"
	"github.com/steadkit/stead/steaderr"
)

func TestNewIsPositiveAndDistinct(t *testing.T) {
	t.Parallel()
	seen := make(map[int64]bool)
	for range 1000 {
		id := chunkid.New()
		if id <= 0 || seen[id] {
			t.Fatalf("New() = %d: want a positive id not drawn before", id)
		}
		seen[id] = true
	}
}

func TestCheckSpan(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		off  int64
		n    int
		fine bool
	}{
		{0, 1, true}, {1 << 40, 1 << 20, true}, {math.MaxInt64 - 10, 10, true}, {math.MaxInt64, 0, true},
		{math.MaxInt64 - 9, 10, false}, {math.MaxInt64 - 2, 10, false}, {math.MaxInt64, 1, false}, {-1, 1, false}, {math.MinInt64, 10, false},
	} {
		err := chunkid.CheckSpan(c.off, c.n)
		if c.fine != (err == nil) || err != nil && !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("CheckSpan(%d, %d) = %v, want fine %v (else ErrInvalidArgument)", c.off, c.n, err, c.fine)
		}
	}
}
