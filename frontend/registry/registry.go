// Package registry serves a stead store as an OCI registry: the
// distribution spec v1.1 at /v2/ (pull, push, content discovery and
// content management), as a thin adapter over *stead.Store. Liveness is
// the image graph (docs/guides/registry.md): a tag is a ref to its
// manifest, a manifest is stored with blob references to its config,
// layers and child manifests, and a repository links the
// manifests and blobs pushed to it, so that deleting a tag or a manifest
// leaves what it alone kept to the store's ordinary garbage collection,
// while pushes and pulls go on.
package registry

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// Prefix is the path the registry is served under.
const Prefix = "/v2/"

// Defaults of Options.
const (
	// DefaultPendingTTL is how long a pushed blob that no manifest
	// references is kept.
	DefaultPendingTTL = 24 * time.Hour
	// DefaultUploadIdle is how long a chunked upload may go without a
	// chunk before it is dropped.
	DefaultUploadIdle = 15 * time.Minute
	// MaxManifestSize is the largest manifest accepted, in bytes: the
	// distribution spec asks registries to accept at least 4 MiB.
	MaxManifestSize = 4 << 20
)

// Options configures a Registry. Zero values mean the defaults.
type Options struct {
	// PendingTTL is how long a pushed blob stays in its repository and
	// alive before a manifest references it: the push of an image's
	// layers and of its manifest must fit in it. Defaults to
	// DefaultPendingTTL.
	PendingTTL time.Duration
	// UploadIdle is how long a chunked upload may go without a chunk
	// before the store reaps it with its bytes: the lease of its
	// blob.Upload, in whole microseconds, at most blob.MaxUploadLease.
	// Defaults to DefaultUploadIdle.
	UploadIdle time.Duration
	// MaxBlobSize is the largest blob a push may carry. Defaults to
	// blob.DefaultMaxSize.
	MaxBlobSize int64
	// DeleteUntaggedAfter, when positive, lets Collect delete a manifest
	// pushed longer ago than this that no tag names and nothing kept
	// needs (no kept index lists it, it refers to no kept subject), in
	// each repository whose Retention rule sets no period of its own.
	// Defaults to 0: an untagged manifest stays until deleted by digest.
	DeleteUntaggedAfter time.Duration
	// Retention is the retention policy Collect applies and pushes obey
	// (immutable tags). Defaults to nil: none.
	Retention *Retention
	// Now is the clock of push times and of Collect. Defaults to
	// time.Now.
	Now func() time.Time
	// Logger logs internal errors. Defaults to slog.Default().
	Logger *slog.Logger
}

// Registry serves the distribution spec over one store. It is safe for
// concurrent use, and holds nothing of a push in memory: a chunked
// upload's state is the store's, so each of its requests may reach any
// Registry over the same database, one started since included. Mounted
// on a server, its requests in progress are bounded by the server's
// (server.Options.MaxUploads).
type Registry struct {
	st    *stead.Store
	opts  Options
	log   *slog.Logger
	pulls pullMemo
}

// New returns a Registry over st, which stays the caller's to close.
func New(st *stead.Store, opts Options) *Registry {
	if opts.PendingTTL <= 0 {
		opts.PendingTTL = DefaultPendingTTL
	}
	if opts.UploadIdle <= 0 {
		opts.UploadIdle = DefaultUploadIdle
	}
	opts.UploadIdle = max(min(opts.UploadIdle.Truncate(time.Microsecond), blob.MaxUploadLease), time.Microsecond)
	if opts.MaxBlobSize <= 0 {
		opts.MaxBlobSize = blob.DefaultMaxSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Registry{st: st, opts: opts, log: opts.Logger}
}

// apiVersion is the Docker-Distribution-API-Version of every answer,
// shared: nothing writes into a header's values.
var apiVersion = []string{"registry/2.0"}[:1:1]

// ServeHTTP serves a request under Prefix.
func (g *Registry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header()["Docker-Distribution-Api-Version"] = apiVersion // the canonical key: nothing to canonicalize
	p, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if ok && p == "token" {
		g.serveToken(w, r)
		return
	}
	rt, found := parseRoute(p)
	if !ok || !found {
		writeError(w, &regError{code: codeNameUnknown, msg: "no such endpoint", status: http.StatusNotFound})
		return
	}
	if rt.kind != "base" && rt.kind != "catalog" {
		if e := checkName(rt.name); e != nil {
			writeError(w, e)
			return
		}
	}
	if !g.authorize(w, r, rt) {
		return
	}
	var err error
	switch m := r.Method; {
	case rt.kind == "base" && (m == http.MethodGet || m == http.MethodHead):
		err = g.base(w, r)
	case rt.kind == "catalog" && m == http.MethodGet:
		err = g.listCatalog(w, r)
	case rt.kind == "blob" && (m == http.MethodGet || m == http.MethodHead):
		err = g.getBlob(w, r, rt)
	case rt.kind == "blob" && m == http.MethodDelete:
		err = g.deleteBlob(w, r, rt)
	case rt.kind == "uploads" && m == http.MethodPost:
		err = g.startUpload(w, r, rt)
	case rt.kind == "upload" && m == http.MethodGet:
		err = g.uploadStatus(w, r, rt)
	case rt.kind == "upload" && m == http.MethodPatch:
		err = g.patchUpload(w, r, rt)
	case rt.kind == "upload" && m == http.MethodPut:
		err = g.finishUpload(w, r, rt)
	case rt.kind == "upload" && m == http.MethodDelete:
		err = g.cancelUpload(w, r, rt)
	case rt.kind == "manifest" && (m == http.MethodGet || m == http.MethodHead):
		err = g.getManifest(w, r, rt)
	case rt.kind == "manifest" && m == http.MethodPut:
		err = g.putManifest(w, r, rt)
	case rt.kind == "manifest" && m == http.MethodDelete:
		err = g.deleteManifest(w, r, rt)
	case rt.kind == "tags" && m == http.MethodGet:
		err = g.listTags(w, r, rt)
	case rt.kind == "referrers" && m == http.MethodGet:
		err = g.listReferrers(w, r, rt)
	default:
		err = &regError{code: codeUnsupported, msg: "method " + m + " is not supported here"}
	}
	if err != nil {
		var re *regError
		if !errors.As(err, &re) {
			re = g.storeError(r, err, codeUnknown)
		}
		writeError(w, re)
	}
}

// basePing bounds the base endpoint's probe of the store.
const basePing = 2 * time.Second

// base answers the base endpoint, which clients probe before they push:
// 200 {} when the store answers (its schema version, a cheap read), the
// store's error (503 UNAVAILABLE with Retry-After while its database is
// away) otherwise.
func (g *Registry) base(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), basePing)
	defer cancel()
	if _, _, err := g.st.Engine().SchemaVersion(ctx); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", "2")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write([]byte("{}"))
	}
	return nil
}

// linked reports whether the live ref name exists.
func (g *Registry) linked(ctx context.Context, name string) (ref.Ref, bool, error) {
	rf, err := g.st.Refs.Get(ctx, name)
	switch {
	case err == nil:
		return rf, true, nil
	case errors.Is(err, steaderr.ErrNotFound):
		return ref.Ref{}, false, nil
	}
	return ref.Ref{}, false, err
}

// linkBlob links the stored blob d to repo, and keeps it for PendingTTL
// unless a manifest references it meanwhile. The caller holds d stored
// and protected (a put's pin, or a live pending ref) while linkBlob runs,
// so the two refs are set side by side, a round trip instead of two in
// turn: either fails with ErrNotFound only when d was collected first,
// and a weak link set then goes with it.
func (g *Registry) linkBlob(ctx context.Context, repo string, d blob.Key) error {
	pending := make(chan error, 1)
	go func() {
		_, err := g.st.Refs.Set(ctx, pendingRef(repo, d), d, ref.SetOptions{TTL: g.opts.PendingTTL})
		pending <- err
	}()
	_, err := g.st.Refs.Set(ctx, blobRef(repo, d), d, ref.SetOptions{Weak: true})
	return errors.Join(<-pending, err)
}
