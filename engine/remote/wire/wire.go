// Package wire is the HTTP API's vocabulary, shared by the server and the
// remote engine so the two cannot disagree: the JSON bodies, the error
// codes and the sentinel error each code stands for. The API itself is
// described in docs/openapi.yaml.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// Error is the body of every error response. Ref names the ref whose
// condition a refused PutSet failed (its 412), which the server's message
// names only in words the client drops (Err): the client names it again.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Ref   string `json:"ref,omitempty"`
}

// MaxListLimit bounds one page of a list answer.
const MaxListLimit = 10000

// RefDepth is the most segments of a ref's name docs/openapi.yaml lists
// with literal slashes (/v1/refs/{s1}/.../{name}); past it a name's
// slashes are sent as %2F. The server reads either at any depth.
const RefDepth = 8

// CodeHeader carries an error answer's code as a header too, so that the
// answer to HEAD, which has no body, says what went wrong.
const CodeHeader = "Stead-Error-Code"

// The codes of error answers. Each stands for one status (Status) and,
// but for the few marked, one error a client returns wrapping it (Err).
const (
	CodeNotFound        = "not_found"
	CodeInvalidKey      = "invalid_key"
	CodeInvalidName     = "invalid_name"
	CodeInvalidArgument = "invalid_argument"
	CodeDigestMismatch  = "digest_mismatch"
	CodeCorrupt         = "corrupt"
	CodeTooLarge        = "too_large"
	CodeConflict        = "conflict"
	CodeChildrenFixed   = "children_fixed"
	CodeProtected       = "protected"
	CodeUnknownGroup    = "unknown_group"
	CodeWrongGroup      = "wrong_group"
	CodeLeased          = "leased"
	CodeLost            = "lost"
	CodeClosed          = "closed"
	CodeSchema          = "schema"
	CodeUnavailable     = "unavailable"
	CodeUnsupported     = "unsupported"

	// A request the server could not parse; a client reads it as
	// ErrInvalidArgument.
	CodeBadRequest = "bad_request"
	// A request body over its limit; ErrTooLarge.
	CodeBodyTooLarge = "body_too_large"
	// A save without If-Match or If-None-Match; ErrInvalidArgument.
	CodePreconditionRequired = "precondition_required"
	// A Range the value cannot satisfy; ErrInvalidArgument.
	CodeRangeNotSatisfiable = "range_not_satisfiable"
	// Every upload slot (of the server, or of this client) is taken:
	// retry later; ErrUnavailable.
	CodeBusy = "busy"
	// A request body arrived too slowly; ErrUnavailable.
	CodeTimeout = "timeout"
	// A lock held by another owner (a refusal, not an error, for the
	// lock endpoints); ErrLeased.
	CodeHeld = "held"

	// Codes that stand for no stead error: a client returns a StatusError.
	CodeNotFoundRoute    = "route_not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeTooManyAttempts  = "too_many_attempts"
	CodeInternal         = "internal"
)

// A code is one error answer: its status and the error a client returns
// wrapping it (nil: a StatusError).
type code struct {
	code   string
	status int
	err    error
}

// codes is the one mapping between errors and answers. StatusOf reads the
// rows with a sentinel, most specific first: the first match wins; the
// rows after them are answers only the server makes, and the errors a
// client reads them as.
var codes = []code{
	{CodeNotFound, http.StatusNotFound, steaderr.ErrNotFound},
	{CodeInvalidKey, http.StatusBadRequest, steaderr.ErrInvalidKey},
	{CodeInvalidName, http.StatusBadRequest, steaderr.ErrInvalidName},
	{CodeInvalidArgument, http.StatusBadRequest, steaderr.ErrInvalidArgument},
	{CodeCorrupt, http.StatusInternalServerError, steaderr.ErrCorrupt},
	{CodeDigestMismatch, http.StatusBadRequest, steaderr.ErrDigestMismatch},
	{CodeTooLarge, http.StatusRequestEntityTooLarge, steaderr.ErrTooLarge},
	{CodeChildrenFixed, http.StatusConflict, steaderr.ErrChildrenFixed},
	{CodeConflict, http.StatusConflict, steaderr.ErrConflict},
	{CodeProtected, http.StatusConflict, steaderr.ErrProtected},
	{CodeUnknownGroup, http.StatusConflict, steaderr.ErrUnknownGroup},
	{CodeWrongGroup, http.StatusConflict, steaderr.ErrWrongGroup},
	{CodeLeased, http.StatusConflict, steaderr.ErrLeased},
	{CodeLost, http.StatusConflict, steaderr.ErrLost},
	{CodeClosed, http.StatusServiceUnavailable, steaderr.ErrClosed},
	{CodeSchema, http.StatusServiceUnavailable, steaderr.ErrSchema},
	{CodeUnavailable, http.StatusServiceUnavailable, steaderr.ErrUnavailable},
	{CodeUnsupported, http.StatusNotImplemented, errors.ErrUnsupported},
	// Server-made answers.
	{CodeBadRequest, http.StatusBadRequest, steaderr.ErrInvalidArgument},
	{CodeBodyTooLarge, http.StatusRequestEntityTooLarge, steaderr.ErrTooLarge},
	{CodePreconditionRequired, http.StatusPreconditionRequired, steaderr.ErrInvalidArgument},
	{CodeRangeNotSatisfiable, http.StatusRequestedRangeNotSatisfiable, steaderr.ErrInvalidArgument},
	{CodeBusy, http.StatusServiceUnavailable, steaderr.ErrUnavailable},
	{CodeTimeout, http.StatusRequestTimeout, steaderr.ErrUnavailable},
	{CodeHeld, http.StatusConflict, steaderr.ErrLeased},
	{CodeNotFoundRoute, http.StatusNotFound, nil},
	{CodeMethodNotAllowed, http.StatusMethodNotAllowed, nil},
	{CodeUnauthorized, http.StatusUnauthorized, nil},
	{CodeForbidden, http.StatusForbidden, nil},
	{CodeTooManyAttempts, http.StatusTooManyRequests, nil},
	{CodeInternal, http.StatusInternalServerError, nil},
}

// sentinelRows is how many rows of codes StatusOf reads.
const sentinelRows = 18

// StatusOf returns the status and code for err and the sentinel it
// wraps, or a nil sentinel when it wraps none.
func StatusOf(err error) (status int, code string, sentinel error) {
	for _, c := range codes[:sentinelRows] {
		if errors.Is(err, c.err) {
			return c.status, c.code, c.err
		}
	}
	return 0, "", nil
}

// Status returns the status of an answer with code, 500 for a code that
// is none of the API's.
func Status(code string) int {
	for _, c := range codes {
		if c.code == code {
			return c.status
		}
	}
	return http.StatusInternalServerError
}

// IsSentinel reports whether err is one of the errors StatusOf maps
// itself (not one wrapping it).
func IsSentinel(err error) bool {
	for _, c := range codes[:sentinelRows] {
		if err == c.err {
			return true
		}
	}
	return false
}

// Err returns the error a client reports for an error response: one
// wrapping the error its code stands for, and the status when that is
// none. A 412 is a lost compare-and-swap (ErrConflict) whatever its code;
// a 502, 503 or 504 without a known code (a proxy's) is ErrUnavailable.
func Err(status int, e Error) error {
	for _, c := range codes {
		if c.code == e.Code && c.err != nil {
			return &serverError{msg: e.Error, sentinel: c.err}
		}
	}
	switch status {
	case http.StatusPreconditionFailed:
		return &serverError{msg: e.Error, sentinel: steaderr.ErrConflict}
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if Status(e.Code) == http.StatusInternalServerError {
			return &serverError{msg: e.Error, sentinel: steaderr.ErrUnavailable}
		}
	}
	return &StatusError{Status: status, Code: e.Code, Message: e.Error}
}

// serverError is a server's error answer standing for a sentinel: its
// text is the server's message, which names the sentinel already.
type serverError struct {
	msg      string
	sentinel error
}

// Error is the server's message from the stead error it names on: the
// words before are the context the server's own layers added (`record
// load "x"`), which the client's layers add again.
func (e *serverError) Error() string {
	msg := e.msg
	if i := firstSentinel(msg); i > 0 {
		msg = msg[i:]
	}
	switch {
	case msg == "":
		return "server: " + e.sentinel.Error()
	case strings.Contains(msg, e.sentinel.Error()):
		return "server: " + msg
	}
	return "server: " + msg + ": " + e.sentinel.Error()
}

// firstSentinel returns where the text of the first stead error msg names
// begins, or -1.
func firstSentinel(msg string) int {
	first := -1
	for _, c := range codes[:sentinelRows] {
		if i := strings.Index(msg, c.err.Error()); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	return first
}

func (e *serverError) Unwrap() error { return e.sentinel }

// StatusError is an error response whose code stands for no stead error.
type StatusError struct {
	Status  int
	Code    string
	Message string
}

// Error names the status, the code and the server's message, or, when it
// sent none, the status's text.
func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("server: %d %s: %s", e.Status, e.Code, msg)
}

// Duration is a time.Duration written as Go writes one: "30s", "1.5ms".
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration; null leaves d as it is, the member left
// out (as a pointer to a Duration reads null as nil), so a body's
// "ttl": null means what no "ttl" means, in every request.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// BlobInfo describes a stored blob.
type BlobInfo struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// BlobPage is the answer of GET /v1/blobs: the blobs of one page in key
// order, and Next, the key to list after, when the page is full.
type BlobPage struct {
	Blobs []BlobInfo `json:"blobs"`
	Next  string     `json:"next,omitempty"`
}

// SchemaInfo is the answer of /v1/schema.
type SchemaInfo struct {
	Current int `json:"current"`
	Latest  int `json:"latest"`
}

// Info is the answer of /v1/info. Tiered says the server's store keeps
// large values in a bytes tier, so that a remote store streams its large
// puts to it whole rather than chunk by chunk.
type Info struct {
	Cluster bool   `json:"cluster"`
	Reason  string `json:"reason"`
	Tiered  bool   `json:"tiered,omitempty"`
}

// BytesTier answers POST /v1/bytes-tier/check: the bucket of the server's
// store, probed, or "" when it has no bytes tier.
type BytesTier struct {
	Bucket string `json:"bucket"`
}

// LockRequest is the body of the lock endpoints. Now, when set, is the
// instant leases are judged at; a server accepts it only when started
// with client clocks allowed (tests).
type LockRequest struct {
	Owner string    `json:"owner"`
	Token int64     `json:"token,omitempty"`
	TTL   Duration  `json:"ttl,omitempty"`
	Wait  Duration  `json:"wait,omitempty"`
	Now   time.Time `json:"now,omitzero"`
}

// LockGrant is a lock endpoint's answer: the grant (or, when not granted,
// the live holder's grant as far as the server could read it) and the
// instant the request was judged at.
type LockGrant struct {
	Granted bool `json:"granted,omitempty"`
	// New, on an acquire, says the grant was made by this request rather
	// than already held by its owner and returned unchanged.
	New      bool      `json:"new,omitempty"`
	Released bool      `json:"released,omitempty"`
	Name     string    `json:"name"`
	Owner    string    `json:"owner,omitempty"`
	Token    int64     `json:"token"`
	Expiry   time.Time `json:"expiry,omitzero"`
	Now      time.Time `json:"now,omitzero"`
	// Error and Code are set when the answer is a refusal.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Lease is a record's lease.
type Lease struct {
	Owner       string    `json:"owner,omitempty"`
	Incarnation int64     `json:"incarnation"`
	Expiry      time.Time `json:"expiry,omitzero"`
}

// Record is a record as the API writes it. Payload is base64 in JSON.
type Record struct {
	ID        string    `json:"id"`
	Group     string    `json:"group"`
	Tenant    string    `json:"tenant,omitempty"`
	Status    string    `json:"status"`
	Payload   []byte    `json:"payload"`
	Version   int64     `json:"version"`
	Lease     Lease     `json:"lease"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// Now, on a save, is as in LockRequest.
	Now time.Time `json:"now,omitzero"`
}

// FromRecord returns rec's wire form.
func FromRecord(rec record.Record) Record {
	return Record{
		ID: rec.ID, Group: rec.Group, Tenant: rec.Tenant, Status: string(rec.Status),
		Payload: rec.Payload, Version: rec.Version,
		Lease:     Lease{Owner: rec.Lease.Owner, Incarnation: rec.Lease.Incarnation, Expiry: rec.Lease.Expiry},
		UpdatedAt: rec.UpdatedAt,
	}
}

// ToRecord returns the record r stands for.
func (r Record) ToRecord() record.Record {
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	return record.Record{
		ID: r.ID, Group: r.Group, Tenant: r.Tenant, Status: record.Status(r.Status),
		Payload: payload, Version: r.Version,
		Lease:     record.Lease{Owner: r.Lease.Owner, Incarnation: r.Lease.Incarnation, Expiry: r.Lease.Expiry},
		UpdatedAt: r.UpdatedAt,
	}
}

// FromRecords returns recs' wire form, never nil.
func FromRecords(recs []record.Record) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = FromRecord(r)
	}
	return out
}

// Records is a list of records.
type Records struct {
	Records []Record `json:"records"`
}

// RecordPage is a page of records in id order: Next, when set, is the
// after of the next page.
type RecordPage struct {
	Records []Record `json:"records"`
	Next    string   `json:"next,omitempty"`
}

// HeldLock is a live lock grant.
type HeldLock struct {
	Name   string    `json:"name"`
	Owner  string    `json:"owner"`
	Token  int64     `json:"token"`
	Expiry time.Time `json:"expiry"`
}

// HeldLocks is a page of live lock grants in name order: Next, when set,
// is the after of the next page.
type HeldLocks struct {
	Locks []HeldLock `json:"locks"`
	Next  string     `json:"next,omitempty"`
}

// ClaimRequest is the body of claim, claim-next and renew.
type ClaimRequest struct {
	Group       string    `json:"group,omitempty"`
	Owner       string    `json:"owner"`
	TTL         Duration  `json:"ttl"`
	N           int       `json:"n,omitempty"`
	Incarnation int64     `json:"incarnation,omitempty"`
	Now         time.Time `json:"now,omitzero"`
}

// Probe is the answer of a group's probe: whether it has a claimable
// record, and if not, how long until the earliest held lease expires.
type Probe struct {
	Claimable bool     `json:"claimable"`
	Until     Duration `json:"until"`
}

// ETag returns the entity tag of a record version: the version, quoted.
func ETag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ParseETag returns the version an If-Match value names. It accepts one
// strong entity tag holding a version, surrounding spaces allowed; weak
// tags, lists and "*" are refused, since a compare-and-swap needs one
// exact version.
func ParseETag(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return 0, fmt.Errorf("%w: If-Match %q: want one strong entity tag such as \"3\"", steaderr.ErrInvalidArgument, v)
	}
	n, err := strconv.ParseInt(v[1:len(v)-1], 10, 64)
	if err != nil || n < 1 || v[1] == '+' || v[1] == '0' {
		return 0, fmt.Errorf("%w: If-Match %q: want a record version, a positive integer", steaderr.ErrInvalidArgument, v)
	}
	return n, nil
}

// MaxChunk bounds a chunk's bytes in the answer of a chunk read, and so
// the memory one chunk read holds on either side.
const MaxChunk = 16 << 20

// The headers of a chunk read's answer: the offset of the chunk's first
// byte in its value; and, for a chunk kept as a bucket object (the answer
// then has no body), its size and the object's name, whose bytes are
// ranges of GET /v1/blobs/{key}.
const (
	ChunkStartHeader  = "Stead-Chunk-Start"
	ChunkSizeHeader   = "Stead-Chunk-Size"
	ChunkObjectHeader = "Stead-Chunk-Object"
)

// UploadOwnerParam is the query parameter naming an upload's owner on
// every upload endpoint (absent: the owner ""); an upload is continued
// only by its owner, and another's is as unknown.
const UploadOwnerParam = "upload_owner"

// Upload is an upload's state as the server has it: the answer of POST
// /v1/uploads (begin), GET /v1/uploads/{id} (status, with State) and PUT
// /v1/uploads/{id}/{off} (append). ID is 16 hex digits; Size the bytes
// its committed chunks hold; State the running hash of those bytes
// (docs/decisions/0045-durable-uploads.md), which a remote store's
// Upload continues from. The server never takes a client's state.
type Upload struct {
	ID    string `json:"id"`
	Size  int64  `json:"size"`
	State []byte `json:"state,omitempty"`
}

// Publish is the body of POST /v1/uploads/{id}/publish: the key the
// client claims the upload's bytes hash to and the size it claims they
// have.
type Publish struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	// Children are the blobs the value references (sorted, distinct).
	Children []string `json:"children,omitempty"`
}

// Reaped is the answer of POST /v1/uploads/reap.
type Reaped struct {
	Reaped int `json:"reaped"`
}

// Stored is a blob's stored form, the answer of GET
// /v1/blobs/{key}/stored: its size and one of its inline value, its chunk
// set, or the name of the bucket object the server keeps it in, whose
// bytes are ranges of GET /v1/blobs/{key}
// (docs/decisions/0036-objects-over-http.md).
type Stored struct {
	Size   int64  `json:"size"`
	Value  []byte `json:"value,omitempty"`
	Chunks int64  `json:"chunks,omitempty"`
	Object string `json:"object,omitempty"`
}

// MaxObjectName bounds the object name a stored form carries.
const MaxObjectName = 1024

// MaxStored bounds the answer of GET /v1/blobs/{key}/stored: an inline
// value of up to MaxChunk bytes, base64-encoded, and its fields.
const MaxStored = MaxChunk/3*4 + 4<<10
