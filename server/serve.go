package server

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/steadkit/stead/internal/clientaddr"
	"github.com/steadkit/stead/steaderr"
)

// maxHeaderBytes bounds a request's headers.
const maxHeaderBytes = 64 << 10

// Serve answers requests on ln until ctx ends, then shuts down: it stops
// accepting, finishes the requests in flight for up to ShutdownGrace,
// cuts off uploads that stall meanwhile, and closes what is left.
//
// Every connection is bounded in time: headers within 10s (or
// RequestTimeout, if shorter), request bodies (uploads and JSON) at
// MinBodyRate after BodyGrace, a non-streamed answer within RequestTimeout
// of its body, each write of a stream within RequestTimeout, and an idle
// keep-alive within IdleTimeout. Shutdown cuts off bodies that stall and
// ends long polls and lock waits with their "not yet" answer.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: min(10*time.Second, s.opts.RequestTimeout),
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          nil,
	}
	srv.RegisterOnShutdown(s.startDrain)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(limitListener(ln, s.opts.MaxConns, s.opts.MaxConnsPerClient)) }()
	if s.opts.GCInterval > 0 {
		t := time.NewTicker(s.opts.GCInterval)
		defer t.Stop()
		sweeping, stopSweeps := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.collect(sweeping, t.C) }()
		defer func() { stopSweeps(); <-done }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if err != nil {
		err = errors.Join(err, srv.Close())
	}
	if serveErr := <-errc; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// limitListener returns ln accepting at most n connections open at once,
// and at most perClient from one client (clientaddr.Of): one more from it
// is closed as soon as it is accepted.
func limitListener(ln net.Listener, n, perClient int) net.Listener {
	return &limited{Listener: ln, slots: make(chan struct{}, n), perClient: perClient, open: map[string]int{}, done: make(chan struct{})}
}

type limited struct {
	net.Listener
	slots     chan struct{}
	perClient int
	mu        sync.Mutex
	open      map[string]int // connections open, by client
	done      chan struct{}
	once      sync.Once
}

func (l *limited) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		client := clientaddr.Of(c.RemoteAddr().String())
		l.mu.Lock()
		full := l.open[client] >= l.perClient
		if !full {
			l.open[client]++
		}
		l.mu.Unlock()
		if full {
			c.Close()
			<-l.slots
			continue
		}
		return &limitedConn{Conn: c, release: func() {
			l.mu.Lock()
			if l.open[client]--; l.open[client] == 0 {
				delete(l.open, client)
			}
			l.mu.Unlock()
			<-l.slots
		}}, nil
	}
}

func (l *limited) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// unavailable reports whether err says the database cannot be reached
// now, rather than that the request is wrong: connection failures and
// the PostgreSQL errors of a server going away. It is the one place that
// classifies driver errors; engines that wrap such errors in
// steaderr.ErrUnavailable make it a plain errors.Is.
func unavailable(err error) bool {
	var (
		opErr   *net.OpError
		connErr *pgconn.ConnectError
		pgErr   *pgconn.PgError
	)
	switch {
	case errors.Is(err, steaderr.ErrUnavailable):
		return true
	case errors.As(err, &connErr), errors.As(err, &opErr), errors.Is(err, driver.ErrBadConn):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		// A connection dropped mid-statement; request bodies' errors are
		// told apart before this (bodyError).
		return true
	case errors.As(err, &pgErr):
		// 08: connection exception; 57P01-57P03: shutting down, crashed,
		// cannot connect now; 53300: too many connections.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") || pgErr.Code == "53300"
	}
	return pgconn.SafeToRetry(err) || strings.Contains(err.Error(), "conn closed")
}

// IsLoopback reports whether addr (host:port) binds only the loopback
// interface: its host is "localhost" or a loopback IP address. A host name
// other than localhost is not loopback, whatever it resolves to.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
