// Package wake fans wake-ups out to subscribers by name.
package wake

import (
	"context"
	"sync"
	"time"
)

// Hub delivers Wake(name) to the subscribers of name and WakeAll to every
// subscriber. A subscriber that has not yet taken an earlier wake-up gets
// one pending wake-up, not many: wake-ups say "look again", never "how
// many times". The zero Hub is ready to use.
type Hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe returns a channel that receives after each later Wake(name) or
// WakeAll, and stop, which unsubscribes.
func (h *Hub) Subscribe(name string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = make(map[string]map[chan struct{}]struct{})
	}
	if h.subs[name] == nil {
		h.subs[name] = make(map[chan struct{}]struct{})
	}
	h.subs[name][ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[name], ch)
		if len(h.subs[name]) == 0 {
			delete(h.subs, name)
		}
	}
}

// Wake wakes the subscribers of name.
func (h *Hub) Wake(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[name] {
		signal(ch)
	}
}

// WakeAll wakes every subscriber.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, chans := range h.subs {
		for ch := range chans {
			signal(ch)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Sleep waits for a value on ch, for d (a negative d: no limit) or for ctx
// to end, whose error it returns.
func Sleep(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	var timeout <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ch:
	case <-timeout:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}
