package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listener reconnect backoff: from listenRetryMin, doubling to
// listenRetryMax.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 5 * time.Second
)

// listener is the engine's one LISTEN connection: a dedicated pgx.Conn,
// outside the pool, started by the first subscriber and kept until Close.
// Saves that make a record claimable call pg_notify(channel, group) on
// commit; the listener hands each notification to the group's
// subscribers. When the connection drops it reconnects with backoff;
// subscribers are woken when it drops (they poll meanwhile) and when it is
// listening again (they look again, as notifications may have been lost).
// In PgBouncer mode there is no listener: a LISTEN on a pooled server
// session would be lost, so waiters poll.
type listener struct {
	e       *Engine
	channel string

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{} // by group
	live    bool
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func (l *listener) init(e *Engine, channel string) {
	l.e, l.channel = e, channel
	l.subs = make(map[string]map[chan struct{}]struct{})
}

// subscribe implements record.Engine.Subscribe.
func (l *listener) subscribe(group string) (<-chan struct{}, bool, func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.e.pgbouncer {
		return nil, false, func() {}
	}
	if !l.started {
		l.started = true
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.run(ctx)
	}
	ch := make(chan struct{}, 1)
	if l.subs[group] == nil {
		l.subs[group] = make(map[chan struct{}]struct{})
	}
	l.subs[group][ch] = struct{}{}
	stop := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.subs[group], ch)
		if len(l.subs[group]) == 0 {
			delete(l.subs, group)
		}
	}
	return ch, l.live, stop
}

// close stops the listener and waits for it.
func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	started := l.started
	l.mu.Unlock()
	if started {
		l.cancel()
		<-l.done
	}
}

// run keeps a listening connection until ctx ends.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	retry := listenRetryMin
	for {
		listened := l.listen(ctx)
		l.setLive(false)
		if listened {
			retry = listenRetryMin
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(2*retry, listenRetryMax)
	}
}

// listen connects, listens and dispatches notifications until the
// connection fails or ctx ends; it reports whether it got to listen.
func (l *listener) listen(ctx context.Context) (listened bool) {
	cfg := l.e.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "stead records listener"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return false
	}
	l.setLive(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		l.wake(n.Payload)
	}
}

// setLive records whether the listener is listening and wakes every
// subscriber, so each looks again.
func (l *listener) setLive(live bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live = live
	for _, subs := range l.subs {
		for ch := range subs {
			signal(ch)
		}
	}
}

// wake wakes group's subscribers.
func (l *listener) wake(group string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs[group] {
		signal(ch)
	}
}

// signal sends on ch unless a signal is already pending.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
