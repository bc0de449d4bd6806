package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/steadkit/stead/internal/wake"
	"github.com/steadkit/stead/steaderr"
)

// Reconnection backoff of the listener.
const (
	minRelisten = 50 * time.Millisecond
	maxRelisten = 5 * time.Second
	// defaultProveEvery is how long the listener's connection may stay
	// quiet before it proves it is alive, and how long the proof may take:
	// a connection cut without a word (a half-open TCP connection) is
	// noticed within twice this, and waiters poll from then on.
	defaultProveEvery = 5 * time.Second
)

// listener is the engine's one LISTEN connection, shared by every lock
// waiter and record claimer: a dedicated connection, not a pooled one,
// which the pool could recycle or hand to another caller while it listens.
// It starts with the first watch, listens on every channel the engine
// notifies, and reconnects with backoff when its connection drops. It wakes
// every watcher whenever it starts or stops listening, since notifications
// may have gone unheard meanwhile. In PgBouncer mode it connects only to a
// direct listen URL, if given: a LISTEN on a pooled server session would be
// lost, so without one the engine has no listener and waiters poll.
//
// A quiet connection proves it is alive every proveEvery by running its
// LISTEN statement again (a no-op for a listening session); a proof that
// fails or takes longer than proveEvery drops the connection, so a dead
// peer that sent no FIN or RST cannot leave waiters asleep.
type listener struct {
	connect    func(context.Context) (*pgx.Conn, error)
	log        *slog.Logger
	query      string   // LISTEN on every channel, one statement
	hub        wake.Hub // keyed by channel and payload
	proveEvery time.Duration

	mu      sync.Mutex
	live    bool // listening now
	started bool
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// newListener listens on channels over connections connect opens, which
// must apply listenAdjust to their configuration.
func newListener(connect func(context.Context) (*pgx.Conn, error), log *slog.Logger, channels ...string) *listener {
	stmts := make([]string, len(channels))
	for i, ch := range channels {
		stmts[i] = "LISTEN " + pgx.Identifier{ch}.Sanitize()
	}
	return &listener{connect: connect, log: log, query: strings.Join(stmts, "; "), proveEvery: defaultProveEvery}
}

// listenAdjust makes a quiet wait end by its deadline, leaving the
// connection usable, whatever handler the caller's configuration chose (a
// cancel-request handler would send the server a cancel at every proof).
func listenAdjust(cc *pgx.ConnConfig) {
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
}

func hubKey(channel, payload string) string { return channel + "\x00" + payload }

// watch subscribes to notifications on channel carrying payload, starting
// the listener if needed. live reports whether it is listening now; until
// it is, notifications may be missed and the caller should poll. After
// stop, watch fails with steaderr.ErrClosed.
func (l *listener) watch(channel, payload string) (ch <-chan struct{}, live bool, stop func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return nil, false, func() {}, steaderr.ErrClosed
	}
	ch, stop = l.hub.Subscribe(hubKey(channel, payload))
	if !l.started {
		l.started = true
		var ctx context.Context
		ctx, l.cancel = context.WithCancel(context.Background())
		l.done = make(chan struct{})
		go l.run(ctx)
	}
	return ch, l.live, stop, nil
}

// wake wakes the watchers of channel and payload, as a notification
// would.
func (l *listener) wake(channel, payload string) { l.hub.Wake(hubKey(channel, payload)) }

// stop ends the listener for good and waits for it. It wakes every
// watcher, so that waiters look again and learn that the engine is closed.
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
		listened, err := l.listen(ctx)
		l.setLive(false)
		if listened {
			delay = minRelisten
		}
		if ctx.Err() == nil {
			l.log.LogAttrs(ctx, slog.LevelWarn, "stead: postgres: the LISTEN connection failed; waiters poll until it is back",
				slog.Bool("was_listening", listened), slog.Duration("retry_in", delay), slog.Any("error", err))
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
// connection fails or ctx ends; it reports whether it got to listen, and
// why it stopped.
func (l *listener) listen(ctx context.Context) (listened bool, err error) {
	connectCtx, cancel := context.WithTimeout(ctx, 2*l.proveEvery)
	conn, err := l.connect(connectCtx)
	cancel()
	if err != nil {
		return false, err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}()
	listenCtx, cancel := context.WithTimeout(ctx, l.proveEvery)
	_, err = conn.Exec(listenCtx, l.query)
	cancel()
	if err != nil {
		return false, err
	}
	l.setLive(true)
	for {
		quiet, cancel := context.WithTimeout(ctx, l.proveEvery)
		n, err := conn.WaitForNotification(quiet)
		cancel()
		switch {
		case err == nil:
			l.hub.Wake(hubKey(n.Channel, n.Payload))
			continue
		case ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded):
			return true, err // stopped, or the connection failed
		}
		proof, cancel := context.WithTimeout(ctx, l.proveEvery)
		_, err = conn.Exec(proof, l.query)
		cancel()
		if err != nil {
			return true, err
		}
	}
}

// setLive records whether the listener is listening and wakes every
// watcher, so each looks again.
func (l *listener) setLive(live bool) {
	l.mu.Lock()
	l.live = live
	l.mu.Unlock()
	l.hub.WakeAll()
}
