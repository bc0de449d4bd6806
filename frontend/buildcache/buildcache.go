// Package buildcache serves a stead store as a build cache over the HTTP
// protocol of Bazel's --remote_cache, which ccache's HTTP remote storage
// also speaks (layout=bazel), as a thin adapter over *stead.Store:
//
//	GET/HEAD/PUT <prefix>cas/<sha256 hex>   content, verified against its digest
//	GET/HEAD/PUT <prefix>ac/<sha256 hex>    action results, mutable
//
// Every entry is a ref with an expiry that a read renews (ref.GetTouch),
// so an entry in use stays and a cache nobody reads shrinks by itself
// once the refs lapse and garbage collection takes what they kept. An
// action result that parses as a remote-execution ActionResult is stored
// with blob references to its outputs, which then live as long as it
// does (docs/guides/build-cache.md).
package buildcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
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
	// Logger logs internal errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// Cache serves the HTTP cache protocol over one store. It is safe for
// concurrent use.
type Cache struct {
	st   *stead.Store
	opts Options
	log  *slog.Logger
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
	return &Cache{st: st, opts: opts, log: opts.Logger}
}

// authorize checks the caller the server put in r's context (package
// access): a read needs cache read, a write cache write. It answers the
// refusal: 401 with Bearer and Basic challenges, 403, or 429.
func authorize(w http.ResponseWriter, r *http.Request) bool {
	action := access.Write
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		action = access.Read
	}
	err := access.Check(r.Context(), access.Area, "cache", action)
	switch {
	case err == nil:
		return true
	case errors.Is(err, access.ErrDenied):
		http.Error(w, "access denied: this user may not "+action+" the cache", http.StatusForbidden)
	case errors.Is(err, access.ErrTooManyAttempts):
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusTooManyRequests)
	default:
		w.Header().Add("WWW-Authenticate", `Bearer realm="stead"`)
		w.Header().Add("WWW-Authenticate", `Basic realm="stead"`)
		http.Error(w, "missing or wrong credentials: send Basic user:password or a bearer token", http.StatusUnauthorized)
	}
	return false
}

// The refs entries are kept by.
func casRef(hex string) string { return "cache/cas/" + hex }
func acRef(hex string) string  { return "cache/ac/" + hex }

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
	switch {
	case errors.Is(err, steaderr.ErrNotFound):
		http.Error(w, "not in the cache", http.StatusNotFound)
	case errors.Is(err, steaderr.ErrDigestMismatch):
		http.Error(w, "content does not hash to its digest", http.StatusBadRequest)
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

// getCAS serves stored content by digest, and renews its entry. Content
// an action result keeps is served too, though its own entry lapsed.
func (c *Cache) getCAS(w http.ResponseWriter, r *http.Request, key blob.Key) error {
	rd, err := c.st.Blobs.Get(r.Context(), key)
	if err != nil {
		return err
	}
	defer rd.Close()
	if _, err := c.st.Refs.GetTouch(r.Context(), casRef(strings.TrimPrefix(key.String(), "sha256:")), c.opts.TTL); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
		return err
	}
	serve(w, r, rd)
	return nil
}

func serve(w http.ResponseWriter, r *http.Request, rd *blob.Reader) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(rd.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, rd)
	}
}

// putCAS stores the body under its digest, refusing a body that does not
// hash to it, and keeps it for TTL.
func (c *Cache) putCAS(w http.ResponseWriter, r *http.Request, key blob.Key) error {
	if r.ContentLength > c.opts.MaxBlobSize {
		return fmt.Errorf("%w: %d bytes", steaderr.ErrTooLarge, r.ContentLength)
	}
	if err := c.st.Blobs.PutExpect(r.Context(), key, r.Body); err != nil {
		return err
	}
	if _, err := c.st.Refs.Set(r.Context(), casRef(strings.TrimPrefix(key.String(), "sha256:")), key, ref.SetOptions{TTL: c.opts.TTL}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// getAC serves an action result and renews its entry.
func (c *Cache) getAC(w http.ResponseWriter, r *http.Request, hex string) error {
	rf, err := c.st.Refs.GetTouch(r.Context(), acRef(hex), c.opts.TTL)
	if err != nil {
		return err
	}
	rd, err := c.st.Blobs.Get(r.Context(), rf.Key)
	if err != nil {
		return err
	}
	defer rd.Close()
	serve(w, r, rd)
	return nil
}

// putAC stores an action result under its action's digest, replacing any
// before it. A result that parses as an ActionResult is stored with blob
// references to the outputs it names that are stored, so they are kept
// while it is.
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
	children, err := c.outputs(r, body)
	if err != nil {
		return err
	}
	key, err := c.st.Blobs.PutWith(r.Context(), bytes.NewReader(body), blob.PutOptions{Children: children})
	if errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrChildrenFixed) {
		// An output was collected between the check and the put, or the
		// same result is stored already with the outputs that were
		// stored then (a blob's children are fixed by the put that
		// stores it): keep it as it is; other outputs keep their own
		// entries.
		key, err = c.st.Blobs.Put(r.Context(), bytes.NewReader(body))
	}
	if err != nil {
		return err
	}
	if _, err := c.st.Refs.Set(r.Context(), acRef(hex), key, ref.SetOptions{TTL: c.opts.TTL}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// outputs returns the stored content an action result names (its output
// files, output directory trees, stdout and stderr), or none when body is
// not an ActionResult (ccache's entries are not).
func (c *Cache) outputs(r *http.Request, body []byte) ([]blob.Key, error) {
	var res repb.ActionResult
	if len(body) == 0 || proto.Unmarshal(body, &res) != nil {
		return nil, nil
	}
	var digests []*repb.Digest
	for _, f := range res.GetOutputFiles() {
		digests = append(digests, f.GetDigest())
	}
	for _, d := range res.GetOutputDirectories() {
		digests = append(digests, d.GetTreeDigest())
	}
	digests = append(digests, res.GetStdoutDigest(), res.GetStderrDigest())
	var keys []blob.Key
	for _, d := range digests {
		if len(keys) == blob.MaxChildren {
			break
		}
		k, err := blob.ParseKey("sha256:" + d.GetHash())
		if err != nil {
			continue // absent, or not SHA-256: not ours
		}
		stored, err := c.st.Blobs.Has(r.Context(), k)
		if err != nil {
			return nil, err
		}
		if stored {
			keys = append(keys, k)
		}
	}
	return keys, nil
}
