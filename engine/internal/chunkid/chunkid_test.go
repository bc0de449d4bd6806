package chunkid_test

import (
	"errors"
	"math"
	"testing"

	"github.com/steadkit/stead/engine/internal/chunkid"
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

func TestTiling(t *testing.T) {
	t.Parallel()
	type span struct{ off, n int64 }
	for _, tc := range []struct {
		name   string
		chunks []span
		size   int64
		want   bool
	}{
		{"exact", []span{{0, 10}, {10, 5}}, 15, true},
		{"one", []span{{0, 7}}, 7, true},
		{"none", nil, 0, false},
		{"none, size 5", nil, 5, false},
		{"short", []span{{0, 10}}, 11, false},
		{"long", []span{{0, 10}}, 9, false},
		{"gap", []span{{0, 10}, {11, 4}}, 15, false},
		{"overlap", []span{{0, 10}, {9, 6}}, 15, false},
		{"not from 0", []span{{1, 10}}, 11, false},
		{"empty chunk", []span{{0, 10}, {10, 0}}, 10, false},
		{"empty alone", []span{{0, 0}}, 0, false},
		{"broken, then back in step", []span{{0, 5}, {6, 4}, {5, 5}}, 10, false},
	} {
		var tl chunkid.Tiling
		for _, c := range tc.chunks {
			tl.Add(c.off, c.n)
		}
		if got := tl.Covers(tc.size); got != tc.want {
			t.Errorf("%s: Covers(%d) = %v, want %v", tc.name, tc.size, got, tc.want)
		}
	}
}

func TestDraw(t *testing.T) {
	t.Parallel()
	tries := 0
	id, err := chunkid.Draw(func(int64) (bool, error) { tries++; return tries == 3, nil })
	if err != nil || id <= 0 || tries != 3 {
		t.Fatalf("Draw taking the third id: %d, %v after %d tries", id, err, tries)
	}
	tries = 0
	if _, err := chunkid.Draw(func(int64) (bool, error) { tries++; return false, nil }); err == nil || tries != chunkid.Draws {
		t.Fatalf("Draw with every id taken: %v after %d tries, want an error after %d", err, tries, chunkid.Draws)
	}
	boom := errors.New("boom")
	if _, err := chunkid.Draw(func(int64) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("Draw with a failing start: %v, want boom", err)
	}
}
