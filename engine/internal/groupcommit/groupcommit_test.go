package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/engine/enginetest/testkit"
)

// fakeStore records the batches a Committer flushes. Its flush blocks while
// gate is held, and fails batches holding a key in failKeys.
type fakeStore struct {
	mu      sync.Mutex
	batches [][]string
	stored  map[string]bool
	gate    sync.RWMutex
	entered chan string // the first key of each batch, as its flush starts
	fail    error
	// waitCancel makes a flush of a batch holding this key wait for its
	// context to end.
	waitCancel string
}

// put is a test write named by name. Its BatchKey is empty: puts of one name
// may share a batch, as blob puts do.
type put struct {
	name  string
	value []byte
}

func (p put) Size() int        { return len(p.value) }
func (p put) BatchKey() string { return "" }

func newFakeStore() *fakeStore {
	return &fakeStore{stored: map[string]bool{}, entered: make(chan string, 1024)}
}

func (f *fakeStore) flush(ctx context.Context, batch []*Request[put]) error {
	keys := make([]string, len(batch))
	for i, r := range batch {
		keys[i] = r.Item.name
	}
	f.entered <- keys[0]
	f.gate.RLock()
	defer f.gate.RUnlock()
	if f.waitCancel != "" && slices.Contains(keys, f.waitCancel) {
		<-ctx.Done()
		return fmt.Errorf("flush: %w", ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, keys)
	if f.fail != nil {
		return f.fail
	}
	for _, k := range keys {
		f.stored[k] = true
	}
	return nil
}

func (f *fakeStore) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sizes []int
	for _, b := range f.batches {
		sizes = append(sizes, len(b))
	}
	return sizes
}

// putAsync starts a put and returns its outcome channel.
func putAsync(ctx context.Context, c *Committer[put], key string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Put(ctx, put{key, []byte(key)}) }()
	return done
}

// waitQueued waits until n requests are queued behind the running flush.
func waitQueued(t *testing.T, c *Committer[put], n int) {
	t.Helper()
	testkit.Until(t, fmt.Sprintf("%d requests queued", n), func() bool { return queued(c) >= n })
}

func queued(c *Committer[put]) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

func TestLonePut(t *testing.T) {
	t.Parallel()
	f := newFakeStore()
	c := New(2, 8, 1<<20, f.flush)
	if err := c.Put(t.Context(), put{"a", []byte("a")}); err != nil {
		t.Fatal(err)
	}
	if got := f.batchSizes(); !slices.Equal(got, []int{1}) {
		t.Fatalf("batches = %v, want [1]", got)
	}
}

// Puts queued while the only slot is busy share the next flush.
func TestQueuedPutsShareABatch(t *testing.T) {
	t.Parallel()
	f := newFakeStore()
	c := New(1, 64, 1<<20, f.flush)
	f.gate.Lock()
	first := putAsync(t.Context(), c, "first")
	<-f.entered
	var rest []<-chan error
	for i := range 10 {
		rest = append(rest, putAsync(t.Context(), c, fmt.Sprint(i)))
	}
	waitQueued(t, c, 10)
	f.gate.Unlock()
	for _, done := range append(rest, first) {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := f.batchSizes(); !slices.Equal(got, []int{1, 10}) {
		t.Fatalf("batches = %v, want [1 10]", got)
	}
}

func TestBatchBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name               string
		maxBatch, maxBytes int
		want               []int
	}{
		{"count", 4, 1 << 20, []int{1, 4, 4, 2}},
		{"bytes", 64, 3, []int{1, 3, 3, 3, 1}}, // one-byte values
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeStore()
			c := New(1, tt.maxBatch, tt.maxBytes, f.flush)
			f.gate.Lock()
			var all []<-chan error
			all = append(all, putAsync(t.Context(), c, "x"))
			<-f.entered
			for i := range 10 {
				all = append(all, putAsync(t.Context(), c, fmt.Sprint(i)))
			}
			waitQueued(t, c, 10)
			f.gate.Unlock()
			for _, done := range all {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if got := f.batchSizes(); !slices.Equal(got, tt.want) {
				t.Fatalf("batches = %v, want %v", got, tt.want)
			}
		})
	}
}

// A put cancelled while queued returns its context's error and is never
// flushed.
func TestCancelWhileQueued(t *testing.T) {
	t.Parallel()
	f := newFakeStore()
	c := New(1, 64, 1<<20, f.flush)
	f.gate.Lock()
	first := putAsync(t.Context(), c, "first")
	<-f.entered
	ctx, cancel := context.WithCancel(t.Context())
	victim := putAsync(ctx, c, "victim")
	waitQueued(t, c, 1)
	cancel()
	if err := <-victim; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled put = %v, want context.Canceled", err)
	}
	if n := queued(c); n != 0 {
		t.Fatalf("%d requests queued after the only queued put withdrew, want 0", n)
	}
	f.gate.Unlock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := f.batchSizes(); f.stored["victim"] || !slices.Equal(got, []int{1}) {
		t.Fatalf("batches %v, victim stored %v: want one batch of the first put alone", got, f.stored["victim"])
	}
}

// A put cancelled while its batch runs cancels the batch; the batch's other
// puts are queued again and succeed.
func TestCancelInFlight(t *testing.T) {
	t.Parallel()
	f := newFakeStore()
	f.waitCancel = "victim"
	c := New(1, 64, 1<<20, f.flush)
	f.gate.Lock()
	first := putAsync(t.Context(), c, "first")
	<-f.entered
	ctx, cancel := context.WithCancel(t.Context())
	victim := putAsync(ctx, c, "victim")
	waitQueued(t, c, 1)
	others := []<-chan error{putAsync(t.Context(), c, "a"), putAsync(t.Context(), c, "b")}
	waitQueued(t, c, 3)
	f.gate.Unlock()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-f.entered // the batch holding the victim is flushing
	cancel()
	if err := <-victim; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled in-flight put = %v, want context.Canceled", err)
	}
	for _, done := range others {
		if err := <-done; err != nil {
			t.Fatalf("a put sharing a cancelled batch failed: %v", err)
		}
	}
	if !f.stored["a"] || !f.stored["b"] || f.stored["victim"] {
		t.Fatalf("stored = %v, want a and b only", f.stored)
	}
}

// A commit that wins the race with its caller's cancellation is reported as
// a success.
func TestCommitWinsRace(t *testing.T) {
	t.Parallel()
	f := newFakeStore()
	c := New(1, 64, 1<<20, f.flush)
	f.gate.Lock()
	first := putAsync(t.Context(), c, "first")
	<-f.entered
	ctx, cancel := context.WithCancel(t.Context())
	late := putAsync(ctx, c, "late")
	waitQueued(t, c, 1)
	f.gate.Unlock()
	<-first
	<-f.entered // "late" is being flushed; the fake ignores cancellation
	cancel()
	if err := <-late; err != nil || !f.stored["late"] {
		t.Fatalf("late put = %v, stored %v: want a success, as the commit won", err, f.stored["late"])
	}
}

func TestFlushErrorReachesEveryCaller(t *testing.T) {
	t.Parallel()
	f := newFakeStore()
	f.fail = errors.New("disk full")
	c := New(1, 64, 1<<20, f.flush)
	f.gate.Lock()
	all := []<-chan error{putAsync(t.Context(), c, "first")}
	<-f.entered
	all = append(all, putAsync(t.Context(), c, "a"), putAsync(t.Context(), c, "b"))
	waitQueued(t, c, 2)
	f.gate.Unlock()
	for _, done := range all {
		if err := <-done; !errors.Is(err, f.fail) {
			t.Fatalf("put = %v, want %v", err, f.fail)
		}
	}
}

// TestStress races puts with random cancellations against a model: a put
// that returned nil was stored by a successful flush; one that failed was
// cancelled.
func TestStress(t *testing.T) {
	t.Parallel()
	f := newFakeStore()
	f.entered = make(chan string, 1<<16)
	c := New(3, 8, 1<<20, func(ctx context.Context, batch []*Request[put]) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(rand.IntN(200)) * time.Microsecond):
		}
		return f.flush(ctx, batch)
	})
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := range 100 {
				key := fmt.Sprintf("%d-%d", w, i)
				ctx, cancel := context.WithCancel(t.Context())
				if rand.IntN(4) == 0 {
					time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, cancel)
				}
				err := c.Put(ctx, put{key, []byte(key)})
				switch {
				case err == nil:
					f.mu.Lock()
					ok := f.stored[key]
					f.mu.Unlock()
					if !ok {
						t.Errorf("put %s returned nil but was not stored", key)
					}
				case ctx.Err() == nil:
					t.Errorf("put %s failed without being cancelled: %v", key, err)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) != 0 {
		t.Fatalf("%d requests left queued", len(c.queue))
	}
}

// TestStressFewCallers races a few callers with many cancellations, so that
// a cancelled batch's other requests are often queued again while their
// callers wait only for an outcome and no other put comes to lead them:
// they must be nudged to lead, or they wait forever.
func TestStressFewCallers(t *testing.T) {
	t.Parallel()
	for round := range 100 {
		c := New(2, 8, 1<<20, func(ctx context.Context, batch []*Request[put]) error {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(rand.IntN(500)) * time.Microsecond):
				return nil
			}
		})
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				for i := range 10 {
					ctx, cancel := context.WithCancel(t.Context())
					if rand.IntN(3) == 0 {
						time.AfterFunc(time.Duration(rand.IntN(1000))*time.Microsecond, cancel)
					}
					err := c.Put(ctx, put{fmt.Sprintf("%d-%d-%d", round, w, i), nil})
					if err != nil && ctx.Err() == nil {
						t.Errorf("put failed without being cancelled: %v", err)
					}
					cancel()
				}
			})
		}
		wg.Wait()
	}
}

// keyed is a test write whose BatchKey is its name, with an outcome of its own.
type keyed struct {
	name  string
	fails bool
}

func (k keyed) Size() int        { return 1 }
func (k keyed) BatchKey() string { return k.name }

// TestKeysNeverShareABatch queues writes of overlapping keys behind a held
// flush: each batch holds a key once, later writes of a key stay queued in
// order, and each caller gets its own request's Err.
func TestKeysNeverShareABatch(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var mu sync.Mutex
	var batches [][]string
	c := New(1, 64, 1<<20, func(ctx context.Context, batch []*Request[keyed]) error {
		if batch[0].Item.name == "hold" {
			<-gate
		}
		var names []string
		for _, r := range batch {
			names = append(names, r.Item.name)
			if r.Item.fails {
				r.Err = errors.New("refused")
			}
		}
		mu.Lock()
		batches = append(batches, names)
		mu.Unlock()
		return nil
	})
	ctx := t.Context()
	held := make(chan error, 1)
	go func() { held <- c.Put(ctx, keyed{name: "hold"}) }()
	testkit.Until(t, "the held flush to start", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.slots) == 1 && len(c.queue) == 0
	})
	// Queued one at a time, so the queue's order is known: a a b a b c.
	names := []string{"a", "a", "b", "a", "b", "c"}
	errs := make([]chan error, len(names))
	for i, n := range names {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- c.Put(ctx, keyed{name: n, fails: i == 1}) }()
		testkit.Until(t, fmt.Sprintf("%d queued", i+1), func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.queue) == i+1
		})
	}
	close(gate)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i := range names {
		err := <-errs[i]
		if (i == 1) != (err != nil) {
			t.Fatalf("put %d (%s): %v; only put 1 has an error of its own", i, names[i], err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := [][]string{{"hold"}, {"a", "b", "c"}, {"a", "b"}, {"a"}}
	if fmt.Sprint(batches) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want %v", batches, want)
	}
}

// TestOnceNeverCancelsOrRerunsABatch cancels a caller while its batch
// runs: the batch is not cancelled, runs each write once, and the
// cancelled caller learns its write committed.
func TestOnceNeverCancelsOrRerunsABatch(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	started := make(chan struct{}, 8)
	var mu sync.Mutex
	runs := map[string]int{}
	c := NewOnce(1, 64, 1<<20, func(ctx context.Context, batch []*Request[keyed]) error {
		started <- struct{}{}
		<-gate
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range batch {
			runs[r.Item.name]++
		}
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { first <- c.Put(ctx, keyed{name: "a"}) }()
	<-started
	others := make(chan error, 2)
	for _, n := range []string{"b", "c"} {
		go func() { others <- c.Put(t.Context(), keyed{name: n}) }()
	}
	testkit.Until(t, "b and c queued", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue) == 2
	})
	cancel() // a's batch is running
	close(gate)
	if err := <-first; err != nil {
		t.Fatalf("cancelled while its batch ran, which committed: %v, want nil", err)
	}
	for range 2 {
		if err := <-others; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range []string{"a", "b", "c"} {
		if runs[n] != 1 {
			t.Fatalf("write %s ran %d times, want once (runs %v)", n, runs[n], runs)
		}
	}
}
