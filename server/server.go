// Package server is stead's HTTP API over a Store.
//
//	GET  /healthz                 200 when the process is up
//	PUT  /v1/blobs                body → {"key": "sha256:…", "size": n}; POST is the same
//	GET  /v1/blobs/{key}          the value, with Range, ETag and If-None-Match
//	HEAD /v1/blobs/{key}          the headers alone
//
// Errors are JSON: {"error": "message", "code": "not_found"}.
package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
)

// Options configures the handler.
type Options struct {
	// Token, when set, is the bearer token every /v1 request must carry.
	// Defaults to none: no authentication.
	Token string
}

// New returns the HTTP handler for st.
func New(st *stead.Store, opts Options) http.Handler {
	s := &server{st: st}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.Handle("PUT /v1/blobs", s.auth(opts.Token, s.putBlob))
	mux.Handle("POST /v1/blobs", s.auth(opts.Token, s.putBlob))
	mux.Handle("GET /v1/blobs/{key}", s.auth(opts.Token, s.getBlob)) // GET also serves HEAD
	return mux
}

type server struct {
	st *stead.Store
}

func (s *server) auth(token string, h http.HandlerFunc) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stead"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
			return
		}
		h(w, r)
	})
}

func (s *server) putBlob(w http.ResponseWriter, r *http.Request) {
	body := &countingReader{r: r.Body}
	key, err := s.st.Blobs.Put(r.Context(), body)
	if err != nil {
		writeStoreError(w, err)
		return
	}
	w.Header().Set("Location", "/v1/blobs/"+key.String())
	writeJSON(w, http.StatusCreated, map[string]any{"key": key.String(), "size": body.n})
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (s *server) getBlob(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	if err != nil {
		writeStoreError(w, err)
		return
	}
	rd, err := s.st.Blobs.Get(r.Context(), key)
	if err != nil {
		writeStoreError(w, err)
		return
	}
	defer rd.Close()
	// Content never changes under a key: the key is the strong ETag.
	w.Header().Set("ETag", `"`+key.String()+`"`)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, rd)
}

// writeStoreError maps stead's sentinel errors to HTTP statuses.
func writeStoreError(w http.ResponseWriter, err error) {
	status, code := http.StatusInternalServerError, "internal"
	for _, m := range []struct {
		err    error
		status int
		code   string
	}{
		{stead.ErrNotFound, http.StatusNotFound, "not_found"},
		{stead.ErrInvalidKey, http.StatusBadRequest, "invalid_key"},
		{stead.ErrInvalidName, http.StatusBadRequest, "invalid_name"},
		{stead.ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
		{stead.ErrDigestMismatch, http.StatusBadRequest, "digest_mismatch"},
		{stead.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
		{errors.ErrUnsupported, http.StatusRequestEntityTooLarge, "unsupported"},
		{stead.ErrConflict, http.StatusConflict, "conflict"},
		{stead.ErrProtected, http.StatusConflict, "protected"},
		{stead.ErrClosed, http.StatusServiceUnavailable, "closed"},
		{stead.ErrSchema, http.StatusServiceUnavailable, "schema"},
		{stead.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
	} {
		if errors.Is(err, m.err) {
			status, code = m.status, m.code
			break
		}
	}
	writeError(w, status, code, err.Error())
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "code": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// IsLoopback reports whether addr (host:port) binds only the loopback
// interface: its host is "localhost" or a loopback IP address. A host name
// other than localhost is not loopback, whatever it resolves to.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
