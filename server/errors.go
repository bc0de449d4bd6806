package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/steadkit/stead/internal/wire"
)

// writeStoreError answers err, an error of the store or of reading the
// request. Sentinel errors keep stead's own message, which names the
// thing and the rule; anything else is logged and answered without its
// text, which may hold the database's host, user or driver detail.
func (s *Server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	var body *bodyError
	if errors.As(err, &body) {
		var maxErr *http.MaxBytesError
		switch {
		case errors.As(err, &maxErr):
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge, "request body too large")
		case isTimeout(err):
			writeError(w, http.StatusRequestTimeout, wire.CodeTimeout, "request body arrived too slowly")
		default:
			writeError(w, http.StatusBadRequest, wire.CodeBadRequest, "request body ended early or could not be read")
		}
		return
	}
	switch {
	case errors.Is(context.Cause(r.Context()), errDatabaseTimeout):
		s.log.Warn("stead: database did not answer in time", "route", r.Pattern, "err", err)
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "database did not answer in time")
		return
	case r.Context().Err() != nil:
		// The client is gone; whatever we write is lost.
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "request cancelled")
		return
	case errors.Is(err, errors.ErrUnsupported):
		writeError(w, http.StatusRequestEntityTooLarge, "unsupported", "blobs over the inline limit are not supported by this engine yet")
		return
	}
	if status, code, sentinel := wire.StatusOf(err); sentinel != nil {
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeError(w, status, code, publicMessage(err))
		return
	}
	if unavailable(err) {
		s.log.Warn("stead: database unavailable", "route", r.Pattern, "err", err)
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "database unavailable")
		return
	}
	s.log.Error("stead: internal error", "route", r.Pattern, "err", err)
	writeError(w, http.StatusInternalServerError, wire.CodeInternal, "internal error")
}

// publicMessage is what a response may say of err: its text cut where
// the text of a typed error begins (a driver's, the network's, the file
// system's), which may name the database's host, user, objects or files.
// stead's own words, which name the thing and the rule broken, come
// first; they are sentinels and plain errors.New texts, also kept.
func publicMessage(err error) string {
	msg := err.Error()
	for _, leaf := range leaves(err) {
		if wire.IsSentinel(leaf) || fmt.Sprintf("%T", leaf) == "*errors.errorString" && !errors.Is(leaf, sql.ErrNoRows) && !errors.Is(leaf, sql.ErrConnDone) {
			continue
		}
		if text := leaf.Error(); text != "" {
			if i := strings.Index(msg, text); i >= 0 {
				msg = strings.TrimRight(msg[:i], " :(")
			}
		}
	}
	if msg == "" {
		return "internal error"
	}
	return msg
}

// leaves returns the errors at the ends of err's chain.
func leaves(err error) []error {
	switch e := err.(type) {
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return leaves(inner)
		}
	case interface{ Unwrap() []error }:
		var out []error
		for _, inner := range e.Unwrap() {
			out = append(out, leaves(inner)...)
		}
		return out
	}
	return []error{err}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(wire.CodeHeader, code) // for HEAD, whose answers have no body
	h.Del("ETag")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(errorBody(msg, code))
}

func errorBody(msg, code string) []byte {
	b, _ := json.Marshal(wire.Error{Error: msg, Code: code})
	return append(b, '\n')
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// bodyError is an error reading the request body (not the database):
// too large, too slow, or cut short.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// badRequest is a request the server could not parse.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// fail answers err, a badRequest or a store error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var bad *badRequest
	if errors.As(err, &bad) {
		writeError(w, http.StatusBadRequest, wire.CodeBadRequest, bad.msg)
		return
	}
	s.writeStoreError(w, r, err)
}
