package server

import (
	"context"
	"net/http"
	"time"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/remote/wire"
)

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the database answers and its schema is the one
// this binary knows, 503 otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeoutCause(r.Context(), min(2*time.Second, s.dbTimeout()), errDatabaseTimeout)
	defer cancel()
	current, latest, err := s.eng.SchemaVersion(ctx)
	if err != nil {
		s.fail(w, r.WithContext(ctx), err)
		return
	}
	if current != latest {
		writeError(w, wire.CodeSchema, schemaMessage(current, latest))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "schema": current})
}

func schemaMessage(current, latest int) string {
	if current > latest {
		return "database schema is newer than this binary: upgrade stead"
	}
	return "database schema is behind this binary: run stead migrate"
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	shared, reason := s.eng.Cluster()
	writeJSON(w, http.StatusOK, wire.Info{Cluster: shared, Reason: reason, Tiered: s.blobEng.Tiered()})
}

func (s *Server) schema(w http.ResponseWriter, r *http.Request) {
	current, latest, err := s.eng.SchemaVersion(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.SchemaInfo{Current: current, Latest: latest})
}

func (s *Server) migrate(w http.ResponseWriter, r *http.Request) {
	if err := s.eng.Migrate(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	s.schema(w, r)
}

// checkBytesTier probes the store's bucket as stead doctor does: POST
// /v1/bytes-tier/check, {"bucket": ""} when the store has no tier.
func (s *Server) checkBytesTier(w http.ResponseWriter, r *http.Request) {
	var out wire.BytesTier
	if t, ok := s.eng.(engine.BytesTierChecker); ok {
		bucket, err := t.CheckBytesTier(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Bucket = bucket
	}
	writeJSON(w, http.StatusOK, out)
}
