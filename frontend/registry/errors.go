package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	specs "github.com/opencontainers/distribution-spec/specs-go/v1"

	"github.com/steadkit/stead/steaderr"
)

// The error codes of the distribution spec, and the statuses they are
// answered with.
const (
	codeBlobUnknown         = "BLOB_UNKNOWN"
	codeBlobUploadInvalid   = "BLOB_UPLOAD_INVALID"
	codeBlobUploadUnknown   = "BLOB_UPLOAD_UNKNOWN"
	codeDigestInvalid       = "DIGEST_INVALID"
	codeManifestBlobUnknown = "MANIFEST_BLOB_UNKNOWN"
	codeManifestInvalid     = "MANIFEST_INVALID"
	codeManifestUnknown     = "MANIFEST_UNKNOWN"
	codeNameInvalid         = "NAME_INVALID"
	codeNameUnknown         = "NAME_UNKNOWN"
	codeSizeInvalid         = "SIZE_INVALID"
	codeUnauthorized        = "UNAUTHORIZED"
	codeDenied              = "DENIED"
	codeUnsupported         = "UNSUPPORTED"
	codeTooManyRequests     = "TOOMANYREQUESTS"
	// Not the spec's: the store could not be reached (503, retry), or
	// failed in a way the client cannot act on (500).
	codeUnavailable = "UNAVAILABLE"
	codeUnknown     = "UNKNOWN"
	// Not the spec's either: a blob's Range that asks for no byte of it
	// (416), as the API's blobs answer it.
	codeRangeNotSatisfiable = "RANGE_NOT_SATISFIABLE"
	// rangeInvalid is BLOB_UPLOAD_INVALID answered with 416: a chunk that
	// does not start where the upload ends.
	codeRangeInvalid = "RANGE_INVALID"
)

var statusOf = map[string]int{
	codeBlobUnknown:         http.StatusNotFound,
	codeBlobUploadInvalid:   http.StatusBadRequest,
	codeBlobUploadUnknown:   http.StatusNotFound,
	codeDigestInvalid:       http.StatusBadRequest,
	codeManifestBlobUnknown: http.StatusBadRequest,
	codeManifestInvalid:     http.StatusBadRequest,
	codeManifestUnknown:     http.StatusNotFound,
	codeNameInvalid:         http.StatusBadRequest,
	codeNameUnknown:         http.StatusNotFound,
	codeSizeInvalid:         http.StatusBadRequest,
	codeUnauthorized:        http.StatusUnauthorized,
	codeDenied:              http.StatusForbidden,
	codeUnsupported:         http.StatusMethodNotAllowed,
	codeTooManyRequests:     http.StatusTooManyRequests,
	codeUnavailable:         http.StatusServiceUnavailable,
	codeUnknown:             http.StatusInternalServerError,
	codeRangeInvalid:        http.StatusRequestedRangeNotSatisfiable,
	codeRangeNotSatisfiable: http.StatusRequestedRangeNotSatisfiable,
}

// regError is an answer in the spec's error form.
type regError struct {
	code   string
	msg    string
	status int // when not 0, instead of the code's
}

func (e *regError) Error() string { return e.code + ": " + e.msg }

// withStatus answers e with status instead of its code's.
func (e *regError) withStatus(status int) *regError { e.status = status; return e }

func errorf(code, format string, args ...any) *regError {
	return &regError{code: code, msg: fmt.Sprintf(format, args...)}
}

// writeError answers e as {"errors":[{"code","message","detail"}]}.
func writeError(w http.ResponseWriter, e *regError) {
	status := e.status
	if status == 0 {
		status = statusOf[e.code]
	}
	code := e.code
	if code == codeRangeInvalid {
		code = codeBlobUploadInvalid
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	h.Del("Docker-Content-Digest")
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	b, _ := json.Marshal(specs.ErrorResponse{Errors: []specs.ErrorInfo{{Code: code, Message: e.msg}}})
	w.Write(append(b, '\n'))
}

// storeError maps an error of the store to its answer; notFound is the
// code for a missing thing (BLOB_UNKNOWN, MANIFEST_UNKNOWN, …). Errors
// the client cannot act on are logged, and answered without their text.
func (g *Registry) storeError(r *http.Request, err error, notFound string) *regError {
	var re *regError
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, steaderr.ErrNotFound):
		return errorf(notFound, "not found")
	case errors.Is(err, steaderr.ErrCorrupt):
		g.log.Error("registry: stored bytes lost or changed", "method", r.Method, "path", r.URL.Path, "err", err)
		return errorf(codeUnknown, "the stored content is lost or damaged")
	case errors.Is(err, steaderr.ErrDigestMismatch):
		return errorf(codeDigestInvalid, "content does not match its digest")
	case errors.Is(err, steaderr.ErrTooLarge):
		return &regError{code: codeSizeInvalid, msg: "content is larger than this registry accepts", status: http.StatusRequestEntityTooLarge}
	case errors.Is(err, steaderr.ErrLost):
		return errorf(codeBlobUploadUnknown, "upload expired")
	case errors.Is(err, steaderr.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, steaderr.ErrClosed):
		g.log.Warn("registry: store unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		return errorf(codeUnavailable, "the store is unavailable; retry")
	}
	g.log.Error("registry: internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	return errorf(codeUnknown, "internal error")
}
