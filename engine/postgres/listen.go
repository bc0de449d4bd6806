package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/internal/wake"
	"github.com/steadkit/stead/steaderr"
)

// Reconnection backoff of the listener.
const (
	minRelisten = 50 * time.Millisecond
	maxRelisten = 5 * time.Second
)

// listener is the engine's one LISTEN connection, shared by every lock
// waiter: a dedicated connection, not a pooled one, which the pool could
// recycle or hand to another caller while it listens. It starts with the
// first watch and reconnects when its connection drops. Whenever it starts
// listening it wakes every watcher, since releases may have gone unheard
// while it was not.
type listener struct {
	connConfig *pgx.ConnConfig
	channel    string
	hub        wake.Hub

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// watch subscribes to releases of name, starting the listener if needed.
func (l *listener) watch(name string) (<-chan struct{}, func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return nil, func() {}, steaderr.ErrClosed
	}
	ch, stop := l.hub.Subscribe(name)
	if !l.started {
		l.started = true
		var ctx context.Context
		ctx, l.cancel = context.WithCancel(context.Background())
		l.done = make(chan struct{})
		go l.run(ctx)
	}
	return ch, stop, nil
}

// stop ends the listener for good and waits for it. It wakes every
// watcher, so that waiters retry and learn that the engine is closed.
func (l *listener) stop() {
	l.mu.Lock()
	l.stopped = true
	started := l.started
	l.mu.Unlock()
	if started {
		l.cancel()
		<-l.done
	}
	l.hub.WakeAll()
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	delay := minRelisten
	for {
		if l.listen(ctx) {
			delay = minRelisten
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		delay = min(2*delay, maxRelisten)
	}
}

// listen connects, listens and dispatches notifications until the
// connection fails or ctx ends; it reports whether it got to listen.
func (l *listener) listen(ctx context.Context) (listened bool) {
	conn, err := pgx.ConnectConfig(ctx, l.connConfig.Copy())
	if err != nil {
		return false
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return false
	}
	l.hub.WakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		l.hub.Wake(n.Payload)
	}
}
