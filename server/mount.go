package server

import (
	"context"
	"net/http"
)

// Mount is a front end the server serves under a path prefix besides its
// own API, such as the OCI registry at /v2/: it shares the server's
// connection limits, metrics, upload slots and authority.
type Mount struct {
	// Prefix is the path the front end serves, ending in a slash
	// ("/v2/"): every request under it goes to Handler.
	Prefix  string
	Handler http.Handler
	// Collect, if set, runs the front end's own collection (the
	// registry's policies) before each of the server's background sweeps
	// (Options.GCInterval), so what it releases goes at the sweeps that
	// follow. Its error is logged and counted; the sweep runs anyway.
	Collect func(ctx context.Context) error
	// Preview, if set, lists what Collect would delete now (a dry run),
	// for the console's retention page.
	Preview func(ctx context.Context) ([]Preview, error)
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
		if rw, ok := w.(*responseWriter); ok {
			rw.raw = true
		}
		c, err := s.access.Authenticate(r)
		noteCaller(w, c)
		r = r.WithContext(s.access.NewContext(r.Context(), c, err))
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
}

type bodyCloser struct {
	*bodyReader
	c interface{ Close() error }
}

func (b bodyCloser) Close() error { return b.c.Close() }
