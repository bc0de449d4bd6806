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
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server/access"
)

// Options configures a Server. Zero values mean the defaults.
type Options struct {
	// Access authenticates requests and says what each caller may do on
	// /v1, /metrics and the mounted front ends. Defaults to an authority
	// of Token alone.
	Access *access.Authority
	// Token, when Access is nil, is the bearer token every /v1 request
	// and /metrics must carry, and which may do everything. Defaults to
	// none: no authentication.
	Token string
	// ClientClock lets requests carry "now", the instant leases are judged
	// at, as the engine seam allows. It exists for conformance tests: a
	// client with it can take any lease, so a production server refuses
	// "now" (400 invalid_argument). Defaults to false.
	ClientClock bool
	// MaxBlobSize is the largest blob an upload may carry, and the
	// store's own limit (stead.WithMaxBlobSize) holds too. Defaults to
	// blob.DefaultMaxSize.
	MaxBlobSize int64
	// MaxUploads caps the blob uploads and record saves in progress at
	// once; one more is refused with 503 busy and Retry-After. Defaults to
	// 64. Record saves also share a memory budget of four saves of the
	// largest size (by declared length): past it, 503 busy too.
	MaxUploads int
	// MaxUploadsPerClient caps the upload slots one client holds at once,
	// so that one client cannot take them all: a client is a remote
	// address (an IPv6 one by its /64). One more waits, its body unread,
	// for one of the client's own to end, for up to half RequestTimeout,
	// then is refused with 503 busy and Retry-After. Defaults to a quarter
	// of MaxUploads, at least 1.
	MaxUploadsPerClient int
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
	// MaxConnsPerClient caps the connections one client (as in
	// MaxUploadsPerClient) has open at once; one more is closed as soon
	// as it is accepted. Defaults to a quarter of MaxConns, at least 1.
	MaxConnsPerClient int
	// ShutdownGrace bounds how long Serve waits for requests in flight
	// once its context ends. Defaults to 10s.
	ShutdownGrace time.Duration
	// Registerer receives the server's metrics, which /metrics serves
	// from Gatherer. Defaults to a registry of the server's own, with Go
	// runtime and process collectors.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// GCInterval, when positive, is how often Serve sweeps the store in
	// the background (gc.Collector.Sweep under the store's sweep lease, so
	// servers of one database sweep one at a time), logging each sweep
	// and counting it in the stead_gc_* metrics. Defaults to 0: sweeps run
	// only when asked (POST /v1/gc/sweep, stead gc).
	GCInterval time.Duration
	// Mounts are front ends served beside the API, each under its
	// prefix (Mount). Defaults to none.
	Mounts []Mount
	// Logger logs internal errors (with their database detail, which
	// responses never carry). Defaults to slog.Default().
	Logger *slog.Logger
	// AccessLog, when set, gets one line ("access") per request: its
	// method, route pattern ("unmatched" for none), status, bytes
	// answered, duration, client address and identity ("token" when it
	// carried the server's token, "-" otherwise). Defaults to none.
	AccessLog *slog.Logger
}

// Limits not worth a knob.
const (
	// maxJSONBody bounds a JSON request but a record save and a publish.
	maxJSONBody = 64 << 10
	// maxPublishBody bounds a publish: its fields and blob.MaxChildren
	// quoted keys.
	maxPublishBody = maxJSONBody + blob.MaxChildren*int64(len(`"sha256:",`)+64)
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
	maxListLimit = wire.MaxListLimit
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
	st      *stead.Store
	eng     engine.Engine
	blobs   *blob.Store
	blobEng blob.Backend // under blobs: stored forms and chunks for remote reads, stores on a client's clock
	records *record.Store
	refs    *ref.Store
	gc      *gc.Collector
	leases  leaseTable // sweep leases clients hold
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux
	// direct are the mounts ServeHTTP serves without the mux (directMounts).
	direct  []Mount
	metrics *metrics
	gather  prometheus.Gatherer
	access  *access.Authority
	uploads admission
	// recordBytes is what the record saves in flight hold of
	// recordBodyBudget.
	recordBytes *semaphore.Weighted
	drain       drainSet
	// stopping ends when the server starts shutting down, ending waits.
	stopping context.Context
	stop     context.CancelFunc

	gcMetrics    *gcMetrics
	usageMetrics *usageMetrics
	// sweeps are the recent sweeps, for the console's chart.
	sweeps sweepHistory
}

// New returns a Server for st. st stays the caller's to close.
func New(st *stead.Store, opts Options) *Server {
	if opts.MaxBlobSize <= 0 {
		opts.MaxBlobSize = blob.DefaultMaxSize
	}
	if opts.MaxUploads <= 0 {
		opts.MaxUploads = 64
	}
	if opts.MaxUploadsPerClient <= 0 {
		opts.MaxUploadsPerClient = max(opts.MaxUploads/4, 1)
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
	if opts.MaxConnsPerClient <= 0 {
		opts.MaxConnsPerClient = max(opts.MaxConns/4, 1)
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
		st:          st,
		eng:         eng,
		opts:        opts,
		log:         opts.Logger,
		metrics:     newMetrics(opts.Registerer),
		gather:      opts.Gatherer,
		uploads:     admission{slots: make(chan struct{}, opts.MaxUploads), perClient: int64(opts.MaxUploadsPerClient)},
		recordBytes: semaphore.NewWeighted(recordBodyBudget),
		records:     record.NewStore(eng.Records(), record.Options{}),
		refs:        st.Refs,
		gc:          st.GC,
		leases:      leaseTable{idle: leaseIdle},
	}
	s.gcMetrics = newGCMetrics(opts.Registerer)
	s.usageMetrics = newUsageMetrics(opts.Registerer)
	if pool, ok := eng.(engine.PoolReporter); ok {
		registerPool(opts.Registerer, pool)
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.blobEng = eng.Blobs()
	// The store's own blobs: its clock, pin TTL, upload lease and read
	// checks, and its table of this owner's pins, which a second table
	// would not know of.
	s.blobs = st.Blobs
	s.access = opts.Access
	if s.access == nil {
		// A token and no files: nothing can fail to read.
		s.access, _ = access.New(access.Config{Token: opts.Token, Logger: opts.Logger})
	}
	s.routes()
	return s
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
