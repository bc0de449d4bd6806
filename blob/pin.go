package blob

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/steadkit/stead/steaderr"
)

// pinTable is what a Store knows, in process, of the pins its owner holds.
// A put's pin and every Pin guard on one key share one (key, owner) row, so
// they are counted here: the row is removed only when no guard holds it, no
// put or pin is in flight, and no put's pin is still within its TTL.
// Deadlines are measured from before the statement that set them was sent,
// on the local clock, so they are never later than the stored expiry
// (docs/decisions/0008-timestamps.md).
type pinTable struct {
	owner string
	ttl   time.Duration
	now   func() time.Time // nil: the system clock, and the engine's clock for stored expiries

	mu      sync.Mutex
	held    map[Key]*held
	cleanAt int // len(held) at which expired entries are dropped
	// closed is closed by Store.Close: guards stop renewing, lost.
	closed    chan struct{}
	closeOnce sync.Once
}

// held is the state of one (key, owner) row.
type held struct {
	// deadline is the latest local deadline of any write of the row.
	deadline time.Time
	// putDeadline is the latest local deadline set by a put.
	putDeadline time.Time
	guards      int // live Pin guards
	inflight    int // puts and pins sent and not yet returned
	// unpinning is closed when a running removal of the row ends; writes
	// of the key wait for it, so a removal never lands after them.
	unpinning chan struct{}
}

// clock returns the local time a request is sent at and the Now to pass to
// the engine (zero: the engine's clock).
func (t *pinTable) clock() (sent, now time.Time) {
	if t.now == nil {
		return time.Now(), time.Time{}
	}
	now = t.now().Truncate(time.Microsecond)
	return now, now
}

func (t *pinTable) engineNow() time.Time {
	_, now := t.clock()
	return now
}

// begin registers a write of key in flight, after any removal of its row
// ends. It returns the row's state and the send time.
func (t *pinTable) begin(ctx context.Context, key Key) (*held, time.Time, error) {
	t.mu.Lock()
	for {
		h := t.held[key]
		if h == nil {
			h = &held{}
			t.held[key] = h
		}
		if h.unpinning == nil {
			h.inflight++
			t.mu.Unlock()
			sent, _ := t.clock()
			return h, sent, nil
		}
		wait := h.unpinning
		t.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, time.Time{}, ctx.Err()
		}
		t.mu.Lock()
	}
}

// end records the outcome of a write begun by begin.
func (t *pinTable) end(key Key, h *held, ok bool, deadline time.Time, guard, put bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h.inflight--
	if ok {
		if deadline.After(h.deadline) {
			h.deadline = deadline
		}
		if put && deadline.After(h.putDeadline) {
			h.putDeadline = deadline
		}
		if guard {
			h.guards++
		}
	}
	t.forget(key, h)
}

// forget drops key's entry when it protects nothing any more, and now and
// then every such entry, so the table does not grow with keys put long ago.
// Called with mu held.
func (t *pinTable) forget(key Key, h *held) {
	sent, _ := t.clock()
	idle := func(h *held) bool {
		return h.guards == 0 && h.inflight == 0 && h.unpinning == nil && !h.deadline.After(sent)
	}
	if idle(h) {
		delete(t.held, key)
	}
	if len(t.held) >= t.cleanAt {
		for k, h := range t.held {
			if idle(h) {
				delete(t.held, k)
			}
		}
		t.cleanAt = 2*len(t.held) + 1024
	}
}

// put stores value under key through eng, pinned, unless this owner's pin
// on key has more than half its TTL left: then the live pin keeps the blob
// stored and nothing is written (skipped); a read confirms it (and answers
// for a closed engine), and a blob found absent is put after all. created
// is the engine's Put's report; a skipped put created nothing. With via
// set, the put is sent through via instead of eng.Put, and never skipped:
// via commits more than the put.
func (t *pinTable) put(ctx context.Context, eng Backend, p PutParams, via func(context.Context, PutParams) (bool, error)) (created, skipped bool, err error) {
	key := p.Key
	h, sent, err := t.begin(ctx, key)
	if err != nil {
		return false, false, err
	}
	send := via
	if send == nil {
		send = eng.Put
	}
	t.mu.Lock()
	// A put declaring children writes its edges whatever its pin.
	hot := h.deadline.Sub(sent) > t.ttl/2 && len(p.Children) == 0 && via == nil
	t.mu.Unlock()
	if hot {
		_, err := eng.Stat(ctx, key)
		if !errors.Is(err, steaderr.ErrNotFound) {
			// The live pin stands in for this put's: a guard's release
			// must not end it before its deadline.
			t.mu.Lock()
			deadline := h.deadline
			t.mu.Unlock()
			t.end(key, h, err == nil, deadline, false, true)
			return false, err == nil, err
		}
	}
	_, now := t.clock()
	p.Owner, p.TTL, p.Now = t.owner, t.ttl, now
	created, err = send(ctx, p)
	t.end(key, h, err == nil, sent.Add(t.ttl), false, true)
	return created, false, err
}

// Pin is a guard on one key: it keeps the key's blob from being deleted
// while it is held, renewing the store's pin every PinTTL/3 until Release.
// If a renewal finds the pin expired or absent, or cannot reach the engine
// before the pin's deadline, the guard is lost: Lost is closed and Release
// returns an error wrapping ErrLost. The caller must then not go on to
// reference the key as if it were protected.
type Pin struct {
	t    *pinTable
	eng  Backend
	key  Key
	lost chan struct{}
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	deadline time.Time
	err      error // why the guard was lost
	released bool
}

// Pin pins key, which must be stored (else an error wrapping ErrNotFound),
// and returns a guard renewing the pin until Release. Pinning takes the
// same row lock a put does, so "it exists: skip the upload, reference it"
// is safe for a caller that pins first: either the pin commits before any
// deletion of the key, or Pin reports ErrNotFound.
func (s *Store) Pin(ctx context.Context, key Key) (*Pin, error) {
	if err := checkKey(ctx, key); err != nil {
		return nil, fmt.Errorf("blob pin: %w", err)
	}
	t := s.pins
	h, sent, err := t.begin(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("blob pin %s: %w", key, err)
	}
	_, now := t.clock()
	err = s.eng.Pin(ctx, PinParams{Key: key, Owner: t.owner, TTL: t.ttl, Now: now})
	t.end(key, h, err == nil, sent.Add(t.ttl), true, false)
	if err != nil {
		return nil, fmt.Errorf("blob pin %s: %w", key, err)
	}
	p := &Pin{t: t, eng: s.eng, key: key, deadline: sent.Add(t.ttl),
		lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go p.renew()
	return p, nil
}

// Key returns the pinned key.
func (p *Pin) Key() Key { return p.key }

// Lost is closed when the guard is lost.
func (p *Pin) Lost() <-chan struct{} { return p.lost }

// renew renews the pin every TTL/3; after a failed attempt it tries again
// sooner, until the deadline passes.
func (p *Pin) renew() {
	defer close(p.done)
	ttl := p.t.ttl
	wait := ttl / 3
	for {
		timer := time.NewTimer(wait)
		select {
		case <-p.stop:
			timer.Stop()
			return
		case <-p.t.closed:
			timer.Stop()
			p.fail(fmt.Errorf("%w: pin on %s: %w", steaderr.ErrLost, p.key, steaderr.ErrClosed))
			return
		case <-timer.C:
		}
		sent, now := p.t.clock()
		p.mu.Lock()
		deadline := p.deadline
		p.mu.Unlock()
		if !sent.Before(deadline) {
			p.fail(fmt.Errorf("%w: pin on %s not renewed before its deadline", steaderr.ErrLost, p.key))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), deadline.Sub(sent))
		h, _, err := p.t.begin(ctx, p.key)
		ok := false
		if err == nil {
			ok, err = p.eng.RenewPin(ctx, PinParams{Key: p.key, Owner: p.t.owner, TTL: ttl, Now: now})
			p.t.end(p.key, h, ok && err == nil, sent.Add(ttl), false, false)
		}
		cancel()
		switch {
		case err == nil && ok:
			p.mu.Lock()
			p.deadline = sent.Add(ttl)
			p.mu.Unlock()
			wait = ttl / 3
		case err == nil:
			p.fail(fmt.Errorf("%w: pin on %s expired or removed before it was renewed", steaderr.ErrLost, p.key))
			return
		case errors.Is(err, steaderr.ErrClosed):
			p.fail(fmt.Errorf("%w: pin on %s: %w", steaderr.ErrLost, p.key, err))
			return
		default:
			wait = max(ttl/30, time.Millisecond) // try again before the deadline
		}
	}
}

func (p *Pin) fail(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.lost)
}

// Release ends the guard. The store's pin row is removed unless another
// guard, a put in flight or a put's pin within its TTL still protects the
// key. It returns an error wrapping ErrLost if the guard was lost before
// Release; releasing twice is an error wrapping ErrInvalidArgument.
func (p *Pin) Release(ctx context.Context) error {
	p.mu.Lock()
	if p.released {
		p.mu.Unlock()
		return fmt.Errorf("blob pin %s: %w: released twice", p.key, steaderr.ErrInvalidArgument)
	}
	p.released = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	t := p.t
	// The renewals may have run late (a stalled process, a starved
	// scheduler): a deadline passed without a confirmed renewal loses the
	// guard even though no renewal reported it.
	sent, _ := t.clock()
	p.mu.Lock()
	if p.err == nil && !sent.Before(p.deadline) {
		p.err = fmt.Errorf("%w: pin on %s not renewed before its deadline", steaderr.ErrLost, p.key)
		close(p.lost)
	}
	lostErr := p.err
	p.mu.Unlock()

	t.mu.Lock()
	h := t.held[p.key]
	h.guards--
	if h.guards > 0 || h.inflight > 0 || h.putDeadline.After(sent) || h.unpinning != nil {
		t.forget(p.key, h)
		t.mu.Unlock()
		return lostErr
	}
	unpinning := make(chan struct{})
	h.unpinning = unpinning
	t.mu.Unlock()

	err := p.eng.Unpin(ctx, UnpinParams{Key: p.key, Owner: t.owner})

	t.mu.Lock()
	h.unpinning = nil
	// Even a failed removal may have committed: trust no deadline of the
	// row any more.
	h.deadline = time.Time{}
	close(unpinning)
	t.forget(p.key, h)
	t.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("blob unpin %s: %w", p.key, err)
	}
	return errors.Join(lostErr, err)
}
