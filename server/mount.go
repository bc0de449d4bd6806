package server

import (
	"context"
	"net/http"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/ref"
)

// Mount is a front end the server serves under a path prefix besides its
// own API, such as the OCI registry at /v2/: it shares the server's
// connection limits, metrics, upload slots and authority.
type Mount struct {
	// Prefix is the path the front end serves, ending in a slash
	// ("/v2/"): every request under it goes to Handler.
	Prefix  string
	Handler http.Handler
	// RefPrefix, if set, begins the name of every ref the front end
	// keeps ("oci/"): after each background sweep the server reads its
	// usage (stead.Store.Usage) into the stead_usage_* metrics.
	RefPrefix string
	// Collect, if set, runs the front end's own collection (the
	// registry's policies) before each of the server's background sweeps
	// (Options.GCInterval), so what it releases goes at the sweeps that
	// follow. Its error is logged and counted; the sweep runs anyway.
	Collect func(ctx context.Context) error
	// Preview, if set, lists what Collect would delete now (a dry run),
	// for the console's retention page.
	Preview func(ctx context.Context) ([]Preview, error)
	// Repositories, if set, lists up to n of the front end's repositories
	// whose names sort after after ("": from the first), in its order,
	// for the console, which knows nothing of how the front end names its
	// refs: fewer than n means the list is complete.
	Repositories func(ctx context.Context, after string, n int) ([]string, error)
	// Repository, if set with Repositories, answers one repository as the
	// console shows it, its tags and manifests a page of at most q.Limit
	// each; a name the front end refuses is an error wrapping
	// steaderr.ErrInvalidName.
	Repository func(ctx context.Context, q RepositoryQuery) (Repository, error)
}

// RepositoryQuery asks Mount.Repository for a repository and a page of
// its tags and of its manifests.
type RepositoryQuery struct {
	Name string
	// TagsAfter and ManifestsAfter continue the lists after the tag or
	// manifest named ("": from the first).
	TagsAfter, ManifestsAfter string
	Limit                     int
}

// Repository is a repository as a front end shows it in the console.
type Repository struct {
	// RefPrefix begins the name of every ref the front end keeps for the
	// repository.
	RefPrefix string
	// Tags and Manifests are a page each in name order, each ref's Name
	// the tag or the manifest's digest; More* report that more follow.
	Tags, Manifests         []ref.Ref
	MoreTags, MoreManifests bool
	// Usage is what the repository's refs hold.
	Usage stead.Usage
}

// mount wraps a front end's handler, whose answers (refusals included)
// are its own: the caller, authenticated by the server's authority and
// carried in the request's context (access.NewContext) for the front end
// to check, then the server's body rules (MinBodyRate after BodyGrace, an upload slot for a request
// with a body, cut off when it stalls during shutdown). A GET or HEAD may
// stream a large answer, so it gets no overall deadline: each write must
// finish within RequestTimeout.
func (s *Server) mount(m Mount) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(s.callerContext(w, r, r.Context()))
		s.serveMount(m, w, r)
	}
}

// callerContext is ctx carrying r's caller as the server's authority
// authenticates it (access.NewContext), noted on w for the access log.
func (s *Server) callerContext(w http.ResponseWriter, r *http.Request, ctx context.Context) context.Context {
	c, err := s.access.Authenticate(r)
	noteCaller(w, c)
	return s.access.NewContext(ctx, c, err)
}

// serveMount serves r, whose context carries its caller
// (callerContext), by m as mount describes.
func (s *Server) serveMount(m Mount, w http.ResponseWriter, r *http.Request) {
	if rw, ok := w.(*responseWriter); ok {
		rw.raw = true
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		s.stream(w)
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		release, ok := s.uploadSlot(w, r)
		if !ok {
			return
		}
		defer release()
		body := s.newBodyReader(w, r)
		defer body.done()
		r.Body = bodyCloser{body, r.Body}
	}
	m.Handler.ServeHTTP(w, r)
}

type bodyCloser struct {
	*bodyReader
	c interface{ Close() error }
}

func (b bodyCloser) Close() error { return b.c.Close() }
