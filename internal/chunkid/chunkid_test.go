package chunkid_test

import (
	"testing"

	"github.com/steadkit/stead/internal/chunkid"
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
