package server

import (
	"net/http"

	"github.com/steadkit/stead/engine/remote/wire"
)

// usage answers GET /v1/usage?prefix=P: what the live refs under P hold
// (stead.Store.Usage, bounded at stead.MaxUsageRefs refs).
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	u, err := s.st.Usage(r.Context(), r.URL.Query().Get("prefix"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Usage{Prefix: u.Prefix, Refs: u.Refs, Blobs: u.Blobs, Bytes: u.Bytes,
		ReferencedBytes: u.ReferencedBytes, DedupSavedBytes: u.DedupSavedBytes, Truncated: u.Truncated, LastPush: u.LastPush, LastPull: u.LastPull})
}
