package server

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/steaderr"
)

// maxPinTTL bounds the TTL a request may give a pin, so that no client
// keeps a blob from garbage collection for longer than a day without
// renewing (docs/guides/gc.md).
const maxPinTTL = 24 * time.Hour

// pinArgs checks a pin's owner and TTL, truncated to whole microseconds as
// the engine seam expects, and the request's now.
func (s *Server) pinArgs(owner string, ttl time.Duration, now time.Time) (time.Duration, time.Time, error) {
	if err := validate.Name("pin owner", owner); err != nil {
		return 0, time.Time{}, err
	}
	ttl = ttl.Truncate(time.Microsecond)
	if ttl <= 0 || ttl > maxPinTTL {
		return 0, time.Time{}, fmt.Errorf("%w: pin ttl %v: want 1µs to %v", steaderr.ErrInvalidArgument, ttl, maxPinTTL)
	}
	now, err := s.clock(now)
	return ttl, now.Truncate(time.Microsecond), err
}

// queryPin reads and checks the pin a remote engine's put asks for:
// ?owner=…&ttl=…[&now=…].
func (s *Server) queryPin(r *http.Request) (owner string, ttl time.Duration, now time.Time, err error) {
	q := r.URL.Query()
	owner = q.Get("owner")
	ttl, err = time.ParseDuration(q.Get("ttl"))
	if err != nil {
		return "", 0, time.Time{}, &badRequest{fmt.Sprintf("ttl %q: want a Go duration such as 60s", q.Get("ttl"))}
	}
	if now, err = s.queryNow(r); err != nil {
		return "", 0, time.Time{}, err
	}
	ttl, now, err = s.pinArgs(owner, ttl, now)
	return owner, ttl, now, err
}

// putPinned stores the body under the key in the path and pins it for the
// owner and ttl the query names: PUT /v1/blobs/{key}?owner=…&ttl=…, the
// remote engine's put, which keeps its own pin table and so must get the
// very pin it asked for. The body must hash to the key.
func (s *Server) putPinned(w http.ResponseWriter, r *http.Request, key blob.Key) {
	owner, ttl, now, err := s.queryPin(r)
	if err == nil && key.IsZero() {
		err = &badRequest{"a pinned put names its key in the URL"}
	}
	var children []blob.Key
	if err == nil {
		children, err = parseKeyList(splitList(r.Header.Values(wire.ChildrenHeader)))
	}
	if err == nil {
		children, err = blob.CheckChildren(key, children)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := min(s.opts.MaxBlobSize, blob.InlineLimit)
	body, done, ok := s.openBody(w, r, limit, wire.CodeTooLarge, "blob")
	if !ok {
		return
	}
	defer done()
	value, err := readLimited(body, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if got := blob.KeyOf(value); got != key {
		s.fail(w, r, fmt.Errorf("blob put %s: %w: content hashes to %s", key, steaderr.ErrDigestMismatch, got))
		return
	}
	created, err := s.blobEng.Put(r.Context(), blob.PutParams{Key: key, Value: value, Owner: owner, TTL: ttl, Now: now, Children: children})
	if err != nil {
		s.fail(w, r, fmt.Errorf("blob put %s: %w", key, err))
		return
	}
	s.writePut(w, key, int64(len(value)), created)
}

// readLimited reads body to its end, refusing more than limit bytes with
// an error wrapping ErrTooLarge.
func readLimited(body *bodyReader, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(limit+1, 64<<10))
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):min(int64(cap(buf)), limit+1)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("blob put: %w: more than %d bytes", steaderr.ErrTooLarge, limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readPin reads a pin request for the key in the path; owner, when not
// empty, is the owner the path names.
func (s *Server) readPin(w http.ResponseWriter, r *http.Request, owner string) (blob.PinParams, bool) {
	var req wire.PinRequest
	key, err := blob.ParseKey(r.PathValue("key"))
	if err == nil {
		err = s.readJSON(w, r, &req)
	}
	if err == nil && owner != "" {
		if req.Owner != "" && req.Owner != owner {
			err = &badRequest{"the body's owner differs from the path's"}
		}
		req.Owner = owner
	}
	var p blob.PinParams
	if err == nil {
		p.Key, p.Owner = key, req.Owner
		p.TTL, p.Now, err = s.pinArgs(req.Owner, time.Duration(req.TTL), req.Now)
	}
	if err != nil {
		s.fail(w, r, err)
		return p, false
	}
	return p, true
}

// pinBlob pins a stored blob for an owner: POST /v1/blobs/{key}/pins, 200
// with the pin, 404 when the blob is absent (or deleted first).
func (s *Server) pinBlob(w http.ResponseWriter, r *http.Request) {
	p, ok := s.readPin(w, r, "")
	if !ok {
		return
	}
	if err := s.eng.Blobs().Pin(r.Context(), p); err != nil {
		s.fail(w, r, fmt.Errorf("blob pin %s: %w", p.Key, err))
		return
	}
	writeJSON(w, http.StatusOK, wire.PinAnswer{Key: p.Key.String(), Owner: p.Owner})
}

// renewPin extends a live pin: PUT /v1/blobs/{key}/pins/{owner}, 200 with
// renewed false when the pin had expired or was absent (it is not
// resurrected).
func (s *Server) renewPin(w http.ResponseWriter, r *http.Request) {
	p, ok := s.readPin(w, r, r.PathValue("owner"))
	if !ok {
		return
	}
	renewed, err := s.eng.Blobs().RenewPin(r.Context(), p)
	if err != nil {
		s.fail(w, r, fmt.Errorf("blob pin %s: %w", p.Key, err))
		return
	}
	writeJSON(w, http.StatusOK, wire.PinAnswer{Key: p.Key.String(), Owner: p.Owner, Renewed: renewed})
}

// unpinBlob removes a pin, if any: DELETE /v1/blobs/{key}/pins/{owner},
// 204.
func (s *Server) unpinBlob(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	owner := r.PathValue("owner")
	if err == nil {
		err = validate.Name("pin owner", owner)
	}
	if err == nil {
		err = s.eng.Blobs().Unpin(r.Context(), blob.UnpinParams{Key: key, Owner: owner})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
