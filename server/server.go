// Package server is stead's HTTP API over a Store: blobs, locks and
// records under /v1, probes and Prometheus metrics, as described in
// docs/openapi.yaml. Every error the API answers is JSON {"error": "...",
// "code": "..."} with a stable code; messages never carry database or
// driver text. Requests net/http refuses before they reach the API
// (malformed, huge headers, unknown transfer encoding) get its plain-text
// answers, which docs/openapi.yaml lists.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/wire"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
)

// Options configures a Server. Zero values mean the defaults.
type Options struct {
	// Token, when set, is the bearer token every /v1 request and /metrics
	// must carry. Defaults to none: no authentication.
	Token string
	// ClientClock lets requests carry "now", the instant leases are judged
	// at, as the engine seam allows. It exists for conformance tests: a
	// client with it can take any lease, so a production server refuses
	// "now" (400 invalid_argument). Defaults to false.
	ClientClock bool
	// MaxBlobSize is the largest blob an upload may carry. Defaults to
	// blob.DefaultMaxSize.
	MaxBlobSize int64
	// VerifyReads re-hashes every blob read (stead.WithVerifyReads).
	VerifyReads bool
	// MaxUploads caps the blob uploads and record saves in progress at
	// once; one more is refused with 503 busy and Retry-After. Defaults to
	// 64. Record saves also share a memory budget of four saves of the
	// largest size (by declared length): past it, 503 busy too.
	MaxUploads int
	// MinBodyRate is the slowest a request body (an upload or JSON) may
	// arrive, in bytes per second, after BodyGrace; a slower one is cut
	// off with 408 timeout.
	// Defaults to 16 KiB/s.
	MinBodyRate int64
	// BodyGrace is how long a request body may take before MinBodyRate
	// applies. Defaults to 10s.
	BodyGrace time.Duration
	// RequestTimeout bounds writing any response that is not a stream,
	// counted from the end of the request body, and the stall of any
	// single write of a stream. A request's database work gets half of
	// it (after its body, besides any wait it asks for); a database that
	// does not answer in time gets 503 unavailable. Defaults to 30s.
	RequestTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Defaults
	// to 30s.
	IdleTimeout time.Duration
	// MaxConns caps the connections open at once; past it, new ones wait
	// in the kernel's accept queue. Defaults to 1024.
	MaxConns int
	// ShutdownGrace bounds how long Serve waits for requests in flight
	// once its context ends. Defaults to 10s.
	ShutdownGrace time.Duration
	// Registerer receives the server's metrics, which /metrics serves
	// from Gatherer. Defaults to a registry of the server's own, with Go
	// runtime and process collectors.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Logger logs internal errors (with their database detail, which
	// responses never carry). Defaults to slog.Default().
	Logger *slog.Logger
}

// Limits not worth a knob.
const (
	// maxJSONBody bounds a JSON request but a record save.
	maxJSONBody = 64 << 10
	// maxRecordBody bounds a record save: the largest payload,
	// base64-encoded, and its fields. Saves share the upload slots.
	maxRecordBody = record.DefaultMaxPayload/3*4 + 64<<10
	// recordBodyBudget bounds the bytes of record save bodies being read
	// or saved at once (each costs about three times its size in memory
	// while decoded): four saves of the largest size.
	recordBodyBudget = 4 * maxRecordBody
	// maxLockWait and maxPoll bound a request's waits.
	maxLockWait = time.Minute
	maxPoll     = time.Minute
	// maxListLimit bounds one page of a list.
	maxListLimit = 10000
	// defaultListLimit is a page's length when the request names none.
	defaultListLimit = 1000
	// maxRecords bounds the records one answer holds (a list or a
	// claim-next), each with its payload; defaultRecords is a list's
	// length when the request names none.
	maxRecords     = 1000
	defaultRecords = 100
	// retryAfter is what 503 answers tell a client to wait, in seconds.
	retryAfter = "1"
)

// Server serves one store over HTTP. Its zero value is not usable: call New.
type Server struct {
	eng     engine.Engine
	blobs   *blob.Store
	blobEng blob.Engine // under blobs, for stores on a client's clock
	records *record.Store
	refs    *ref.Store
	gc      *gc.Collector
	leases  leaseTable // sweep leases clients hold
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
	gather  prometheus.Gatherer
	token   [sha256.Size]byte
	uploads chan struct{}
	// recordBytes is what the record saves in flight hold of
	// recordBodyBudget.
	recordBytes *semaphore.Weighted
	drain       drainSet
	// stopping ends when the server starts shutting down, ending waits.
	stopping context.Context
	stop     context.CancelFunc

	gcMetrics *gcMetrics
}

// New returns a Server for st. st stays the caller's to close.
func New(st *stead.Store, opts Options) *Server {
	if opts.MaxBlobSize <= 0 {
		opts.MaxBlobSize = blob.DefaultMaxSize
	}
	if opts.MaxUploads <= 0 {
		opts.MaxUploads = 64
	}
	if opts.MinBodyRate <= 0 {
		opts.MinBodyRate = 16 << 10
	}
	if opts.BodyGrace <= 0 {
		opts.BodyGrace = 10 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 30 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 1024
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Registerer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
		opts.Registerer, opts.Gatherer = reg, reg
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	eng := st.Engine()
	s := &Server{
		eng:         eng,
		opts:        opts,
		log:         opts.Logger,
		metrics:     newMetrics(opts.Registerer),
		gather:      opts.Gatherer,
		uploads:     make(chan struct{}, opts.MaxUploads),
		recordBytes: semaphore.NewWeighted(recordBodyBudget),
		records:     record.NewStore(eng.Records(), record.Options{}),
		refs:        st.Refs,
		gc:          st.GC,
		leases:      leaseTable{idle: leaseIdle},
	}
	s.gcMetrics = newGCMetrics(opts.Registerer)
	if pg, ok := eng.(*postgres.Engine); ok {
		registerPool(opts.Registerer, pg)
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.blobEng = &putSpy{Engine: eng.Blobs(), m: s.metrics}
	s.blobs = blob.NewStore(s.blobEng, blob.Options{MaxSize: opts.MaxBlobSize, VerifyReads: opts.VerifyReads, Owner: st.InstanceID()})
	s.token = sha256.Sum256([]byte(opts.Token))
	s.routes()
	return s
}

// route is one registered pattern.
type route struct {
	pattern string
	public  bool // no token needed
	handler http.HandlerFunc
}

// Routes returns every pattern the server registers, in registration
// order, for the test that checks docs/openapi.yaml against them.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.table() {
		out = append(out, r.pattern)
	}
	return out
}

func (s *Server) table() []route {
	return []route{
		{"GET /healthz", true, s.healthz},
		{"GET /readyz", true, s.readyz},
		{"GET /metrics", false, s.serveMetrics},
		{"GET /v1/info", false, s.info},
		{"GET /v1/schema", false, s.schema},
		{"POST /v1/schema/migrate", false, s.migrate},

		{"PUT /v1/blobs", false, s.putBlob},
		{"POST /v1/blobs", false, s.putBlob},
		{"GET /v1/blobs", false, s.listBlobs},
		{"PUT /v1/blobs/{key}", false, s.putBlob},
		{"GET /v1/blobs/{key}", false, s.getBlob}, // GET also serves HEAD
		{"DELETE /v1/blobs/{key}", false, s.deleteBlob},
		{"POST /v1/blobs/delete", false, s.deleteBlobs},

		{"GET /v1/refs", false, s.listRefs},
		{"GET /v1/refs/{name...}", false, s.getRef},
		{"PUT /v1/refs/{name...}", false, s.setRef},
		{"PATCH /v1/refs/{name...}", false, s.touchRef},
		{"DELETE /v1/refs/{name...}", false, s.deleteRef},
		{"POST /v1/blobs/{key}/pins", false, s.pinBlob},
		{"PUT /v1/blobs/{key}/pins/{owner}", false, s.renewPin},
		{"DELETE /v1/blobs/{key}/pins/{owner}", false, s.unpinBlob},

		{"POST /v1/gc/sweep", false, s.sweep},
		{"GET /v1/gc/explain/{key}", false, s.explain},
		{"GET /v1/gc/sources", false, s.listSources},
		{"PUT /v1/gc/sources", false, s.registerSource},
		{"DELETE /v1/gc/sources", false, s.unregisterSource},
		{"GET /v1/pins", false, s.listPins},
		{"POST /v1/gc/reap", false, s.reapPins},
		{"PUT /v1/gc/window", false, s.stageKeys},
		{"GET /v1/gc/pass", false, s.stagePass},
		{"GET /v1/gc/declared", false, s.declared},
		{"POST /v1/gc/stage", false, s.stageRange},
		{"POST /v1/gc/take", false, s.takeCandidates},
		{"POST /v1/gc/arbitrate", false, s.arbitrate},
		{"POST /v1/gc/lease", false, s.acquireLease},
		{"PUT /v1/gc/lease/{id}", false, s.renewLease},
		{"DELETE /v1/gc/lease/{id}", false, s.releaseLease},
		{"GET /v1/blobs/{key}/stored", false, s.storedBlob},

		{"POST /v1/uploads", false, s.beginUpload},
		{"POST /v1/uploads/reap", false, s.reapUploads},
		{"POST /v1/uploads/{chunks}/publish", false, s.publishUpload},
		{"DELETE /v1/uploads/{chunks}", false, s.abortUpload},
		{"PUT /v1/chunks/{chunks}/{off}", false, s.writeChunk},
		{"GET /v1/chunks/{chunks}/{off}", false, s.readChunk},

		{"POST /v1/locks/{name}/acquire", false, s.acquireLock},
		{"POST /v1/locks/{name}/renew", false, s.renewLock},
		{"POST /v1/locks/{name}/release", false, s.releaseLock},

		{"PUT /v1/groups/{group}", false, s.registerGroup},
		{"GET /v1/groups/{group}", false, s.getGroup},
		{"GET /v1/groups/{group}/claimable", false, s.listClaimable},
		{"POST /v1/groups/{group}/claim-next", false, s.claimNext},
		{"GET /v1/groups/{group}/probe", false, s.probe},
		{"GET /v1/groups/{group}/wait", false, s.waitClaimable},
		{"GET /v1/records/{id}", false, s.loadRecord},
		{"PUT /v1/records/{id}", false, s.saveRecord},
		{"DELETE /v1/records/{id}", false, s.deleteRecord},
		{"POST /v1/records/{id}/claim", false, s.claimRecord},
		{"POST /v1/records/{id}/renew", false, s.renewRecord},
	}
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	for _, r := range s.table() {
		h := r.handler
		if !r.public {
			h = s.auth(h)
		}
		s.mux.Handle(r.pattern, h)
	}
}

// ServeHTTP serves one request: routing, deadlines, metrics, and JSON for
// the errors net/http would answer in plain text.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, pattern := s.mux.Handler(r) // the route label; ServeHTTP sets the path values
	rw := &responseWriter{ResponseWriter: w, status: http.StatusOK}
	rc := http.NewResponseController(rw)
	// Streams and long polls move these deadlines as they progress.
	_ = rc.SetReadDeadline(start.Add(s.opts.RequestTimeout))
	_ = rc.SetWriteDeadline(start.Add(s.opts.RequestTimeout))
	if pattern == "" {
		pattern = "unmatched"
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	rw.dbTimer = time.AfterFunc(s.dbTimeout(), func() { cancel(errDatabaseTimeout) })
	defer rw.dbTimer.Stop()
	r = r.WithContext(ctx)
	s.metrics.inFlight.Inc()
	defer func() {
		s.metrics.inFlight.Dec()
		s.metrics.observe(pattern, rw.status, time.Since(start))
	}()
	if p := r.URL.EscapedPath(); p != cleanPath(p) {
		// net/http would redirect to the clean path with an HTML body.
		writeError(rw, http.StatusNotFound, wire.CodeNotFoundRoute, "no such route")
		return
	}
	s.mux.ServeHTTP(rw, r)
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
	if status == http.StatusRequestedRangeNotSatisfiable && w.size != "" && h.Get("Content-Range") == "" {
		h.Set("Content-Range", "bytes */"+w.size)
	}
	if status >= 400 && strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		code := wire.CodeBadRequest
		switch status {
		case http.StatusNotFound:
			code = wire.CodeNotFoundRoute
		case http.StatusMethodNotAllowed:
			code = wire.CodeMethodNotAllowed
		case http.StatusRequestedRangeNotSatisfiable:
			code = wire.CodeRangeNotSatisfiable
		case http.StatusPreconditionFailed:
			code = "conflict"
		}
		b := errorBody(http.StatusText(status), code)
		h.Set("Content-Type", "application/json")
		h.Set(wire.CodeHeader, code)
		h.Del("X-Content-Type-Options")
		h.Del("Content-Length")
		w.ResponseWriter.WriteHeader(status)
		w.ResponseWriter.Write(b)
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

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if s.opts.Token == "" {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stead"`)
			writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized, "missing or wrong bearer token")
			return
		}
		h(w, r)
	}
}

// authorized checks an Authorization header: the scheme "Bearer" in any
// case, then the token. Comparing digests takes the same time whatever
// the tokens' lengths and contents.
func (s *Server) authorized(header string) bool {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the database answers and its schema is the one
// this binary knows, 503 otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeoutCause(r.Context(), min(2*time.Second, s.dbTimeout()), errDatabaseTimeout)
	defer cancel()
	current, latest, err := s.eng.SchemaVersion(ctx)
	if err != nil {
		s.writeStoreError(w, r.WithContext(ctx), err)
		return
	}
	if current != latest {
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, "schema", schemaMessage(current, latest))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "schema": current})
}

func schemaMessage(current, latest int) string {
	if current > latest {
		return "database schema is newer than this binary: upgrade stead"
	}
	return "database schema is behind this binary: run stead migrate"
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	shared, reason := s.eng.Cluster()
	writeJSON(w, http.StatusOK, wire.Info{Cluster: shared, Reason: reason})
}

func (s *Server) schema(w http.ResponseWriter, r *http.Request) {
	current, latest, err := s.eng.SchemaVersion(r.Context())
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.SchemaInfo{Current: current, Latest: latest})
}

func (s *Server) migrate(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.Migrate(r.Context()); err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.schema(w, r)
}

// writeStoreError answers err, an error of the store or of reading the
// request. Sentinel errors keep stead's own message, which names the
// thing and the rule; anything else is logged and answered without its
// text, which may hold the database's host, user or driver detail.
func (s *Server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	var body *bodyError
	if errors.As(err, &body) {
		var maxErr *http.MaxBytesError
		switch {
		case errors.As(err, &maxErr):
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "request body too large")
		case isTimeout(err):
			writeError(w, http.StatusRequestTimeout, wire.CodeTimeout, "request body arrived too slowly")
		default:
			writeError(w, http.StatusBadRequest, wire.CodeBadRequest, "request body ended early or could not be read")
		}
		return
	}
	switch {
	case errors.Is(context.Cause(r.Context()), errDatabaseTimeout):
		s.log.Warn("stead: database did not answer in time", "route", r.Pattern, "err", err)
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "database did not answer in time")
		return
	case r.Context().Err() != nil:
		// The client is gone; whatever we write is lost.
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "request cancelled")
		return
	case errors.Is(err, errors.ErrUnsupported):
		writeError(w, http.StatusRequestEntityTooLarge, "unsupported", "blobs over the inline limit are not supported by this engine yet")
		return
	}
	if status, code, sentinel := wire.StatusOf(err); sentinel != nil {
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeError(w, status, code, publicMessage(err))
		return
	}
	if unavailable(err) {
		s.log.Warn("stead: database unavailable", "route", r.Pattern, "err", err)
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "database unavailable")
		return
	}
	s.log.Error("stead: internal error", "route", r.Pattern, "err", err)
	writeError(w, http.StatusInternalServerError, wire.CodeInternal, "internal error")
}

// publicMessage is what a response may say of err: its text cut where
// the text of a typed error begins (a driver's, the network's, the file
// system's), which may name the database's host, user, objects or files.
// stead's own words, which name the thing and the rule broken, come
// first; they are sentinels and plain errors.New texts, also kept.
func publicMessage(err error) string {
	msg := err.Error()
	for _, leaf := range leaves(err) {
		if wire.IsSentinel(leaf) || fmt.Sprintf("%T", leaf) == "*errors.errorString" && !errors.Is(leaf, sql.ErrNoRows) && !errors.Is(leaf, sql.ErrConnDone) {
			continue
		}
		if text := leaf.Error(); text != "" {
			if i := strings.Index(msg, text); i >= 0 {
				msg = strings.TrimRight(msg[:i], " :(")
			}
		}
	}
	if msg == "" {
		return "internal error"
	}
	return msg
}

// leaves returns the errors at the ends of err's chain.
func leaves(err error) []error {
	switch e := err.(type) {
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return leaves(inner)
		}
	case interface{ Unwrap() []error }:
		var out []error
		for _, inner := range e.Unwrap() {
			out = append(out, leaves(inner)...)
		}
		return out
	}
	return []error{err}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(wire.CodeHeader, code) // for HEAD, whose answers have no body
	h.Del("ETag")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(errorBody(msg, code))
}

func errorBody(msg, code string) []byte {
	b, _ := json.Marshal(wire.Error{Error: msg, Code: code})
	return append(b, '\n')
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// readJSON decodes a request body of at most maxJSONBody bytes into v,
// refusing unknown fields and trailing data.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return s.readJSONLimit(w, r, v, maxJSONBody)
}

// readJSONLimit is readJSON with a limit. The body is read like an
// upload's: at MinBodyRate after BodyGrace, and cut off when it stalls
// during shutdown.
func (s *Server) readJSONLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	body := s.newBodyReader(w, r)
	defer body.done()
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	body.r = r.Body
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var body *bodyError
		if errors.As(err, &body) {
			return err
		}
		return &badRequest{"request body: " + err.Error()}
	}
	if dec.More() {
		return &badRequest{"request body: data after the JSON value"}
	}
	return nil
}

// bodyError is an error reading the request body (not the database):
// too large, too slow, or cut short.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// badRequest is a request the server could not parse.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// fail answers err, a badRequest or a store error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var bad *badRequest
	if errors.As(err, &bad) {
		writeError(w, http.StatusBadRequest, wire.CodeBadRequest, bad.msg)
		return
	}
	s.writeStoreError(w, r, err)
}

// clock returns the instant a request names, zero for the engine's clock,
// refusing one unless client clocks are allowed.
func (s *Server) clock(now time.Time) (time.Time, error) {
	if now.IsZero() {
		return time.Time{}, nil
	}
	if !s.opts.ClientClock {
		return time.Time{}, &badRequest{`"now" is accepted only by a server started with client clocks allowed (tests)`}
	}
	return now, nil
}

// openBody admits a request body of at most limit declared bytes (else
// 413 with code, naming what it carries), in one of the upload slots
// (else 503 busy), and returns it read through a bodyReader; done
// releases both.
func (s *Server) openBody(w http.ResponseWriter, r *http.Request, limit int64, code, what string) (body *bodyReader, done func(), ok bool) {
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, code, fmt.Sprintf("%s of %d bytes, limit %d", what, r.ContentLength, limit))
		return nil, nil, false
	}
	release, ok := s.uploadSlot(w)
	if !ok {
		return nil, nil, false
	}
	body = s.newBodyReader(w, r)
	return body, func() { body.done(); release() }, true
}

// uploadSlot takes one of the MaxUploads slots that bodies of size
// (blobs, record saves) share, or answers 503 busy and returns false.
func (s *Server) uploadSlot(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case s.uploads <- struct{}{}:
		s.metrics.uploads.Inc()
		return func() {
			s.metrics.uploads.Dec()
			<-s.uploads
		}, true
	default:
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.CodeBusy, "too many uploads in progress")
		return nil, false
	}
}

// drainSet tracks the uploads in progress, so shutdown can cut off the
// stalled ones.
type drainSet struct {
	mu       sync.Mutex
	draining bool
	active   map[*bodyReader]struct{}
}
