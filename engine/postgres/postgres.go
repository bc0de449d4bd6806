// Package postgres is the PostgreSQL engine: the fleet host, where many
// processes on many machines share one database. All state lives in one
// engine-owned schema (default "stead"), created by embedded migrations;
// every statement is parameterized and names the schema quoted.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	gblob "gocloud.dev/blob"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/internal/bytestier"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

const (
	// DefaultSchema is the schema the engine owns when Config.Schema is
	// empty.
	DefaultSchema = "stead"
	// DefaultMaxConns is the pool size when the engine builds the pool.
	DefaultMaxConns = 8
	// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN-1); longer
	// names would be truncated silently, so they are refused.
	maxIdentLen = 63
)

// Config configures the engine. Exactly one of ConnString and Pool is set.
type Config struct {
	// ConnString is a postgres:// URL or keyword/value string the engine
	// builds its own pool from, and closes on Close.
	ConnString string
	// Pool is a caller-owned pool; the engine never closes it, and
	// MaxConns and SynchronousCommit do not apply to it.
	Pool *pgxpool.Pool
	// Schema is the schema the engine owns: at most 63 bytes, not starting
	// with "pg_". Any other name works; it is quoted on every statement.
	// Defaults to DefaultSchema.
	Schema string
	// MaxConns is the size of the engine's pool. Defaults to
	// DefaultMaxConns.
	MaxConns int32
	// SynchronousCommit sets synchronous_commit on every pooled session
	// ("on", "off", "local", "remote_write", "remote_apply"). Defaults to
	// the server's setting, normally "on".
	SynchronousCommit string
	// PgBouncer makes the engine safe behind PgBouncer's transaction
	// pooling: no session state is kept (no LISTEN on the pool, so waiters
	// poll unless ListenConnString is set) and the engine's own pool uses
	// the unprepared exec protocol. A caller's pool must not cache prepared
	// statements (QueryExecModeCacheStatement), and SynchronousCommit is
	// refused: PgBouncer rejects it as a startup parameter (set it on the
	// role instead). Defaults to false.
	PgBouncer bool
	// ListenConnString, with PgBouncer, connects the engine's one LISTEN
	// connection directly to PostgreSQL, bypassing PgBouncer, so that lock
	// and record waiters are woken instead of polling.
	ListenConnString string
	// Logger receives what the engine does not return to a caller: its
	// LISTEN connection lost and re-established, statements retried after
	// a deadlock. Defaults to discarding.
	Logger *slog.Logger
	// Bytes is the URL of a bucket (gocloud.dev/blob: s3://, gs://,
	// azblob://, file:///dir where the binary registers them) that keeps
	// the values over the inline limit: the bytes tier
	// (docs/decisions/0027-bytes-tier.md). Bucket, when set, is such a
	// bucket already open (the caller closes it); it wins over Bytes.
	// Defaults to none: every byte in the database.
	Bytes  string
	Bucket *gblob.Bucket
	// BytesAdopt lets a bytes tier be given to a store that holds blobs
	// and recorded none (its existing values stay where they are).
	BytesAdopt bool
}

// The URL parameters stead reads itself; the rest must be ones pgx knows.
const (
	paramSchema            = "schema"
	paramSynchronousCommit = "synchronous_commit"
	paramPgBouncer         = "pgbouncer"
	paramListenURL         = "listen_url"
	paramBytes             = "bytes"
	paramBytesAdopt        = "bytes_adopt"
)

// pgxParams are the connection parameters passed through to pgx. Anything
// else would reach the server as a run-time setting, so it is refused.
var pgxParams = []string{
	"application_name", "connect_timeout", "dbname", "database", "host", "password",
	"passfile", "port", "service", "servicefile", "sslcert", "sslkey", "sslmode",
	"sslnegotiation", "sslpassword", "sslrootcert", "sslsni", "target_session_attrs", "user",
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_lifetime_jitter", "pool_max_conn_idle_time", "pool_health_check_period",
	"statement_cache_capacity", "description_cache_capacity",
}

var synchronousCommitValues = []string{"on", "off", "local", "remote_write", "remote_apply"}

// ParseURL parses a postgres:// or postgresql:// URL. Besides pgx's
// connection parameters it reads schema (default "stead"),
// synchronous_commit, pgbouncer (true/false) and listen_url (with
// pgbouncer=true, a percent-encoded postgres:// URL for the LISTEN
// connection). An unknown parameter or a bad value is an error wrapping
// steaderr.ErrInvalidArgument.
func ParseURL(rawURL string) (Config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A *url.Error repeats the URL, password included: keep its cause.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return Config{}, fmt.Errorf("%w: postgres URL: %v", steaderr.ErrInvalidArgument, err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return Config{}, fmt.Errorf("%w: postgres URL: scheme %q, want postgres or postgresql", steaderr.ErrInvalidArgument, u.Scheme)
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("%w: postgres URL: %v", steaderr.ErrInvalidArgument, err)
	}
	var cfg Config
	for name, values := range query {
		if len(values) != 1 {
			return Config{}, fmt.Errorf("%w: postgres URL: parameter %q given %d times", steaderr.ErrInvalidArgument, name, len(values))
		}
		v := values[0]
		switch name {
		case paramSchema:
			cfg.Schema = v
			if err := validateSchema(v); err != nil {
				return Config{}, err
			}
		case paramSynchronousCommit:
			if !slices.Contains(synchronousCommitValues, v) {
				return Config{}, fmt.Errorf("%w: postgres URL: synchronous_commit=%q, want one of %v", steaderr.ErrInvalidArgument, v, synchronousCommitValues)
			}
			cfg.SynchronousCommit = v
		case paramPgBouncer:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, fmt.Errorf("%w: postgres URL: pgbouncer=%q, want true or false", steaderr.ErrInvalidArgument, v)
			}
			cfg.PgBouncer = b
		case paramBytes:
			if v == "" {
				return Config{}, fmt.Errorf("%w: postgres URL: bytes=: want a bucket URL", steaderr.ErrInvalidArgument)
			}
			cfg.Bytes = v
		case paramBytesAdopt:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, fmt.Errorf("%w: postgres URL: bytes_adopt=%q, want 1 or 0", steaderr.ErrInvalidArgument, v)
			}
			cfg.BytesAdopt = b
		case paramListenURL:
			if _, err := pgx.ParseConfig(v); err != nil {
				return Config{}, fmt.Errorf("%w: postgres URL: listen_url: %v", steaderr.ErrInvalidArgument, err)
			}
			cfg.ListenConnString = v
		default:
			if !slices.Contains(pgxParams, name) {
				return Config{}, fmt.Errorf("%w: postgres URL: unknown parameter %q", steaderr.ErrInvalidArgument, name)
			}
			continue
		}
		query.Del(name)
	}
	u.RawQuery = query.Encode()
	cfg.ConnString = u.String()
	if _, err := pgxpool.ParseConfig(cfg.ConnString); err != nil {
		return Config{}, fmt.Errorf("%w: postgres URL: %v", steaderr.ErrInvalidArgument, err)
	}
	return cfg, nil
}

// validateSchema refuses schema names PostgreSQL would truncate or reserve.
func validateSchema(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty schema name", steaderr.ErrInvalidName)
	case len(name) > maxIdentLen:
		return fmt.Errorf("%w: schema name is %d bytes, PostgreSQL's limit is %d", steaderr.ErrInvalidName, len(name), maxIdentLen)
	case !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: schema name %q: invalid UTF-8 or a NUL byte", steaderr.ErrInvalidName, name)
	case strings.HasPrefix(name, "pg_"):
		return fmt.Errorf("%w: schema name %q: the pg_ prefix is reserved", steaderr.ErrInvalidName, name)
	}
	return nil
}

// Engine is the PostgreSQL engine.
type Engine struct {
	pool     *pgxpool.Pool
	ownsPool bool
	schema   string
	ident    string // schema, quoted
	closed   atomic.Bool
	blobs    blobs
	gc       gcMech
	locks    locks
	records  records
	refs     refs
	stmts    []string // every declared statement, rendered for the schema, by index
	tier     tierState
	log      *slog.Logger
	// listen is the one LISTEN connection for lock and record waiters;
	// nil in PgBouncer mode without a listen URL, which keeps no session
	// state.
	listen *listener
	// instances are the instance ids the engine holds (ClaimInstance),
	// released on Close.
	instanceMu sync.Mutex
	instances  []*instanceClaim
}

var (
	_ engine.Engine          = (*Engine)(nil)
	_ engine.InstanceClaimer = (*Engine)(nil)
)

// sqlIsolation reads the isolation level a session's transactions get.
var sqlIsolation = declare("sqlIsolation", `SELECT current_setting('transaction_isolation')`)

// Open connects (reading the session's isolation level once, so a bad
// address fails here) and returns the engine. Sessions must default to
// READ COMMITTED: a pool Open creates sets it, behind PgBouncer or in a
// caller's pool it is checked (ErrInvalidArgument otherwise). It does not
// migrate.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if err := validateSchema(cfg.Schema); err != nil {
		return nil, err
	}
	listenConfig, err := listenConnConfig(cfg)
	if err != nil {
		return nil, err
	}
	e := newEngine(cfg.Schema)
	e.log = cfg.Logger
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.Pool != nil && cfg.ConnString != "":
		return nil, fmt.Errorf("%w: postgres: set ConnString or Pool, not both", steaderr.ErrInvalidArgument)
	case cfg.Pool != nil:
		if cfg.MaxConns != 0 || cfg.SynchronousCommit != "" {
			return nil, fmt.Errorf("%w: postgres: MaxConns and SynchronousCommit do not apply to a caller's pool", steaderr.ErrInvalidArgument)
		}
		if cfg.PgBouncer && cfg.Pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			return nil, fmt.Errorf("%w: postgres: behind PgBouncer the pool must not cache prepared statements: set its DefaultQueryExecMode to QueryExecModeExec", steaderr.ErrInvalidArgument)
		}
		e.pool = cfg.Pool
	default:
		pcfg, err := poolConfig(cfg)
		if err != nil {
			return nil, err
		}
		if e.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return nil, interpretError(err)
		}
		e.ownsPool = true
	}
	// Connecting reads the isolation level: every statement stead runs is
	// written for READ COMMITTED, where each statement of a transaction
	// takes a new snapshot.
	var isolation string
	if err := e.pool.QueryRow(ctx, e.sql(sqlIsolation)).Scan(&isolation); err != nil {
		e.Close()
		return nil, fmt.Errorf("connect: %w", interpretError(err))
	}
	if isolation != "read committed" {
		e.Close()
		return nil, fmt.Errorf("%w: postgres: sessions default to %s isolation; stead's statements need read committed: "+
			"set default_transaction_isolation to 'read committed' on the role or database (ALTER ROLE … SET default_transaction_isolation = 'read committed')",
			steaderr.ErrInvalidArgument, isolation)
	}
	e.tier.adopt = cfg.BytesAdopt
	switch {
	case cfg.Bucket != nil:
		e.tier.tier = bytestier.New(cfg.Bucket)
	case cfg.Bytes != "":
		if e.tier.tier, err = bytestier.Open(ctx, cfg.Bytes); err != nil {
			e.Close()
			return nil, fmt.Errorf("postgres: open: %w", err)
		}
	}
	e.blobs.init(e)
	e.gc.init(e, cfg.PgBouncer)
	e.locks.init(e)
	e.records.init(e)
	e.refs.init(e)
	switch {
	case listenConfig != nil:
		e.listen = newListener(func(ctx context.Context) (*pgx.Conn, error) {
			cc := listenConfig.Copy()
			listenAdjust(cc)
			return pgx.ConnectConfig(ctx, cc)
		}, e.log, e.locks.channel, e.records.channel)
	case !cfg.PgBouncer:
		// As the pool connects, with its hooks.
		e.listen = newListener(func(ctx context.Context) (*pgx.Conn, error) {
			return e.dialDirect(ctx, listenAdjust)
		}, e.log, e.locks.channel, e.records.channel)
	}
	return e, nil
}

// listenConnConfig parses cfg.ListenConnString, allowed in PgBouncer mode
// only; nil when unset.
func listenConnConfig(cfg Config) (*pgx.ConnConfig, error) {
	switch {
	case cfg.ListenConnString == "":
		return nil, nil
	case !cfg.PgBouncer:
		return nil, fmt.Errorf("%w: postgres: a listen URL applies in PgBouncer mode only: without it the pool's own connection string is used", steaderr.ErrInvalidArgument)
	}
	cc, err := pgx.ParseConfig(cfg.ListenConnString)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: listen URL: %v", steaderr.ErrInvalidArgument, err)
	}
	return cc, nil
}

func poolConfig(cfg Config) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: %v", steaderr.ErrInvalidArgument, err)
	}
	// pgxpool consumes pool_max_conns; pgconn keeps it as a run-time
	// parameter, which tells whether the caller set it.
	if cc, err := pgconn.ParseConfig(cfg.ConnString); err != nil || cc.RuntimeParams["pool_max_conns"] == "" {
		pcfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("%w: postgres: MaxConns %d", steaderr.ErrInvalidArgument, cfg.MaxConns)
	} else if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	if cfg.SynchronousCommit != "" {
		if cfg.PgBouncer {
			return nil, fmt.Errorf("%w: postgres: synchronous_commit cannot be set behind PgBouncer, which refuses it as a startup parameter: set it on the role (ALTER ROLE … SET synchronous_commit)", steaderr.ErrInvalidArgument)
		}
		if !slices.Contains(synchronousCommitValues, cfg.SynchronousCommit) {
			return nil, fmt.Errorf("%w: postgres: synchronous_commit %q", steaderr.ErrInvalidArgument, cfg.SynchronousCommit)
		}
		// A startup parameter: applied to every pooled session at no cost
		// of a round trip.
		pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = cfg.SynchronousCommit
	}
	if cfg.PgBouncer {
		pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	} else if _, set := pcfg.ConnConfig.RuntimeParams["default_transaction_isolation"]; !set {
		// A startup parameter, like synchronous_commit: a database or role
		// defaulting to another level does not reach stead's sessions.
		pcfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "read committed"
	}
	return pcfg, nil
}

// Pool returns the engine's pool, for callers that need to share it.
func (e *Engine) Pool() *pgxpool.Pool { return e.pool }

// PoolStats reports the pool's connections (engine.PoolReporter).
func (e *Engine) PoolStats() engine.PoolStats {
	st := e.pool.Stat()
	return engine.PoolStats{
		Open: int(st.TotalConns()), Idle: int(st.IdleConns()), InUse: int(st.AcquiredConns()), Max: int(st.MaxConns()),
		EmptyAcquires: st.EmptyAcquireCount(),
	}
}

// Schema returns the schema the engine owns.
func (e *Engine) Schema() string { return e.schema }

// Blobs implements engine.Engine.
func (e *Engine) Blobs() blob.Backend { return &e.blobs }

// GC implements engine.Engine.
func (e *Engine) GC() gc.Backend { return &e.gc }

// Locks implements engine.Engine.
func (e *Engine) Locks() lock.Backend { return &e.locks }

// Records implements engine.Engine.
func (e *Engine) Records() record.Backend { return &e.records }

// Cluster implements engine.Engine.
func (e *Engine) Cluster() (bool, string) { return true, "shared PostgreSQL; CAS + lease fencing" }

// Close implements engine.Engine. A caller-owned pool is left open.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	if e.records.close != nil { // nil when Open failed before setting records up
		e.records.close()
	}
	if e.listen != nil {
		e.listen.stop()
	}
	e.closeInstances()
	e.gc.close()
	if e.ownsPool {
		e.pool.Close()
	}
	if e.tier.tier != nil {
		return e.tier.tier.Close()
	}
	return nil
}

func (e *Engine) check(ctx context.Context) error {
	if e.closed.Load() {
		return steaderr.ErrClosed
	}
	return ctx.Err()
}

// dialDirect opens a connection of its own, outside the pool, as the pool
// opens its connections: from the pool's configuration, with its
// BeforeConnect and AfterConnect hooks (a caller's pool may inject
// credentials or session settings there). adjust, if not nil, changes the
// configuration after BeforeConnect, so what the connection needs wins.
func (e *Engine) dialDirect(ctx context.Context, adjust func(*pgx.ConnConfig)) (*pgx.Conn, error) {
	pcfg := e.pool.Config()
	cc := pcfg.ConnConfig.Copy()
	if pcfg.BeforeConnect != nil {
		if err := pcfg.BeforeConnect(ctx, cc); err != nil {
			return nil, err
		}
	}
	if adjust != nil {
		adjust(cc)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	if pcfg.AfterConnect != nil {
		if err := pcfg.AfterConnect(ctx, conn); err != nil {
			return nil, errors.Join(err, conn.Close(context.WithoutCancel(ctx)))
		}
	}
	return conn, nil
}

// lockKey derives a 64-bit advisory lock key for purpose in this schema, so
// engines in different schemas of one database never contend.
func (e *Engine) lockKey(purpose string) int64 {
	h := fnv.New64a()
	h.Write([]byte("stead:" + purpose + ":" + e.schema))
	return int64(h.Sum64())
}

// inTx runs fn in a transaction on one connection held for the
// transaction's whole life. Whatever happens, including cancellation of ctx,
// the transaction is rolled back before the connection returns to the pool
// unless fn succeeded and the commit did.
func (e *Engine) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return e.inTxOn(ctx, e.pool, fn)
}

// querier runs statements: the pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// beginner is a pool or a connection of its own.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// inTxOn is inTx on db.
func (e *Engine) inTxOn(ctx context.Context, db beginner, fn func(tx pgx.Tx) error) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return interpretError(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return interpretError(err)
	}
	return interpretError(commit(ctx, tx))
}

// commitTimeout bounds a commit that outlives its caller's context.
const commitTimeout = 30 * time.Second

// commit commits tx unless ctx is already done (the caller's deferred
// rollback then undoes it), and once sent runs to its end whatever ctx
// does. A COMMIT abandoned on cancellation may still commit on the server,
// so the caller would be told a write failed that took effect; run to its
// end (within commitTimeout), a commit that reports an error did not
// commit, bar a lost connection.
func commit(ctx context.Context, tx pgx.Tx) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	return tx.Commit(ctx)
}

// nowArg is the argument for a statement's "now" parameter, which it
// reads as coalesce(now, now()): NULL (the database's clock) for the zero
// time.
func nowArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// interval is the argument for a duration, to the microsecond.
func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}
