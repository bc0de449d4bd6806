package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/steadkit/stead/engine/remote/wire"
)

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	if s.opts.Token == "" {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stead"`)
			writeError(w, wire.CodeUnauthorized, "missing or wrong bearer token")
			return
		}
		h(w, r)
	}
}

// authorized checks an Authorization header: the scheme "Bearer" in any
// case, then the token. Comparing digests takes the same time whatever
// the tokens' lengths and contents.
func (s *Server) authorized(header string) bool {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}
