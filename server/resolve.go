package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/ref"
)

// resolveRef answers GET /v1/refs/{name...}?stored=true[&touch=TTL]: the
// live ref with the stored form of its blob (wire.Resolved), read in one
// engine call (ref.Store.Resolve), renewed as a touch is. stored takes
// only "true".
func (s *Server) resolveRef(w http.ResponseWriter, r *http.Request, refs *ref.Store, ttl time.Duration) {
	if text := r.URL.Query().Get("stored"); text != "true" {
		s.fail(w, r, &badRequest{fmt.Sprintf("stored %.40q: want true", text)})
		return
	}
	got, st, err := refs.Resolve(r.Context(), r.PathValue("name"), ttl)
	var out wire.Stored
	if err == nil {
		out, err = storedForm(st)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("ETag", wire.ETag(got.Version))
	writeJSON(w, http.StatusOK, wire.Resolved{Ref: wireRef(got), Stored: out})
}
