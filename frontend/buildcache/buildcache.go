// Package buildcache serves a stead store as a build cache, as a thin
// adapter over *stead.Store: over the HTTP protocol of Bazel's
// --remote_cache, which ccache's HTTP remote storage also speaks
// (layout=bazel),
//
//	GET/HEAD/PUT <prefix>cas/<sha256 hex>   content, verified against its digest
//	GET/HEAD/PUT <prefix>ac/<sha256 hex>    action results, mutable
//
// over the Remote Execution API v2's gRPC cache services on the same
// entries (Cache.GRPC), and over Turborepo's, Nx's and Gradle's HTTP
// caches, whose keys are the clients' own (Cache.Turbo, Cache.Nx,
// Cache.Gradle).
//
// Every entry is a ref with an expiry that a read renews (ref.GetTouch),
// so an entry in use stays and a cache nobody reads shrinks by itself
// once the refs lapse and garbage collection takes what they kept. Only
// content with a live entry is served. An action result that parses as
// a remote-execution ActionResult must name only cache content, is
// stored with blob references to all of it, which then live as long as
// it does, and is served only while all of it is stored
// (docs/guides/build-cache.md).
package buildcache

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server/access"
	"github.com/steadkit/stead/steaderr"
)

// Prefix is the path the cache is served under.
const Prefix = "/cache/"

// DefaultTTL is how long an entry nobody reads is kept.
const DefaultTTL = 7 * 24 * time.Hour

// MaxActionResult bounds an action cache entry, in bytes.
const MaxActionResult = 4 << 20

// Options configures a Cache. Zero values mean the defaults.
type Options struct {
	// TTL is how long an entry is kept after it was last written or read
	// (reads renew it once less than half of TTL is left). Defaults to
	// DefaultTTL.
	TTL time.Duration
	// MaxBlobSize is the largest content entry accepted. Defaults to
	// blob.DefaultMaxSize.
	MaxBlobSize int64
	// MaxSize is the size budget of the whole cache (every protocol's
	// entries together), in bytes: Evict deletes the least recently read
	// entries until the distinct blobs the rest keep add up to at most
	// it. 0 means no budget (entries go only when unread for TTL).
	MaxSize int64
	// Now is the clock reads are remembered on for the size budget;
	// defaults to time.Now.
	Now func() time.Time
	// Logger logs internal errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// Cache serves the HTTP cache protocol over one store. It is safe for
// concurrent use.
type Cache struct {
	st      *stead.Store
	opts    Options
	log     *slog.Logger
	recent  recency
	memo    evictMemo
	results resultMemo
}

// New returns a Cache over st, which stays the caller's to close.
func New(st *stead.Store, opts Options) *Cache {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxBlobSize <= 0 {
		opts.MaxBlobSize = blob.DefaultMaxSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Cache{st: st, opts: opts, log: opts.Logger,
		memo: evictMemo{kept: map[blob.Key][]blob.Key{}, size: map[blob.Key]int64{}}}
}

// authorize checks the caller the server put in r's context (package
// access): a read (GET, HEAD) needs cache read, a write cache write.
func authorize(w http.ResponseWriter, r *http.Request) bool {
	action := access.Write
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		action = access.Read
	}
	return authorizeAction(w, r, action)
}

// authorizeAction checks that the caller of r may do action on the
// cache, answering the refusal: 401 with Bearer and Basic challenges,
// 403, or 429.
func authorizeAction(w http.ResponseWriter, r *http.Request, action string) bool {
	err := access.Check(r.Context(), access.Area, "cache", action)
	switch {
	case err == nil:
		return true
	case errors.Is(err, access.ErrDenied):
		http.Error(w, "access denied: this user may not "+action+" the cache", http.StatusForbidden)
	case errors.Is(err, access.ErrTooManyAttempts):
		w.Header().Set("Retry-After", access.RetryAfter(err))
		http.Error(w, err.Error(), http.StatusTooManyRequests)
	default:
		w.Header().Add("WWW-Authenticate", `Bearer realm="stead"`)
		w.Header().Add("WWW-Authenticate", `Basic realm="stead"`)
		http.Error(w, "missing or wrong credentials: send Basic user:password or a bearer token", http.StatusUnauthorized)
	}
	return false
}

// ServeHTTP serves a request under Prefix.
func (c *Cache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !authorize(w, r) {
		return
	}
	kind, hex, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, Prefix), "/")
	if !ok || (kind != "cas" && kind != "ac") {
		http.Error(w, "want "+Prefix+"cas/<sha256> or "+Prefix+"ac/<sha256>", http.StatusNotFound)
		return
	}
	key, err := blob.ParseKey("sha256:" + hex)
	if err != nil {
		http.Error(w, fmt.Sprintf("%.80q is not a SHA-256 digest: want 64 lowercase hex digits", hex), http.StatusBadRequest)
		return
	}
	switch {
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		if kind == "cas" {
			err = c.getCAS(w, r, key)
		} else {
			err = c.getAC(w, r, hex)
		}
	case r.Method == http.MethodPut:
		if kind == "cas" {
			err = c.putCAS(w, r, key)
		} else {
			err = c.putAC(w, r, hex)
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if err != nil {
		c.fail(w, r, err)
	}
}

func (c *Cache) fail(w http.ResponseWriter, r *http.Request, err error) {
	var incomplete *IncompleteError
	switch {
	case errors.Is(err, steaderr.ErrNotFound):
		http.Error(w, "not in the cache", http.StatusNotFound)
	case errors.Is(err, steaderr.ErrCorrupt):
		c.log.Error("build cache: stored bytes lost or changed", "method", r.Method, "path", r.URL.Path, "err", err)
		http.Error(w, "the stored entry is lost or damaged", http.StatusInternalServerError)
	case errors.Is(err, steaderr.ErrDigestMismatch):
		http.Error(w, "content does not hash to its digest", http.StatusBadRequest)
	case errors.As(err, &incomplete), errors.Is(err, steaderr.ErrInvalidArgument):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case errors.Is(err, steaderr.ErrTooLarge):
		http.Error(w, "entry too large", http.StatusRequestEntityTooLarge)
	case errors.Is(err, steaderr.ErrUnavailable), errors.Is(err, steaderr.ErrClosed):
		c.log.Warn("build cache: store unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
	default:
		c.log.Error("build cache: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}

// getCAS serves cache content by digest, and renews its entry.
func (c *Cache) getCAS(w http.ResponseWriter, r *http.Request, key blob.Key) error {
	rd, err := c.openContent(r.Context(), key)
	if err != nil {
		return err
	}
	defer rd.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(rd.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, rd)
	}
	return nil
}

// putCAS stores the body under its digest, refusing a body that does not
// hash to it, and keeps it for TTL.
func (c *Cache) putCAS(w http.ResponseWriter, r *http.Request, key blob.Key) error {
	if r.ContentLength > c.opts.MaxBlobSize {
		return fmt.Errorf("%w: %d bytes", steaderr.ErrTooLarge, r.ContentLength)
	}
	if err := c.putContent(r.Context(), key, r.Body); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// getAC serves an action result and renews its entry: one that parses as
// an ActionResult only while every output it names is stored.
func (c *Cache) getAC(w http.ResponseWriter, r *http.Request, hex string) error {
	body, _, err := c.getResult(r.Context(), hex)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
	return nil
}

// putAC stores an action result under its action's digest, replacing any
// before it. A result that parses as an ActionResult must name only
// cache content, and is stored with it as its children.
func (c *Cache) putAC(w http.ResponseWriter, r *http.Request, hex string) error {
	if r.ContentLength > MaxActionResult {
		return fmt.Errorf("%w: %d bytes", steaderr.ErrTooLarge, r.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxActionResult+1))
	if err != nil {
		return fmt.Errorf("%w: reading the body: %v", steaderr.ErrInvalidArgument, err)
	}
	if len(body) > MaxActionResult {
		return fmt.Errorf("%w: over %d bytes", steaderr.ErrTooLarge, MaxActionResult)
	}
	if err := c.putResult(r.Context(), hex, body, parseResult(body)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}
