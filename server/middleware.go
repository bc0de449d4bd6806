package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/server/access"
)

// ServeHTTP serves one request: routing, deadlines, metrics, and JSON for
// the errors net/http would answer in plain text.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &responseWriter{ResponseWriter: w, status: http.StatusOK}
	rc := http.NewResponseController(rw)
	// Streams and long polls move these deadlines as they progress.
	_ = rc.SetReadDeadline(start.Add(s.opts.RequestTimeout))
	_ = rc.SetWriteDeadline(start.Add(s.opts.RequestTimeout))
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	rw.dbTimer = time.AfterFunc(s.dbTimeout(), func() { cancel(errDatabaseTimeout) })
	defer rw.dbTimer.Stop()
	p := r.URL.EscapedPath()
	clean := p == cleanPath(p)
	var m Mount
	direct := false
	if clean {
		m, direct = s.directMount(p)
	}
	// The route label: the mount's prefix, else the pattern the mux
	// routes to (its ServeHTTP sets r.Pattern and the path values).
	pattern := ""
	s.metrics.inFlight.Inc()
	defer func() {
		if pattern == "" {
			pattern = r.Pattern
		}
		if pattern == "" {
			pattern = "unmatched"
		}
		s.metrics.inFlight.Dec()
		s.metrics.observe(pattern, rw.status, time.Since(start))
		if s.opts.AccessLog != nil {
			s.logAccess(r, pattern, rw, time.Since(start))
		}
	}()
	if direct {
		// One copy of the request for the server's context and the
		// caller's both.
		ctx = s.callerContext(rw, r, ctx)
	}
	r = r.WithContext(ctx)
	if r.Body != nil && r.ContentLength != 0 {
		rw.body = &trackedBody{ReadCloser: r.Body}
		r.Body = rw.body
	}
	switch {
	case !clean:
		_, pattern = s.mux.Handler(r)
		// net/http would redirect to the clean path with an HTML body.
		writeError(rw, wire.CodeNotFoundRoute, "no such route")
	case direct:
		pattern, r.Pattern = m.Prefix, m.Prefix
		s.serveMount(m, rw, r)
	default:
		s.mux.ServeHTTP(rw, r)
	}
}

// noteCaller records c's name on w for the access log.
func noteCaller(w http.ResponseWriter, c *access.Caller) {
	if rw, ok := w.(*responseWriter); ok && c != nil {
		rw.identity = c.Name()
	}
}

// logAccess writes r's line to the access log.
func (s *Server) logAccess(r *http.Request, route string, rw *responseWriter, took time.Duration) {
	identity := rw.identity
	if identity == "" {
		identity = "-"
	}
	s.opts.AccessLog.LogAttrs(r.Context(), slog.LevelInfo, "access",
		slog.String("method", r.Method), slog.String("route", route), slog.Int("status", rw.status),
		slog.Int64("bytes", rw.n), slog.Duration("duration", took),
		slog.String("client", clientOf(r)), slog.String("identity", identity))
}

// cleanPath is p without dot segments or doubled slashes, keeping a
// trailing slash, as net/http's mux cleans it.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	cp := path.Clean(p)
	if strings.HasSuffix(p, "/") && cp != "/" {
		cp += "/"
	}
	return cp
}

// responseWriter records the status and turns net/http's plain-text
// errors (unknown route, wrong method, unsatisfiable range) into JSON.
type responseWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	swallow     bool // the plain-text body being replaced
	n           int64
	stall       time.Duration // when set, each write must finish within it
	dbTimer     *time.Timer   // ends the request's context with errDatabaseTimeout
	// size, when set, is the length of the representation a range of it
	// was asked for: a 416 answer without Content-Range gets "bytes */size"
	// (RFC 9110 15.5.17), which net/http omits for a malformed Range.
	size string
	// raw leaves a front end's answers as it writes them (Mount): no
	// plain-text error is turned into the API's JSON.
	raw bool
	// identity is who the request authenticated as, for the access log
	// ("" when it did not, or sent no credentials).
	identity string
	// body is the request body, when it has one: an error answer before
	// its end gives the rest refusalRead to arrive, so that a refusal is
	// not held up by a body that stalls.
	body *trackedBody
}

// refusalRead is how long the rest of a refused request's body may take
// to arrive before the refusal is answered and the connection closed.
const refusalRead = 250 * time.Millisecond

// trackedBody is a request body that knows whether it was read to its end.
type trackedBody struct {
	io.ReadCloser
	ended atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.ended.Store(true)
	}
	return n, err
}

// errDatabaseTimeout ends a request's context when its database work
// outlasts dbTimeout.
var errDatabaseTimeout = errors.New("database did not answer in time")

// dbTimeout is how long a request's database work may take: half the
// request timeout, so that its 503 is written before the write deadline.
func (s *Server) dbTimeout() time.Duration { return s.opts.RequestTimeout / 2 }

// moreDBTime restarts w's database deadline at d from now; d < 0 removes
// it.
func moreDBTime(w http.ResponseWriter, d time.Duration) {
	rw, ok := w.(*responseWriter)
	if !ok || rw.dbTimer == nil {
		return
	}
	if d < 0 {
		rw.dbTimer.Stop()
		return
	}
	rw.dbTimer.Reset(d)
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *responseWriter) WriteHeader(status int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader, w.status = true, status
	h := w.Header()
	if status >= 400 && w.body != nil && !w.body.ended.Load() {
		// net/http reads what is left of a small body before it answers,
		// so that the connection can serve another request: a body that
		// stalls gets refusalRead to arrive, then the connection closes.
		_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now().Add(refusalRead))
	}
	if status == http.StatusRequestedRangeNotSatisfiable && w.size != "" && h.Get("Content-Range") == "" {
		h.Set("Content-Range", "bytes */"+w.size)
	}
	if status >= 400 && !w.raw && strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		code := wire.CodeBadRequest
		switch status {
		case http.StatusNotFound:
			code = wire.CodeNotFoundRoute
		case http.StatusMethodNotAllowed:
			code = wire.CodeMethodNotAllowed
		case http.StatusRequestedRangeNotSatisfiable:
			code = wire.CodeRangeNotSatisfiable
		case http.StatusPreconditionFailed:
			code = wire.CodeConflict
		}
		b := errorBody(wire.Error{Error: http.StatusText(status), Code: code})
		h.Set("Content-Type", "application/json")
		h.Set(wire.CodeHeader, code)
		h.Del("X-Content-Type-Options")
		h.Del("Content-Length")
		w.ResponseWriter.WriteHeader(status)
		n, _ := w.ResponseWriter.Write(b)
		w.n += int64(n)
		w.swallow = true
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.swallow {
		return len(p), nil
	}
	if w.stall > 0 {
		_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.stall))
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *responseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// FlushError is Flush reporting a write that failed; http.ResponseController
// prefers it to Flush.
func (w *responseWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// clientGone reports that r's client left before its answer: its context
// ended, and not for the database deadline.
func clientGone(r *http.Request) bool {
	return r.Context().Err() != nil && !errors.Is(context.Cause(r.Context()), errDatabaseTimeout)
}

// stream makes w a stream: no overall deadline, but each write must
// finish within the request timeout. The read deadline goes too: net/http
// reads on in the background to notice a client leaving, and a deadline
// there would cancel the request mid-stream.
func (s *Server) stream(w http.ResponseWriter) {
	moreDBTime(w, -1)
	if rw, ok := w.(*responseWriter); ok {
		rw.stall = s.opts.RequestTimeout
		rc := http.NewResponseController(rw.ResponseWriter)
		_ = rc.SetWriteDeadline(time.Now().Add(s.opts.RequestTimeout))
		_ = rc.SetReadDeadline(time.Time{})
	}
}

// wait gives a request that waits up to d (a long poll) d more than the
// request timeout to read and answer; the background read's deadline
// would otherwise cancel it.
func (s *Server) wait(w http.ResponseWriter, d time.Duration) {
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(d + s.opts.RequestTimeout)
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
	moreDBTime(w, d+s.dbTimeout())
}

// waitContext is the context of a wait of up to d in r: it ends at d, with
// r, or when the server starts shutting down, so that a wait answers its
// "not yet" at once instead of holding shutdown. The wait ran out (rather
// than the request ending) when ctx.Err() != nil and r.Context().Err() == nil.
func (s *Server) waitContext(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), d)
	stop := context.AfterFunc(s.stopping, cancel)
	return ctx, func() { stop(); cancel() }
}
