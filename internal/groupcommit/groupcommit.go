// Package groupcommit coalesces concurrent puts into shared statements and
// commits. Engines supply the flush; the queueing, leadership and
// cancellation rules live here, once.
package groupcommit

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Committer coalesces concurrent puts into shared statements and commits
// (group commit). Callers take turns leading: a caller holding one of the
// slots takes the queued requests, flushes them in one statement, and hands
// each its outcome; the others wait. A put returns only after the commit
// that holds it, so each put is as durable as an unbatched one.
//
// Cancellation: a request cancelled while queued is withdrawn and never
// runs. A request cancelled while its batch runs cancels the batch; the
// batch's other requests are queued again, and the cancelled one reports
// success only if the commit won the race.
type Committer struct {
	flush    func(ctx context.Context, batch []*Request) error
	slots    chan struct{} // one token per batch in flight
	maxBatch int           // requests
	maxBytes int           // values' bytes; a single larger request still runs

	mu    sync.Mutex
	queue []*Request
}

type reqState uint8

const (
	stateQueued reqState = iota
	stateTaken
	stateDone
)

// Pin is the pin a put takes on its key in the commit that stores it:
// Owner's pin, expiring TTL after Now (zero Now: the engine's clock).
type Pin struct {
	Owner string
	TTL   time.Duration
	Now   time.Time
}

// Request is one put waiting for a batch. A flush reads Key, Value and Pin
// and must not keep Value after it returns.
type Request struct {
	Key   string
	Value []byte
	Pin   Pin

	done     chan error    // receives the outcome once; buffered
	requeued chan struct{} // nudges the caller to lead again; buffered
	// Guarded by Committer.mu:

	state     reqState
	withdrawn bool               // its caller gave up while it was taken
	cancel    context.CancelFunc // cancels the batch it was taken into
}

var reqPool = sync.Pool{New: func() any {
	return &Request{done: make(chan error, 1), requeued: make(chan struct{}, 1)}
}}

// New returns a Committer that runs up to slots flushes at once, each of at
// most maxBatch requests and, unless a single request is larger, maxBytes of
// values. flush stores a batch in one commit; a batch of one should cost no
// more than an unbatched put.
func New(slots, maxBatch, maxBytes int, flush func(ctx context.Context, batch []*Request) error) *Committer {
	return &Committer{flush: flush, slots: make(chan struct{}, slots), maxBatch: maxBatch, maxBytes: maxBytes}
}

// Put stores value under key, pinned by pin, through a batch and returns
// the outcome of the commit that held it. value is not used after Put
// returns.
func (c *Committer) Put(ctx context.Context, key string, value []byte, pin Pin) error {
	r := reqPool.Get().(*Request)
	r.Key, r.Value, r.Pin, r.state, r.withdrawn, r.cancel = key, value, pin, stateQueued, false, nil
	defer func() {
		r.Key, r.Value, r.Pin, r.cancel = "", nil, Pin{}, nil
		reqPool.Put(r)
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
func (c *Committer) withdraw(ctx context.Context, r *Request) error {
	c.mu.Lock()
	switch r.state {
	case stateQueued:
		c.queue = slices.DeleteFunc(c.queue, func(q *Request) bool { return q == r })
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
func (c *Committer) lead(ctx context.Context, own *Request) {
	if ctx.Err() != nil {
		return // a batch under this ctx would only fail; Put withdraws own
	}
	c.mu.Lock()
	n, size := 0, 0
	for n < len(c.queue) && n < c.maxBatch && (n == 0 || size+len(c.queue[n].Value) <= c.maxBytes) {
		size += len(c.queue[n].Value)
		n++
	}
	if n == 0 {
		c.mu.Unlock()
		return
	}
	batch := slices.Clone(c.queue[:n])
	c.queue = append(c.queue[:0], c.queue[n:]...)
	flushCtx := ctx
	if len(batch) > 1 || batch[0] != own {
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
	var retry []*Request
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
		r.done <- err
	}
	if len(retry) > 0 {
		c.queue = append(retry, c.queue...)
	}
}
