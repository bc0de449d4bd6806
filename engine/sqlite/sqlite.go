// Package sqlite is the SQLite engine: the embedded default, one process per
// database file. It uses modernc.org/sqlite (pure Go) through database/sql,
// in WAL mode, with one writer connection, whose transactions begin
// IMMEDIATE, beside a pool of query-only readers. Concurrent puts share
// commits (group commit).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/internal/bytestier"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// Engine is the SQLite engine. It is safe for concurrent use. The zero
// value is not usable; call Open.
type Engine struct {
	closed atomic.Bool
	// path is the database file's absolute path.
	path string
	// instances are the instance id claims the engine holds, released on
	// Close (see ClaimInstance).
	instanceMu sync.Mutex
	instances  []*instanceClaim
	// writer has exactly one connection: every write in this process is
	// serialized on it, and its transactions take the write lock up front.
	writer *sql.DB
	// reader is the query-only pool; each read statement sees one snapshot.
	reader  *sql.DB
	blobs   blobs
	locks   locks
	records records
	refs    refStmts
	resolve resolveStmts
	putSets putSets
	// tier is the bytes tier (nil: none); attachTier sets tierReady once
	// the store's record and the bucket's marker agree.
	tier      *bytestier.Tier
	tierAdopt bool
	tierMu    sync.Mutex
	tierReady atomic.Bool
	// dropCrash, set by tests, makes dropObjects do nothing, as a process
	// killed between a row deletion's commit and its object's deletion.
	dropCrash atomic.Pointer[bool]
}

var (
	_ engine.Engine          = (*Engine)(nil)
	_ engine.InstanceClaimer = (*Engine)(nil)
)

// Open opens the database at cfg.Path, creating the file if needed but not
// its directory: a directory that does not exist is an error wrapping
// steaderr.ErrInvalidArgument. It does not migrate: the caller (stead.New)
// calls Migrate.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	// An absolute path pins the file: the pools open connections lazily,
	// and a later change of working directory must not move the database.
	path, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", cfg.Path, err)
	}
	// A missing directory is a mistyped path: a new, empty store there
	// would answer "nothing stored" for the caller's real one.
	if dir := filepath.Dir(path); !dirExists(dir) {
		return nil, fmt.Errorf("sqlite: open %s: %w: directory %s does not exist (create it first)", path, steaderr.ErrInvalidArgument, dir)
	}
	// A file where the path wants a directory, or a directory where it
	// wants the database file, is a path written wrong (sqlite://afile/x.db
	// reads afile as a directory): say how one is written, not the
	// driver's "unable to open database file".
	if fi, err := os.Stat(filepath.Dir(path)); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("sqlite: open %s: %w: %s is a file, not a directory; write the database's path as sqlite:///abs/dir/stead.db or sqlite://./rel/dir/stead.db", path, steaderr.ErrInvalidArgument, filepath.Dir(path))
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("sqlite: open %s: %w: it is a directory, not a database file; write the file's path, as sqlite:///abs/dir/stead.db or sqlite://./rel/dir/stead.db", path, steaderr.ErrInvalidArgument)
	}
	e := &Engine{path: path, tierAdopt: cfg.BytesAdopt}
	switch {
	case cfg.Bucket != nil:
		e.tier = bytestier.New(cfg.Bucket)
	case cfg.Bytes != "":
		if e.tier, err = bytestier.Open(ctx, cfg.Bytes); err != nil {
			return nil, fmt.Errorf("sqlite: open: %w", err)
		}
	}
	busy := "busy_timeout(" + strconv.FormatInt(cfg.BusyTimeout.Milliseconds(), 10) + ")"
	synchronous := "synchronous(" + cfg.Synchronous + ")"
	e.writer, err = sql.Open("sqlite", dsn(path, url.Values{
		"_pragma": {busy, "journal_mode(WAL)", synchronous, "foreign_keys(1)"},
		"_txlock": {"immediate"},
	}))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: open %s: %w", path, err), e.closeTier())
	}
	e.writer.SetMaxOpenConns(1)
	e.writer.SetMaxIdleConns(1)
	e.reader, err = sql.Open("sqlite", dsn(path, url.Values{
		"_pragma": {busy, synchronous, "foreign_keys(1)", "query_only(1)"},
	}))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("sqlite: open %s: %w", path, err), e.writer.Close())
	}
	e.reader.SetMaxOpenConns(cfg.ReadConns)
	e.reader.SetMaxIdleConns(cfg.ReadConns)
	e.blobs.init(e)
	e.locks.init(e)
	e.records.init(e)
	e.refs.init(e)
	e.resolve.init(e)
	e.putSets.init(e)
	// The writer connects first: it turns the file into a WAL database
	// before any reader opens it, and fails fast on a file that is no
	// database.
	if err := e.writer.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", path, interpretError(ctx, err)), e.close())
	}
	return e, nil
}

// dsn returns the modernc.org/sqlite data source name for path with the
// driver parameters q. The path goes in a file: URI, where '%', '?' and '#'
// must be escaped.
func dsn(path string, q url.Values) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter: file:/C:/dir/s.db
	}
	p = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
	return "file:" + p + "?" + q.Encode()
}

// Blobs implements engine.Engine.
func (e *Engine) Blobs() blob.Backend { return &e.blobs }

// GC implements engine.Engine.
func (e *Engine) GC() gc.Backend { return gcMech{&e.blobs} }

// Locks implements engine.Engine.
func (e *Engine) Locks() lock.Backend { return &e.locks }

// Records implements engine.Engine.
func (e *Engine) Records() record.Backend { return &e.records }

// Cluster implements engine.Engine.
func (e *Engine) Cluster() (bool, string) { return false, "single-node file" }

// Close implements engine.Engine. It waits for running statements to
// finish; puts still queued for a commit fail with steaderr.ErrClosed.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	if err := e.close(); err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

func (e *Engine) close() error {
	errs := []error{e.blobs.close(), e.locks.close(), e.records.close(), e.refs.close(), e.resolve.close(), e.releaseInstances()}
	// The writer closes last: the last connection to close checkpoints the
	// WAL into the database file.
	if e.reader != nil {
		errs = append(errs, e.reader.Close())
	}
	errs = append(errs, e.writer.Close(), e.closeTier())
	return errors.Join(errs...)
}

func (e *Engine) closeTier() error {
	if e.tier == nil {
		return nil
	}
	return e.tier.Close()
}

// check returns the error an operation must fail with before it starts.
func (e *Engine) check(ctx context.Context) error {
	if e.closed.Load() {
		return steaderr.ErrClosed
	}
	return ctx.Err()
}

// stmt is a statement prepared on first use and kept for the engine's life.
// It cannot be prepared at Open: on a database never migrated its table
// does not exist yet.
type stmt struct {
	db     *sql.DB
	query  string
	mu     sync.Mutex
	p      atomic.Pointer[sql.Stmt]
	closed bool // under mu: get fails rather than prepare again
}

func (s *stmt) get(ctx context.Context) (*sql.Stmt, error) {
	if p := s.p.Load(); p != nil {
		return p, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.p.Load(); p != nil {
		return p, nil
	}
	if s.closed {
		return nil, steaderr.ErrClosed
	}
	p, err := s.db.PrepareContext(ctx, s.query)
	if err != nil {
		return nil, err
	}
	s.p.Store(p)
	return p, nil
}

func (s *stmt) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if p := s.p.Swap(nil); p != nil {
		return p.Close()
	}
	return nil
}

// dirExists reports whether dir exists (a directory, or anything else,
// which SQLite then refuses with its own error).
func dirExists(dir string) bool {
	_, err := os.Stat(dir)
	return !errors.Is(err, fs.ErrNotExist)
}
