// Package stead is durable state for Go services: content-addressed blobs,
// lease-fenced versioned records and named locks with TTL leases, over one
// of three engines: in-memory, SQLite (embedded, the default) and
// PostgreSQL (shared by many processes on many machines).
//
//	st, err := stead.Open(ctx, "sqlite://./stead-data/stead.db")
//	if err != nil { ... }
//	defer st.Close()
//	key, err := st.Blobs.Put(ctx, strings.NewReader("hello"))
//	lk, ok, err := st.Locks.TryLock(ctx, "reindex", owner, 30*time.Second)
//	rec, err := st.Records.Save(ctx, record.Record{ID: "job-1", Group: "workers", Status: record.Active})
package stead

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	gblob "gocloud.dev/blob"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The sentinel errors of every stead operation; check them with errors.Is.
var (
	ErrNotFound        = steaderr.ErrNotFound
	ErrConflict        = steaderr.ErrConflict
	ErrInvalidKey      = steaderr.ErrInvalidKey
	ErrInvalidName     = steaderr.ErrInvalidName
	ErrInvalidArgument = steaderr.ErrInvalidArgument
	ErrDigestMismatch  = steaderr.ErrDigestMismatch
	ErrTooLarge        = steaderr.ErrTooLarge
	ErrProtected       = steaderr.ErrProtected
	ErrUnknownGroup    = steaderr.ErrUnknownGroup
	ErrWrongGroup      = steaderr.ErrWrongGroup
	ErrLeased          = steaderr.ErrLeased
	ErrLost            = steaderr.ErrLost
	ErrClosed          = steaderr.ErrClosed
	ErrSchema          = steaderr.ErrSchema
	ErrUnavailable     = steaderr.ErrUnavailable
	ErrChildrenFixed   = steaderr.ErrChildrenFixed
	ErrCorrupt         = steaderr.ErrCorrupt
)

// DefaultURL is the store the CLI and server open when given none: an
// embedded SQLite file under the working directory.
const DefaultURL = "sqlite://./stead-data/stead.db"

// Store is one stead store: its capabilities over one engine. It is safe
// for concurrent use.
type Store struct {
	// Blobs is the content-addressed blob store.
	Blobs *blob.Store
	// Locks is the named-lock store: TTL leases with fencing tokens.
	Locks *lock.Store
	// Records holds lease-fenced, versioned records. Every record names a
	// group, registered first; a process working alone uses its instance
	// id (InstanceID, stable across restarts with WithInstanceID), and
	// processes that share work share a group name.
	Records *record.Store
	// Refs holds named, versioned pointers to blobs that keep them alive:
	// tags, names, cache entries (with an expiry).
	Refs *ref.Store
	// GC collects unreferenced blobs: Sweep runs one sweep, WithGC runs
	// them in the background. See docs/guides/gc.md.
	GC *gc.Collector

	eng        engine.Engine
	instanceID string
	// pulls remembers the pull times this process recorded (NotePull).
	pulls pullMemo
	// stopGC ends the background sweeps (WithGC) and waits for them; nil
	// without them.
	stopGC func()
}

// Option configures Open and New.
type Option func(*config)

type config struct {
	instanceID string
	// claimID: the id was given (WithInstanceID), so Open claims it.
	claimID    bool
	migrate    bool
	now        func() time.Time
	blobs      blob.Options
	gc         gc.Options
	gcInterval time.Duration
	gcReport   func(gc.Report, error)
	token      string
	bucket     *gblob.Bucket
	bytesAdopt bool
	logger     *slog.Logger
}

// WithInstanceID sets the store's instance id (InstanceID): a name for this
// process that stays the same across restarts, and the owner of its blob
// pins. Two stores open at once must not share an id: one's releases would
// end the other's pins. On PostgreSQL and SQLite, Open therefore claims the
// id for as long as the store is open, and fails with an error wrapping
// ErrLeased, naming the id, while another open store holds it; a holder
// that died frees it when its session ends (see docs/guides/operations.md).
// Nothing derives a record group from it; a process working alone may pass
// it as its group. It must be a valid name (see ValidateName). Defaults to
// a random id per Store, which is not claimed.
func WithInstanceID(id string) Option { return func(c *config) { c.instanceID = id } }

// WithLogger sets where the store reports what it does not return to a
// caller: work it does on its own (reaping at Open, the sweeps of WithGC)
// that failed or was cut off, its instance id claim, and on PostgreSQL its
// LISTEN connection lost and statements retried after a deadlock.
// Defaults to discarding; `stead serve` passes its own.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithoutMigrate makes Open and New leave the schema alone: run
// `stead migrate` (or Store.Migrate) instead. On a database never migrated,
// reads then answer absent or empty and writes fail with ErrSchema.
func WithoutMigrate() Option { return func(c *config) { c.migrate = false } }

// WithClock replaces the clock that lock and record leases and blob pins
// are measured against; tests use it to move time without sleeping.
// Defaults to nil: the database's clock (now()) on PostgreSQL, time.Now
// elsewhere. A stead server accepts a client's clock only when started with
// --allow-client-clock (tests).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithPinTTL sets how long a blob put stays pinned (safe from garbage
// collection and Delete) after it returns, and how long a Blobs.Pin guard
// lasts between renewals, which come every third of it. It must be at least
// a millisecond; it is rounded down to whole microseconds. Defaults to
// blob.DefaultPinTTL (60 s).
func WithPinTTL(d time.Duration) Option { return func(c *config) { c.blobs.PinTTL = d } }

// WithGC runs a garbage-collection sweep every interval in the background
// until Close, reporting each sweep's outcome to report (nil: ignored).
// Defaults to none: sweeps run only when called (Store.GC.Sweep, stead gc).
func WithGC(interval time.Duration, report func(gc.Report, error)) Option {
	return func(c *config) { c.gcInterval, c.gcReport = interval, report }
}

// WithGCAllUnreferenced lets the store's sweeps (WithGC's, and Store.GC's)
// delete in a store that never declared liveness (no ref, no blob
// reference, no source, ever), where every blob is garbage once its pin lapses: a cache
// whose blobs may all go. Defaults to off: such a sweep is refused with
// an error wrapping gc.ErrNoLiveness.
func WithGCAllUnreferenced() Option { return func(c *config) { c.gc.AllUnreferenced = true } }

// WithGCGrace sets how long an unreferenced, unpinned blob waits after a
// sweep finds it before a later sweep may delete it, at most gc.MaxGrace
// (30 days). Defaults to gc.DefaultGrace (1 h).
func WithGCGrace(d time.Duration) Option { return func(c *config) { c.gc.Grace = d } }

// WithMaxBlobSize sets the largest blob Put accepts, in bytes. Defaults to
// blob.DefaultMaxSize (4 GiB).
func WithMaxBlobSize(n int64) Option { return func(c *config) { c.blobs.MaxSize = n } }

// WithVerifyReads makes every blob read re-hash the value and fail with
// ErrDigestMismatch on corruption. Defaults to off.
func WithVerifyReads() Option { return func(c *config) { c.blobs.VerifyReads = true } }

// WithToken sets the bearer token Open sends to a stead server (an
// http:// or https:// URL). Defaults to the STEAD_TOKEN environment
// variable. Over http:// to a host that is not loopback Open refuses to
// send it, unless the URL carries insecure=true.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithUploadLease sets how long a streaming put of a large blob may go
// without writing a chunk before its staged chunks may be reaped (by the
// next Open or GC sweep), as after its process was killed. Defaults to
// blob.DefaultUploadLease (5 minutes).
func WithUploadLease(d time.Duration) Option { return func(c *config) { c.blobs.UploadLease = d } }

// WithBytesBucket keeps the blob values over the inline limit in b, an
// open gocloud.dev bucket the caller closes after the store: the bytes
// tier (docs/decisions/0027-bytes-tier.md), as the bytes= URL parameter
// of a sqlite:// or postgres:// URL does. A store that recorded a tier
// must be opened with one; a store holding blobs and no tier record takes
// one only with WithBytesAdopt; a bucket another store claimed is
// refused. Other engines refuse it.
func WithBytesBucket(b *gblob.Bucket) Option { return func(c *config) { c.bucket = b } }

// WithBytesAdopt lets a bytes tier (WithBytesBucket, or bytes= in the URL)
// be given to a store that already holds blobs and recorded no tier: new
// large values go to the bucket, the old stay in the database. Defaults
// to off: such a store refuses the tier (ErrConflict).
func WithBytesAdopt() Option { return func(c *config) { c.bytesAdopt = true } }

// Open opens the store at url:
//
//	mem://                                   in-memory, gone on Close
//	sqlite://PATH                            SQLite file; relative (sqlite://./data/s.db) or absolute (sqlite:///var/lib/s.db)
//	postgres://user@host/db?schema=stead     PostgreSQL (also postgresql://)
//	http://host:7070                         a stead server (also https://; insecure=true: see WithToken)
//
// Each engine documents its query parameters; unknown ones are an error.
// sqlite:// and postgres:// take bytes=<percent-encoded bucket URL> (say
// bytes=file%3A%2F%2F%2Fvar%2Flib%2Fstead%2Fobjects, or an s3:// URL) to
// keep the values over the inline limit in that bucket (see
// WithBytesBucket). Unless WithoutMigrate is given, Open migrates the
// schema first.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	eng, err := openEngine(ctx, url, cfg)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	st, err := newStore(ctx, eng, cfg)
	if err != nil {
		return nil, errors.Join(err, eng.Close())
	}
	return st, nil
}

func openEngine(ctx context.Context, url string, opts config) (engine.Engine, error) {
	scheme, rest, found := strings.Cut(url, "://")
	switch scheme {
	case "mem":
		if rest != "" {
			return nil, fmt.Errorf("%w: mem:// takes no path or parameters", steaderr.ErrInvalidArgument)
		}
		if opts.bucket != nil {
			return nil, fmt.Errorf("%w: mem:// keeps every byte in memory: it takes no bytes tier (WithBytesBucket)", steaderr.ErrInvalidArgument)
		}
		return memory.New(), nil
	case "sqlite":
		cfg, err := sqlite.ParseURL(url)
		if err != nil {
			return nil, err
		}
		cfg.Bucket, cfg.BytesAdopt = opts.bucket, cfg.BytesAdopt || opts.bytesAdopt
		return sqlite.Open(ctx, cfg)
	case "postgres", "postgresql":
		cfg, err := postgres.ParseURL(url)
		if err != nil {
			return nil, err
		}
		cfg.Bucket, cfg.BytesAdopt = opts.bucket, cfg.BytesAdopt || opts.bytesAdopt
		cfg.Logger = opts.logger
		return postgres.Open(ctx, cfg)
	case "http", "https":
		if opts.bucket != nil {
			return nil, fmt.Errorf("%w: a stead server keeps its own bytes tier: give the bucket to stead serve, not to its clients", steaderr.ErrInvalidArgument)
		}
		token := opts.token
		if token == "" {
			token = strings.TrimSpace(os.Getenv("STEAD_TOKEN")) // as stead serve reads it
		}
		return remote.Open(ctx, remote.Config{URL: url, Token: token})
	}
	// The URL is not echoed: one that is not understood may still hold a
	// password (a libpq "host=… password=…" string, say).
	if !found || !validScheme(scheme) {
		return nil, fmt.Errorf("%w: not a store URL: want mem://, sqlite://, postgres:// or http(s)://", steaderr.ErrInvalidArgument)
	}
	return nil, fmt.Errorf("%w: unknown URL scheme %q: want mem://, sqlite://, postgres:// or http(s)://", steaderr.ErrInvalidArgument, scheme)
}

// validScheme reports whether s is a URL scheme (RFC 3986 section 3.1) of
// a sensible length, safe to print.
func validScheme(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// New returns a store over an engine the caller built, such as a PostgreSQL
// engine on the caller's own pool. Unless WithoutMigrate is given, it
// migrates the schema first. The store owns eng: Store.Close closes it.
func New(ctx context.Context, eng engine.Engine, opts ...Option) (*Store, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newStore(ctx, eng, cfg)
}

// newConfig applies and checks opts.
func newConfig(opts []Option) (config, error) {
	cfg := config{migrate: true}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	cfg.claimID = cfg.instanceID != ""
	if cfg.instanceID == "" {
		cfg.instanceID = randomID()
	} else if err := validate.Name("instance id", cfg.instanceID); err != nil {
		return config{}, err
	}
	if cfg.blobs.PinTTL != 0 && cfg.blobs.PinTTL < time.Millisecond {
		return config{}, fmt.Errorf("%w: pin TTL %v, want at least 1ms", steaderr.ErrInvalidArgument, cfg.blobs.PinTTL)
	}
	if cfg.gcInterval < 0 || (cfg.gcInterval > 0 && cfg.gcInterval < time.Millisecond) {
		return config{}, fmt.Errorf("%w: GC interval %v, want at least 1ms", steaderr.ErrInvalidArgument, cfg.gcInterval)
	}
	if err := gc.CheckGrace(cfg.gc.Grace); err != nil {
		return config{}, err
	}
	if cfg.blobs.MaxSize < 0 {
		return config{}, fmt.Errorf("%w: max blob size %d", steaderr.ErrInvalidArgument, cfg.blobs.MaxSize)
	}
	if cfg.blobs.UploadLease < 0 {
		return config{}, fmt.Errorf("%w: upload lease %v", steaderr.ErrInvalidArgument, cfg.blobs.UploadLease)
	}
	return cfg, nil
}

func newStore(ctx context.Context, eng engine.Engine, cfg config) (*Store, error) {
	if cfg.migrate {
		if err := eng.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
	} else if err := checkSchema(ctx, eng); err != nil {
		return nil, err
	}
	if claimer, ok := eng.(engine.InstanceClaimer); ok && cfg.claimID {
		if err := claimer.ClaimInstance(ctx, cfg.instanceID, claimNotifier(cfg.logger, cfg.instanceID)); err != nil {
			return nil, err
		}
	}
	cfg.blobs.Owner, cfg.blobs.Now = cfg.instanceID, cfg.now
	cfg.gc.Holder, cfg.gc.Now = cfg.instanceID, cfg.now
	blobs := blob.NewStore(eng.Blobs(), cfg.blobs)
	cfg.gc.ReapUploads = blobs.ReapUploads
	st := &Store{
		Blobs:      blobs,
		Locks:      lock.NewStore(eng.Locks(), lock.Options{Now: cfg.now}),
		Records:    record.NewStore(eng.Records(), record.Options{Now: cfg.now}),
		Refs:       ref.NewStore(eng.Refs(), ref.Options{Now: cfg.now, Blobs: blobs}),
		GC:         gc.New(eng.GC(), cfg.gc),
		eng:        eng,
		instanceID: cfg.instanceID,
	}
	// A put whose process died left its staged chunks behind; those whose
	// lease lapsed go now. The reap is idempotent and every GC sweep
	// repeats it, so one that fails or is cut off (a SIGTERM while a
	// server starts) is logged and the store opens all the same.
	if n, err := st.Blobs.ReapUploads(ctx); err != nil {
		cfg.logger.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn,
			"stead: reaping lapsed uploads at open did not finish; the next open or GC sweep reaps them",
			slog.String("instance", cfg.instanceID), slog.Any("error", err))
	} else if n > 0 {
		cfg.logger.LogAttrs(ctx, slog.LevelInfo, "stead: reaped lapsed uploads at open",
			slog.String("instance", cfg.instanceID), slog.Int("uploads", n))
	}
	if cfg.gcInterval > 0 {
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = st.GC.Run(ctx, cfg.gcInterval, func(rep gc.Report, err error) {
				switch {
				case err != nil:
					cfg.logger.LogAttrs(ctx, slog.LevelWarn, "stead: GC sweep failed", slog.String("instance", cfg.instanceID), slog.Any("error", err))
				case rep.Aborted != "":
					cfg.logger.LogAttrs(ctx, slog.LevelWarn, "stead: GC sweep aborted", slog.String("instance", cfg.instanceID), slog.String("reason", rep.Aborted))
				}
				if cfg.gcReport != nil {
					cfg.gcReport(rep, err)
				}
			})
		}()
		st.stopGC = func() { cancel(); <-done }
	}
	return st, nil
}

// claimNotifier logs what becomes of a held instance id claim.
func claimNotifier(log *slog.Logger, id string) func(error) {
	return func(err error) {
		ctx := context.Background()
		switch {
		case err == nil:
			log.LogAttrs(ctx, slog.LevelInfo, "stead: instance id claimed again", slog.String("instance", id))
		case errors.Is(err, steaderr.ErrLeased):
			log.LogAttrs(ctx, slog.LevelError, "stead: instance id taken by another store while this one's claim was lost: the two share pins until one closes",
				slog.String("instance", id), slog.Any("error", err))
		default:
			log.LogAttrs(ctx, slog.LevelError, "stead: instance id claim lost; taking it back",
				slog.String("instance", id), slog.Any("error", err))
		}
	}
}

// checkSchema refuses a database whose schema is newer than this binary.
func checkSchema(ctx context.Context, eng engine.Engine) error {
	current, latest, err := eng.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if current > latest {
		return fmt.Errorf("%w: database is at version %d, this binary knows up to %d: upgrade stead", steaderr.ErrSchema, current, latest)
	}
	return nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// InstanceID returns the store's instance id.
func (s *Store) InstanceID() string { return s.instanceID }

// Cluster reports whether processes on many machines may share this store's
// data safely, and why.
func (s *Store) Cluster() (shared bool, reason string) { return s.eng.Cluster() }

// Migrate brings the schema to the newest version this binary knows; a
// no-op when current.
func (s *Store) Migrate(ctx context.Context) error { return s.eng.Migrate(ctx) }

// SchemaVersion returns the database's schema version and the newest this
// binary knows.
func (s *Store) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	return s.eng.SchemaVersion(ctx)
}

// Engine returns the engine the store runs on, for tools that speak the
// engine seam, such as the HTTP server. Calls on it bypass the store's
// argument checks.
func (s *Store) Engine() engine.Engine { return s.eng }

// Close closes the store and its engine. It is idempotent; afterwards every
// operation fails with ErrClosed.
func (s *Store) Close() error {
	if s.stopGC != nil {
		s.stopGC()
	}
	s.Blobs.Close()
	return s.eng.Close()
}

// ValidateName checks a lock name, owner, group, tenant, record id or
// instance id: 1 to 255 bytes of valid UTF-8 holding no control
// characters. Errors wrap ErrInvalidName.
func ValidateName(s string) error { return validate.Name("name", s) }
