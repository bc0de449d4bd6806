package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/server/access"
)

// need is what a route asks of its caller: an action on an area. /metrics
// needs metrics read; under /v1, the collector's routes (/v1/gc/..., the
// reaps) and schema migration need gc, the other GETs read, and the rest
// write.
func need(pattern string) (area, action string) {
	method, path, _ := strings.Cut(pattern, " ")
	switch {
	case path == "/metrics":
		return "metrics", access.Read
	case strings.HasPrefix(path, "/v1/gc/"), strings.HasSuffix(path, "/reap"), path == "/v1/schema/migrate":
		return "v1", access.GC
	case method == http.MethodGet:
		return "v1", access.Read
	}
	return "v1", access.Write
}

// check authenticates r's caller and says whether it may do action on
// area: nil, or access.ErrUnauthenticated (an anonymous caller refused),
// access.ErrDenied or access.ErrTooManyAttempts.
func (s *Server) check(r *http.Request, area, action string) (*access.Caller, error) {
	c, err := s.access.Authenticate(r)
	if err == nil && !c.May(access.Area, area, action) {
		err = access.ErrDenied
		if c.Name() == "" {
			err = access.ErrUnauthenticated
		}
	}
	return c, err
}

// auth wraps a route's handler with the check of its caller (need).
func (s *Server) auth(pattern string, h http.HandlerFunc) http.HandlerFunc {
	if s.access.Open() {
		return h
	}
	area, action := need(pattern)
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := s.check(r, area, action)
		noteCaller(w, c)
		switch {
		case err == nil:
			h(w, r)
		case errors.Is(err, access.ErrTooManyAttempts):
			w.Header().Set("Retry-After", access.RetryAfter(err))
			writeError(w, wire.CodeTooManyAttempts, err.Error())
		case errors.Is(err, access.ErrDenied):
			writeError(w, wire.CodeForbidden, "access denied: "+c.Name()+" may not "+action+" "+area)
		default:
			w.Header().Add("WWW-Authenticate", `Bearer realm="stead"`)
			w.Header().Add("WWW-Authenticate", `Basic realm="stead"`)
			writeError(w, wire.CodeUnauthorized, "missing or wrong credentials: send a bearer token or Basic user:password")
		}
	}
}
