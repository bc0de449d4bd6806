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

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/steaderr"
)

// fail answers err, the one way every handler answers an error: an error
// reading the request body, a refusal the server made itself (refusal,
// badRequest), or an error of the store, through the one mapping of
// errors to codes (wire.StatusOf). Sentinel errors keep stead's own
// message, which names the thing and the rule; anything else is logged
// and answered without its text, which may hold the database's host, user
// or driver detail.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		body *bodyError
		ref  *refusal
		bad  *badRequest
		pre  *preconditionFailed
	)
	switch {
	case errors.As(err, &body):
		var maxErr *http.MaxBytesError
		switch {
		case errors.As(err, &maxErr):
			writeError(w, wire.CodeBodyTooLarge, "request body too large")
		case isTimeout(err):
			writeError(w, wire.CodeTimeout, "request body arrived too slowly")
		default:
			writeError(w, wire.CodeBadRequest, "request body ended early or could not be read")
		}
	case errors.As(err, &ref):
		writeError(w, ref.code, ref.msg)
	case errors.As(err, &bad):
		writeError(w, wire.CodeBadRequest, bad.msg)
	case errors.Is(context.Cause(r.Context()), errDatabaseTimeout):
		s.log.Warn("stead: database did not answer in time", "route", r.Pattern, "err", err)
		writeError(w, wire.CodeUnavailable, "database did not answer in time")
	case r.Context().Err() != nil:
		// The client is gone; whatever we write is lost.
		writeError(w, wire.CodeUnavailable, "request cancelled")
	case errors.As(err, &pre):
		writeErrorBody(w, http.StatusPreconditionFailed, wire.Error{Error: publicMessage(err), Code: wire.CodeConflict, Ref: pre.ref})
	default:
		_, code, sentinel := wire.StatusOf(err)
		switch {
		case sentinel == steaderr.ErrUnavailable || sentinel == nil && unavailable(err):
			// The database's words name its host and user: logged only.
			s.log.Warn("stead: database unavailable", "route", r.Pattern, "err", err)
			writeError(w, wire.CodeUnavailable, "database unavailable")
			return
		case sentinel != nil:
			writeError(w, code, publicMessage(err))
			return
		}
		s.log.Error("stead: internal error", "route", r.Pattern, "err", err)
		writeError(w, wire.CodeInternal, "internal error")
	}
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

// writeError answers an error with code, at the code's status
// (wire.Status); a 503 tells the client when to retry.
func writeError(w http.ResponseWriter, code, msg string) {
	writeErrorStatus(w, wire.Status(code), code, msg)
}

// writeErrorStatus is writeError at a status other than the code's: a
// lost compare-and-swap on a record is 412 conflict, as If-Match asks.
func writeErrorStatus(w http.ResponseWriter, status int, code, msg string) {
	writeErrorBody(w, status, wire.Error{Error: msg, Code: code})
}

// writeErrorBody answers the error body e at status.
func writeErrorBody(w http.ResponseWriter, status int, e wire.Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(wire.CodeHeader, e.Code) // for HEAD, whose answers have no body
	h.Del("ETag")
	h.Del("Content-Length")
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	w.Write(errorBody(e))
}

// errorBody is e as an error response's body.
func errorBody(e wire.Error) []byte {
	b, _ := json.Marshal(e)
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

// badRequest is a request the server could not parse: 400 bad_request.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// refusal is an answer the server makes itself, for no error of the
// store: code is one of wire's, msg says what was wrong.
type refusal struct{ code, msg string }

func (e *refusal) Error() string { return e.msg }

// refuse returns a refusal with code and the formatted message.
func refuse(code, format string, args ...any) error {
	return &refusal{code: code, msg: fmt.Sprintf(format, args...)}
}

// preconditionFailed is a store's ErrConflict on a request conditioned
// by If-Match or If-None-Match, or a PutSet's ref refused: 412, naming
// the ref refused when ref is not "" (wire.Error).
type preconditionFailed struct {
	err error
	ref string
}

func (e *preconditionFailed) Error() string { return e.err.Error() }
func (e *preconditionFailed) Unwrap() error { return e.err }

// invalidArgument returns an error wrapping steaderr.ErrInvalidArgument
// with the formatted message: a request argument out of its range.
func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%w: %s", steaderr.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
