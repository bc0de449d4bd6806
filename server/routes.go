package server

import (
	"net/http"
	"strings"
)

// route is one registered pattern.
type route struct {
	pattern string
	public  bool // no credentials needed (else auth)
	handler http.HandlerFunc
}

// Routes returns every pattern the server registers, in registration
// order, for the test that checks docs/openapi.yaml against them.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.table() {
		out = append(out, r.pattern)
	}
	return out
}

func (s *Server) table() []route {
	return []route{
		{"GET /healthz", true, s.healthz},
		{"GET /readyz", true, s.readyz},
		{"GET /metrics", false, s.serveMetrics},
		{"GET /v1/info", false, s.info},
		{"GET /v1/schema", false, s.schema},
		{"POST /v1/schema/migrate", false, s.migrate},
		{"POST /v1/bytes-tier/check", false, s.checkBytesTier},

		{"PUT /v1/blobs", false, s.putBlob},
		{"POST /v1/blobs", false, s.putBlob},
		{"GET /v1/blobs", false, s.listBlobs},
		{"PUT /v1/blobs/{key}", false, s.putBlob},
		{"GET /v1/blobs/{key}", false, s.getBlob}, // GET also serves HEAD
		{"DELETE /v1/blobs/{key}", false, s.deleteBlob},
		{"POST /v1/blobs/delete", false, s.deleteBlobs},
		{"POST /v1/blobs/{key}/refs", false, s.putSet},

		{"GET /v1/refs", false, s.listRefs},
		{"GET /v1/usage", false, s.usage},
		{"GET /v1/refs/{name...}", false, s.getRef},
		{"PUT /v1/refs/{name...}", false, s.setRef},
		{"PATCH /v1/refs/{name...}", false, s.touchRef},
		{"DELETE /v1/refs/{name...}", false, s.deleteRef},
		{"POST /v1/blobs/{key}/pins", false, s.pinBlob},
		{"PUT /v1/blobs/{key}/pins/{owner}", false, s.renewPin},
		{"DELETE /v1/blobs/{key}/pins/{owner}", false, s.unpinBlob},

		{"POST /v1/gc/sweep", false, s.sweep},
		{"GET /v1/gc/explain/{key}", false, s.explain},
		{"GET /v1/gc/sources", false, s.listSources},
		{"PUT /v1/gc/sources", false, s.registerSource},
		{"DELETE /v1/gc/sources", false, s.unregisterSource},
		{"GET /v1/pins", false, s.listPins},
		{"POST /v1/gc/reap", false, s.reapPins},
		{"PUT /v1/gc/window", false, s.stageKeys},
		{"GET /v1/gc/pass", false, s.stagePass},
		{"GET /v1/gc/declared", false, s.declared},
		{"GET /v1/gc/stored", false, s.stored},
		{"POST /v1/gc/stage", false, s.stageRange},
		{"POST /v1/gc/take", false, s.takeCandidates},
		{"POST /v1/gc/arbitrate", false, s.arbitrate},
		{"POST /v1/gc/orphans", false, s.sweepOrphans},
		{"POST /v1/gc/lease", false, s.acquireLease},
		{"PUT /v1/gc/lease/{id}", false, s.renewLease},
		{"DELETE /v1/gc/lease/{id}", false, s.releaseLease},
		{"GET /v1/blobs/{key}/stored", false, s.storedBlob},

		{"POST /v1/uploads", false, s.beginUpload},
		{"POST /v1/uploads/reap", false, s.reapUploads},
		{"GET /v1/uploads/{id}", false, s.uploadStatus},
		{"PUT /v1/uploads/{id}/{off}", false, s.appendUpload},
		{"POST /v1/uploads/{id}/publish", false, s.publishUpload},
		{"DELETE /v1/uploads/{id}", false, s.abortUpload},
		{"GET /v1/chunks/{chunks}/{off}", false, s.readChunk},

		{"GET /v1/locks", false, s.listLocks},
		{"POST /v1/locks/{name}/acquire", false, s.acquireLock},
		{"POST /v1/locks/{name}/renew", false, s.renewLock},
		{"POST /v1/locks/{name}/release", false, s.releaseLock},

		{"PUT /v1/groups/{group}", false, s.registerGroup},
		{"GET /v1/groups/{group}", false, s.getGroup},
		{"GET /v1/groups/{group}/claimable", false, s.listClaimable},
		{"GET /v1/groups/{group}/leased", false, s.listLeased},
		{"POST /v1/groups/{group}/claim-next", false, s.claimNext},
		{"GET /v1/groups/{group}/probe", false, s.probe},
		{"GET /v1/groups/{group}/wait", false, s.waitClaimable},
		{"GET /v1/records/{id}", false, s.loadRecord},
		{"PUT /v1/records/{id}", false, s.saveRecord},
		{"DELETE /v1/records/{id}", false, s.deleteRecord},
		{"POST /v1/records/{id}/claim", false, s.claimRecord},
		{"POST /v1/records/{id}/renew", false, s.renewRecord},
	}
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	var patterns []string
	for _, r := range s.table() {
		h := r.handler
		if !r.public {
			h = s.auth(r.pattern, h)
		}
		s.mux.Handle(r.pattern, h)
		patterns = append(patterns, r.pattern)
	}
	for _, m := range s.opts.Mounts {
		s.mux.Handle(m.Prefix, s.mount(m))
		patterns = append(patterns, m.Prefix)
	}
	patterns = append(patterns, s.consoleRoutes(s.mux)...)
	s.direct = directMounts(s.opts.Mounts, patterns)
}

// directMounts are the mounts whose every request the mux would route to
// them, so that ServeHTTP may send a request whose escaped path begins
// with the prefix straight there: a plain path prefix ending in a slash
// under which no other pattern (of patterns, the mounts' included) could
// match. The others, and requests whose path reaches a mount only once
// unescaped, go through the mux.
func directMounts(mounts []Mount, patterns []string) []Mount {
	var out []Mount
	for _, m := range mounts {
		p := m.Prefix
		if !strings.HasPrefix(p, "/") || !strings.HasSuffix(p, "/") || strings.ContainsAny(p, " {}%") {
			continue
		}
		shadowed := false
		for _, q := range patterns {
			if q == p {
				continue // the mount itself
			}
			if _, path, ok := strings.Cut(q, " "); ok {
				q = path
			}
			if !strings.HasPrefix(q, "/") {
				shadowed = true // a host's pattern
				break
			}
			lit, _, wild := strings.Cut(q, "{")
			// A pattern under p is more specific than p; one with a
			// wildcard before p ends may match paths under p.
			if strings.HasPrefix(lit, p) || wild && strings.HasPrefix(p, lit) {
				shadowed = true
				break
			}
		}
		if !shadowed {
			out = append(out, m)
		}
	}
	return out
}

// directMount is the mount of directMounts whose prefix begins the
// escaped path p, if any.
func (s *Server) directMount(p string) (Mount, bool) {
	for _, m := range s.direct {
		if strings.HasPrefix(p, m.Prefix) {
			return m, true
		}
	}
	return Mount{}, false
}
