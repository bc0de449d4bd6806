// Package groupcommit coalesces concurrent writes (blob puts, record
// saves) into shared statements and commits. Engines supply the flush; the
// queueing, leadership and cancellation rules live here, once.
package groupcommit

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Item is one write: Size is what it counts against a batch's byte bound,
// and two items with the same non-empty BatchKey never share a batch, so
// that the later, queued behind the earlier, sees its outcome.
type Item interface {
	Size() int
	BatchKey() string
}

// Put is a blob put: Value stored under Key, pinned by Pin in the same
// commit, with an edge to each of Children (sorted keys the value
// references). Puts of one key may share a batch: a content-addressed
// value stored twice is stored once. A Committer of puts takes *Put, so
// that a flush can hand each caller its own Created.
type Put struct {
	Key      string
	Value    []byte
	Pin      Pin
	Children []string
	// Created is set by the flush that commits the put: true when this put
	// inserted Key, false when it was stored already. Of the puts of one
	// key in a batch, at most one is told true.
	Created bool
}

// Pin is the pin a put takes on its key in the commit that stores it:
// Owner's pin, expiring TTL after Now (zero Now: the engine's clock).
type Pin struct {
	Owner string
	TTL   time.Duration
	Now   time.Time
}

// Size implements Item: the value and the children's keys.
func (p Put) Size() int { return len(p.Value) + len(p.Children)*keyTextLen }

// keyTextLen is the length of a key's text form ("sha256:" and 64 hex).
const keyTextLen = 71

// BatchKey implements Item: puts may share a batch, but two puts of one
// key that declare children never do, so that a child found missing fails
// only its own put.
func (p Put) BatchKey() string {
	if len(p.Children) > 0 {
		return p.Key
	}
	return ""
}

// Committer coalesces concurrent writes into shared statements and commits
// (group commit). Callers take turns leading: a caller holding one of the
// slots takes the queued requests, flushes them in one statement, and hands
// each its outcome; the others wait. A put returns only after the commit
// that holds it, so each put is as durable as an unbatched one.
//
// Cancellation: a request cancelled while queued is withdrawn and never
// runs. A request cancelled while its batch runs cancels the batch; the
// batch's other requests are queued again, and the cancelled one reports
// success only if the commit won the race.
type Committer[T Item] struct {
	flush    func(ctx context.Context, batch []*Request[T]) error
	once     bool          // never cancel or rerun a batch (NewOnce)
	slots    chan struct{} // one token per batch in flight
	maxBatch int           // requests
	maxBytes int           // items' sizes; a single larger request still runs

	mu    sync.Mutex
	queue []*Request[T]
	pool  sync.Pool // of *Request[T]
}

type reqState uint8

const (
	stateQueued reqState = iota
	stateTaken
	stateDone
)

// Request is one write waiting for a batch. A flush must not keep Item
// after it returns.
type Request[T Item] struct {
	Item T
	// Err is the request's own outcome, set by a flush that returns nil:
	// a batch may commit while one of its writes does not apply.
	Err error

	done     chan error    // receives the outcome once; buffered
	requeued chan struct{} // nudges the caller to lead again; buffered
	// Guarded by Committer.mu:

	state     reqState
	withdrawn bool               // its caller gave up while it was taken
	cancel    context.CancelFunc // cancels the batch it was taken into
}

// New returns a Committer that runs up to slots flushes at once, each of at
// most maxBatch requests and, unless a single request is larger, maxBytes of
// items' sizes. flush stores a batch in one commit; a batch of one should
// cost no more than an unbatched write.
func New[T Item](slots, maxBatch, maxBytes int, flush func(ctx context.Context, batch []*Request[T]) error) *Committer[T] {
	c := &Committer[T]{flush: flush, slots: make(chan struct{}, slots), maxBatch: maxBatch, maxBytes: maxBytes}
	c.pool.New = func() any { return &Request[T]{done: make(chan error, 1), requeued: make(chan struct{}, 1)} }
	return c
}

// NewOnce is New for writes that must not run twice, such as a
// compare-and-swap, whose second run would fail where the first succeeded:
// its callers' contexts never cancel a batch that has started, and a batch
// is never run again. A caller whose context ends while its batch runs
// waits for the batch, then gets nil if its write committed, else its
// context's error.
func NewOnce[T Item](slots, maxBatch, maxBytes int, flush func(ctx context.Context, batch []*Request[T]) error) *Committer[T] {
	c := New(slots, maxBatch, maxBytes, flush)
	c.once = true
	return c
}

// Put writes item through a batch and returns the outcome of the commit
// that held it: the flush's error, or else the request's own Err. item is
// not used after Put returns.
func (c *Committer[T]) Put(ctx context.Context, item T) error {
	var zero T
	r := c.pool.Get().(*Request[T])
	r.Item, r.Err, r.state, r.withdrawn, r.cancel = item, nil, stateQueued, false, nil
	defer func() {
		r.Item, r.Err, r.cancel = zero, nil, nil
		c.pool.Put(r)
	}()

	c.mu.Lock()
	c.queue = append(c.queue, r)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		state := r.state
		c.mu.Unlock()
		var slots chan struct{} // nil, never ready, unless r may still be led
		if state == stateQueued {
			slots = c.slots
		}
		select {
		case err := <-r.done:
			return err
		case slots <- struct{}{}:
			c.lead(ctx, r)
			<-c.slots
		case <-r.requeued:
			// Queued again after a cancelled batch: lead it, or wait for
			// someone who does. (A stale nudge only costs a loop.)
		case <-ctx.Done():
			return c.withdraw(ctx, r)
		}
	}
}

// withdraw gives up on r after its caller's context ended.
func (c *Committer[T]) withdraw(ctx context.Context, r *Request[T]) error {
	c.mu.Lock()
	switch r.state {
	case stateQueued:
		c.queue = slices.DeleteFunc(c.queue, func(q *Request[T]) bool { return q == r })
		c.mu.Unlock()
		return ctx.Err()
	case stateTaken:
		r.withdrawn = true
		if r.cancel != nil {
			r.cancel()
		}
	}
	c.mu.Unlock()
	// The batch ends promptly once cancelled; r's buffer is in use until then.
	if err := <-r.done; err != nil {
		return ctx.Err()
	}
	return nil // the commit won the race with the cancellation
}

// lead flushes one batch of queued requests on behalf of their callers.
func (c *Committer[T]) lead(ctx context.Context, own *Request[T]) {
	if ctx.Err() != nil {
		return // a batch under this ctx would only fail; Put withdraws own
	}
	c.mu.Lock()
	batch := c.take()
	if len(batch) == 0 {
		c.mu.Unlock()
		return
	}
	flushCtx := ctx
	switch {
	case c.once:
		flushCtx = context.WithoutCancel(ctx)
	case len(batch) > 1 || batch[0] != own:
		var cancel context.CancelFunc
		flushCtx, cancel = context.WithCancel(ctx)
		defer cancel()
		for _, r := range batch {
			r.cancel = cancel
		}
	}
	for _, r := range batch {
		r.state = stateTaken
	}
	c.mu.Unlock()

	err := c.flush(flushCtx, batch)

	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil && own.state == stateTaken {
		own.withdrawn = true
	}
	var retry []*Request[T]
	for _, r := range batch {
		r.cancel = nil
		if err != nil && flushCtx.Err() != nil && !r.withdrawn {
			// The batch died of another caller's cancellation, not of
			// anything wrong with r: queue it again.
			r.state = stateQueued
			retry = append(retry, r)
			select {
			case r.requeued <- struct{}{}: // its caller may be waiting only for done
			default:
			}
			continue
		}
		r.state = stateDone
		if err == nil {
			r.done <- r.Err
		} else {
			r.done <- err
		}
	}
	if len(retry) > 0 {
		c.queue = append(retry, c.queue...)
	}
}

// take removes the next batch from the queue, in queue order: up to
// maxBatch requests and, past the first, maxBytes of sizes, passing over
// (and leaving queued, in order) any whose key an earlier one in the batch
// has. The caller holds mu.
func (c *Committer[T]) take() []*Request[T] {
	var batch []*Request[T]
	var keys map[string]bool
	size, kept := 0, 0
	for i, r := range c.queue {
		if len(batch) == c.maxBatch || len(batch) > 0 && size+r.Item.Size() > c.maxBytes {
			kept += copy(c.queue[kept:], c.queue[i:])
			break
		}
		if k := r.Item.BatchKey(); k != "" {
			if keys[k] {
				c.queue[kept] = r
				kept++
				continue
			}
			if keys == nil {
				keys = make(map[string]bool)
			}
			keys[k] = true
		}
		size += r.Item.Size()
		batch = append(batch, r)
	}
	clear(c.queue[kept:])
	c.queue = c.queue[:kept]
	return batch
}
