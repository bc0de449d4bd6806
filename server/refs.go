package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// Refs: /v1/refs/{name...}. The ref's version is its ETag; a set is
// create-only with If-None-Match: *, a compare-and-swap with If-Match:
// "VERSION", unconditional with neither; a failed condition is 412.

// refStore returns the server's ref store, or one on the clock stopped at
// now when now is set (a client's clock, allowed in tests).
func (s *Server) refStore(now time.Time) *ref.Store {
	if now.IsZero() {
		return s.refs
	}
	return ref.NewStore(s.eng.Refs(), ref.Options{Now: func() time.Time { return now }})
}

func wireRef(r ref.Ref) wire.Ref {
	return wire.Ref{Name: r.Name, Key: r.Key.String(), Version: r.Version, Annotation: r.Annotation, Expiry: r.Expiry, Weak: r.Weak}
}

// writeRef answers a ref with its version as the ETag.
func writeRef(w http.ResponseWriter, status int, r ref.Ref) {
	w.Header().Set("ETag", wire.ETag(r.Version))
	writeJSON(w, status, wireRef(r))
}

// failRef answers a ref call's error: a failed condition is 412.
func (s *Server) failRef(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, steaderr.ErrConflict) {
		err = &preconditionFailed{err: err}
	}
	s.fail(w, r, err)
}

// getRef: GET /v1/refs/{name...}[?touch=TTL][&stored=true], the live ref;
// with touch, renewed to expire TTL from now when less than half of TTL is
// left; with stored, answered with its blob's stored form (resolveRef).
func (s *Server) getRef(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	for _, p := range []string{"touch", "stored"} {
		if n := len(r.URL.Query()[p]); n > 1 {
			s.fail(w, r, &badRequest{fmt.Sprintf("%s given %d times", p, n)})
			return
		}
	}
	now, err := s.queryNow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	refs := s.refStore(now)
	var got ref.Ref
	if text := r.URL.Query().Get("touch"); text != "" {
		ttl, perr := time.ParseDuration(text)
		if perr != nil {
			s.fail(w, r, &badRequest{fmt.Sprintf("touch %q: want a Go duration such as 168h", text)})
			return
		}
		if r.URL.Query().Has("stored") {
			if err := ref.CheckTTL(ttl); err != nil {
				s.fail(w, r, fmt.Errorf("touch: %w", err))
				return
			}
			s.resolveRef(w, r, refs, ttl)
			return
		}
		got, err = refs.GetTouch(r.Context(), name, ttl)
	} else if r.URL.Query().Has("stored") {
		s.resolveRef(w, r, refs, 0)
		return
	} else {
		got, err = refs.Get(r.Context(), name)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeRef(w, http.StatusOK, got)
}

// setRef: PUT /v1/refs/{name...} with {"key", "ttl", "annotation", "weak"}:
// the ref with its new version, 201 when the set created the name (no
// live ref had it), 200 when it replaced one.
func (s *Server) setRef(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var opts ref.SetOptions
	ifMatch, ifNone := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
	switch {
	case ifMatch != "" && ifNone != "":
		s.fail(w, r, &badRequest{"send If-Match to swap or If-None-Match: * to create, not both"})
		return
	case ifMatch != "":
		v, err := wire.ParseETag(ifMatch)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		opts.IfVersion = v
	case ifNone == "*":
		opts.IfAbsent = true
	case ifNone != "":
		s.fail(w, r, &badRequest{`If-None-Match on a ref set must be "*" (create)`})
		return
	}
	var req wire.RefSet
	err := s.readJSON(w, r, &req)
	var key blob.Key
	if err == nil {
		key, err = blob.ParseKey(req.Key)
	}
	var now time.Time
	if err == nil {
		now, err = s.clock(req.Now)
	}
	if err == nil && req.TTL != nil {
		opts.TTL = time.Duration(*req.TTL)
		err = ref.CheckTTL(opts.TTL)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	opts.Annotation, opts.Weak = req.Annotation, req.Weak
	got, err := s.refStore(now.Truncate(time.Microsecond)).Set(r.Context(), name, key, opts)
	if err != nil {
		s.failRef(w, r, err)
		return
	}
	s.metrics.refSet()
	status := http.StatusOK
	if got.Created {
		status = http.StatusCreated
	}
	writeRef(w, status, got)
}

// touchRef: PATCH /v1/refs/{name...} with {"ttl"}: the ref renewed; with
// "lazy", only when less than half of ttl is left.
func (s *Server) touchRef(w http.ResponseWriter, r *http.Request) {
	var req wire.RefTouch
	err := refusePreconditions(r, "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since")
	if err == nil {
		err = s.readJSON(w, r, &req)
	}
	var now time.Time
	if err == nil {
		now, err = s.clock(req.Now)
	}
	if err == nil && req.TTL == 0 {
		err = &badRequest{`ttl: required, a duration of at least 1µs such as "168h" (null or left out is none)`}
	}
	var got ref.Ref
	if err == nil {
		refs := s.refStore(now.Truncate(time.Microsecond))
		if req.Lazy {
			got, err = refs.GetTouch(r.Context(), r.PathValue("name"), time.Duration(req.TTL))
		} else {
			got, err = refs.Touch(r.Context(), r.PathValue("name"), time.Duration(req.TTL))
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeRef(w, http.StatusOK, got)
}

// deleteRef: DELETE /v1/refs/{name...}, with If-Match: "VERSION" only if
// the live ref has it: 204; 404 absent; 412 another version.
func (s *Server) deleteRef(w http.ResponseWriter, r *http.Request) {
	var version int64
	err := refusePreconditions(r, "If-None-Match", "If-Modified-Since", "If-Unmodified-Since")
	if v := r.Header.Get("If-Match"); v != "" && err == nil {
		version, err = wire.ParseETag(v)
	}
	var now time.Time
	if err == nil {
		now, err = s.queryNow(r)
	}
	if err == nil {
		err = s.refStore(now.Truncate(time.Microsecond)).Delete(r.Context(), r.PathValue("name"), version)
	}
	if err != nil {
		s.failRef(w, r, err)
		return
	}
	s.metrics.refDelete()
	w.WriteHeader(http.StatusNoContent)
}

// listRefs: GET /v1/refs?prefix=&after=&limit=, one page of live refs in
// name order: {"refs": [...], "next": NAME} when the page is full.
func (s *Server) listRefs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := pageLimit(r, ref.DefaultPageSize)
	var now time.Time
	if err == nil {
		now, err = s.queryNow(r)
	}
	var page []ref.Ref
	if err == nil {
		page, err = s.refStore(now.Truncate(time.Microsecond)).List(r.Context(), q.Get("prefix"), q.Get("after"), limit)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.RefPage{Refs: make([]wire.Ref, len(page))}
	for i, x := range page {
		out.Refs[i] = wireRef(x)
	}
	if len(page) == limit {
		out.Next = page[len(page)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
}

// pageLimit is a list request's limit: def when it names none, else 1 to
// maxListLimit (more, fewer or not a number is invalid).
func pageLimit(r *http.Request, def int) (int, error) {
	text := r.URL.Query().Get("limit")
	if text == "" {
		return def, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, invalidArgument("limit %q: want 1 to %d", text, maxListLimit)
	}
	return n, nil
}

// refusePreconditions refuses a request carrying one of the conditional
// headers its route does not evaluate, rather than ignore the condition
// (RFC 9110 has a server evaluate what it receives): 400, nothing done.
func refusePreconditions(r *http.Request, headers ...string) error {
	for _, h := range headers {
		if r.Header.Get(h) != "" {
			return &badRequest{fmt.Sprintf("%s %s does not take %s", r.Method, r.URL.Path, h)}
		}
	}
	return nil
}
