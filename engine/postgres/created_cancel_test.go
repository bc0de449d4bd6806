package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// TestCreatedWithCancelledNeighbours: callers that are never cancelled
// put key K; other callers, cancelled at random, put decoy keys and so
// share K's batches. Every K put succeeds and exactly one reports
// created: a caller withdrawing never cancels a batch that has started,
// whose statement may have committed.
func TestCreatedWithCancelledNeighbours(t *testing.T) {
	db := pgtest.New(t)
	eng := open(t, db, "&pool_max_conns=1").Blobs()
	ctx := context.Background()
	const rounds, honest, decoys = 150, 6, 10
	bad := 0
	for round := range rounds {
		v := fmt.Appendf(nil, "rev K %d", round)
		k := blob.KeyOf(v)
		var mu sync.Mutex
		created, ok := 0, 0
		var wg sync.WaitGroup
		for range honest {
			wg.Add(1)
			go func() {
				defer wg.Done()
				told, err := eng.Put(ctx, blob.PutParams{Key: k, Value: v, Owner: "h", TTL: time.Minute})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("honest put: %v", err)
					return
				}
				ok++
				if told {
					created++
				}
			}()
		}
		for d := range decoys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dv := fmt.Appendf(nil, "rev decoy %d %d", round, d)
				c, cancel := context.WithCancel(ctx)
				go func() { time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond); cancel() }()
				eng.Put(c, blob.PutParams{Key: blob.KeyOf(dv), Value: dv, Owner: "d", TTL: time.Minute})
				cancel()
			}()
		}
		wg.Wait()
		if _, err := eng.Stat(ctx, k); err != nil {
			t.Fatalf("K not stored: %v", err)
		}
		if created != 1 {
			bad++
			t.Errorf("round %d: %d of %d honest (uncancelled) puts told created, want 1", round, created, ok)
		}
	}
	t.Logf("bad rounds %d/%d", bad, rounds)
}
