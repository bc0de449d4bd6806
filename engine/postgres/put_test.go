package postgres_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// TestOverlappingPuts races many goroutines, through two engines on one
// schema, each putting random overlapping subsets of a small key set. Two
// batches inserting the same new keys in different orders used to deadlock
// (40P01) and fail every caller of both batches: no put may fail.
func TestOverlappingPuts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	engines := []blob.Backend{open(t, db, "&pool_max_conns=4").Blobs(), open(t, db, "&pool_max_conns=4").Blobs()}
	// Each round has its own small key set, new to the store, so that
	// batches meet each other's uncommitted inserts.
	const nkeys, workers, rounds = 8, 32, 60
	value := func(round, i int) []byte { return fmt.Appendf(nil, "overlapping put %d/%d", round, i) }
	var puts, failures atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eng := engines[w%len(engines)]
			for round := range rounds {
				v := value(round, rand.IntN(nkeys))
				puts.Add(1)
				if err := eng.Put(context.Background(), blob.PutParams{Key: blob.KeyOf(v), Value: v, Owner: "test", TTL: time.Minute}); err != nil {
					if failures.Add(1) <= 3 {
						t.Errorf("Put: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d overlapping puts failed", n, puts.Load())
	}
	var stored int
	for round := range rounds {
		for i := range nkeys {
			if _, err := engines[0].Stat(context.Background(), blob.KeyOf(value(round, i))); err == nil {
				stored++
			}
		}
	}
	if stored == 0 {
		t.Fatal("no put stored anything")
	}
}

func bytesReader(i int) io.Reader { return strings.NewReader(fmt.Sprint("value ", i)) }
