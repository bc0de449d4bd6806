package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// maxPutSetBody bounds a PutSet's JSON: an inline value in base64 and the
// most refs, each with the longest name (escaped) and annotation.
const maxPutSetBody = maxJSONBody + blob.InlineLimit*4/3 + ref.MaxPutRefs*(6*ref.MaxNameLen+ref.MaxAnnotation*4/3+256)

// putSet: POST /v1/blobs/{key}/refs?owner=…&ttl=… with wire.PutSet: the
// value stored under key, pinned for owner, and the refs set to it in one
// commit (a remote engine's ref.Backend.PutSet). 201 when it stored the
// blob, 200 when the blob was stored already; a ref's failed condition is
// 412, and nothing is stored then.
func (s *Server) putSet(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	var owner string
	var ttl time.Duration
	var now time.Time
	if err == nil {
		owner, ttl, now, err = s.queryPin(r)
	}
	var req wire.PutSet
	if err == nil {
		err = s.readJSONLimit(w, r, &req, maxPutSetBody)
	}
	if err == nil && int64(len(req.Value)) > min(s.opts.MaxBlobSize, blob.InlineLimit) {
		err = fmt.Errorf("blob put: %w: more than %d bytes", steaderr.ErrTooLarge, min(s.opts.MaxBlobSize, blob.InlineLimit))
	}
	if err == nil && blob.KeyOf(req.Value) != key {
		err = fmt.Errorf("blob put %s: %w: content hashes to %s", key, steaderr.ErrDigestMismatch, blob.KeyOf(req.Value))
	}
	refs := make([]ref.PutRef, len(req.Refs))
	var refNow time.Time
	for i, x := range req.Refs {
		if err != nil {
			break
		}
		var at time.Time
		if at, err = s.clock(x.Now); err != nil {
			break
		}
		if i > 0 && !at.Equal(refNow) {
			err = &badRequest{"every ref of a put runs its TTL from one now"}
			break
		}
		refNow = at
		refs[i] = ref.PutRef{Name: x.Name, SetOptions: ref.SetOptions{Annotation: x.Annotation, Weak: x.Weak, IfAbsent: x.IfAbsent, IfVersion: x.IfVersion}}
		if x.TTL != nil {
			refs[i].TTL = time.Duration(*x.TTL)
			err = ref.CheckTTL(refs[i].TTL)
		}
	}
	if err != nil {
		s.failRef(w, r, err)
		return
	}
	created, got, err := s.refStore(refNow.Truncate(time.Microsecond)).PutSet(r.Context(), blob.PutParams{Key: key, Value: req.Value, Owner: owner, TTL: ttl, Now: now}, refs)
	if refused := (*ref.RefusedError)(nil); errors.As(err, &refused) {
		s.fail(w, r, &preconditionFailed{err: err, ref: refused.Name})
		return
	}
	if err != nil {
		s.failRef(w, r, err)
		return
	}
	s.metrics.blobPut(!created, len(req.Value))
	out := wire.PutSetResult{Created: created, Refs: make([]wire.Ref, len(got)), RefsCreated: make([]bool, len(got))}
	for i, x := range got {
		s.metrics.refSet()
		out.Refs[i], out.RefsCreated[i] = wireRef(x), x.Created
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
}
