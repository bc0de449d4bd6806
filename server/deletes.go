package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/steaderr"
)

// maxDeleteKeys bounds the keys of one POST /v1/blobs/delete: one batch
// of Blobs.DeleteMany, so that one request is one transaction, deleted
// whole or not at all.
const maxDeleteKeys = 1000

// deleteBlobs deletes many blobs as DELETE /v1/blobs/{key} deletes one,
// in one transaction: POST /v1/blobs/delete with {"keys": [...]} (at most
// maxDeleteKeys), 200 with one verdict per key in the order given
// (deleted, protected or absent); an error deleted nothing.
func (s *Server) deleteBlobs(w http.ResponseWriter, r *http.Request) {
	var req wire.DeleteBlobs
	err := s.readJSONLimit(w, r, &req, maxKeysBody)
	if err == nil && len(req.Keys) > maxDeleteKeys {
		err = fmt.Errorf("%w: %d keys, at most %d a request", steaderr.ErrInvalidArgument, len(req.Keys), maxDeleteKeys)
	}
	keys := make([]blob.Key, len(req.Keys))
	for i := 0; err == nil && i < len(keys); i++ {
		keys[i], err = blob.ParseKey(req.Keys[i])
	}
	var now time.Time
	if err == nil {
		now, err = s.clock(req.Now)
	}
	var vs []blob.Verdict
	if err == nil {
		vs, err = s.blobStore(now).DeleteMany(r.Context(), keys)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, verdictsBody(vs))
}
