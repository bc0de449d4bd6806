package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/steaderr"
)

// The upload endpoints are blob.Upload over HTTP, so that a remote engine
// (engine/remote) streams values of any size: begin an upload, append to
// it at its size, publish it under the key its bytes hash to, or abort
// it; read a stored value's chunks. An upload's size and running hash are
// the store's (docs/decisions/0045-durable-uploads.md): each request
// resumes the upload by id, so any server over the same database
// continues it, and the server hashes the bytes as they arrive, taking no
// client's hash on trust. An upload is continued only by the owner it was
// begun for (the upload_owner parameter); an id that is malformed, never
// begun, ended or another owner's is answered alike, as unknown.

// beginUpload starts an upload owned by upload_owner, with the lease the
// lease query parameter names (a Go duration) that each append renews,
// from now (the now parameter, when the server allows client clocks), and
// answers its id, drawn at random.
func (s *Server) beginUpload(w http.ResponseWriter, r *http.Request) {
	lease, err := leaseOf(r)
	var blobs *blob.Store
	if err == nil {
		blobs, err = s.blobsAt(r)
	}
	var u *blob.Upload
	if err == nil {
		u, err = blobs.BeginUpload(r.Context(), blob.UploadOptions{Owner: uploadOwner(r), Lease: lease})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wire.Upload{ID: u.ID(), Size: u.Size()})
}

// uploadStatus answers the upload's size and running hash state.
func (s *Server) uploadStatus(w http.ResponseWriter, r *http.Request) {
	u, err := s.resume(r, s.blobs, 0)
	var state []byte
	if err == nil {
		state, err = u.HashState()
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Upload{ID: u.ID(), Size: u.Size(), State: state})
}

// appendUpload streams the body, at least a byte, into the upload after
// its bytes: {off} must be the upload's size (else 409 conflict naming
// it, whatever the offset), and the upload may not grow past MaxBlobSize. On a store with a
// bytes tier the bytes past the inline limit are one object, committed
// whole or not at all; without one they are committed a chunk at a time
// (docs/decisions/0045-durable-uploads.md); object=true asks for the
// whole body as one object (the remote engine's WriteValue). It answers
// the upload's new size.
func (s *Server) appendUpload(w http.ResponseWriter, r *http.Request) {
	off, err := strconv.ParseInt(r.PathValue("off"), 10, 64)
	if err != nil {
		s.fail(w, r, &badRequest{fmt.Sprintf("offset %.40q: want a byte offset", r.PathValue("off"))})
		return
	}
	if off < 0 {
		s.fail(w, r, fmt.Errorf("%w: negative offset %d", steaderr.ErrInvalidArgument, off))
		return
	}
	lease, err := leaseOf(r)
	var blobs *blob.Store
	if err == nil {
		blobs, err = s.blobsAt(r)
	}
	var u *blob.Upload
	if err == nil {
		u, err = s.resume(r, blobs, lease)
	}
	if err == nil && u.Size() != off {
		err = fmt.Errorf("%w: upload %s holds %d bytes: append at offset %d, not %d", steaderr.ErrConflict, u.ID(), u.Size(), u.Size(), off)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	room := max(s.opts.MaxBlobSize-off, 0)
	body, done, ok := s.openBody(w, r, room, wire.CodeTooLarge, "append")
	if !ok {
		return
	}
	defer done()
	src := &capped{r: body, left: room}
	var first [1]byte
	n, err := io.ReadFull(src, first[:])
	switch {
	case n == 0 && err == io.EOF:
		s.fail(w, r, &badRequest{"empty append: send at least one byte"})
		return
	case n == 0:
		s.fail(w, r, err)
		return
	}
	add := u.Append
	if r.URL.Query().Get("object") == "true" {
		add = u.AppendObject
	}
	if _, err := add(r.Context(), io.MultiReader(bytes.NewReader(first[:]), src)); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Upload{ID: u.ID(), Size: u.Size()})
}

// capped reads r, refusing more than left bytes with an error wrapping
// ErrTooLarge.
type capped struct {
	r    io.Reader
	left int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, fmt.Errorf("%w: an upload past the largest value", steaderr.ErrTooLarge)
	}
	if int64(len(p))-1 > c.left {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, fmt.Errorf("%w: an upload past the largest value", steaderr.ErrTooLarge)
	}
	return n, err
}

// publishUpload commits the upload under the key the body claims, pinned
// for the owner and ttl the query names (as putPinned), once its size is
// the size claimed (else 409 conflict: another append came first; an
// upload of no bytes is 400 invalid_argument) and its
// bytes, hashed as they arrived, hash to the key (else 400
// digest_mismatch, the upload kept). The chunks are published as they
// are, as the remote engine's Put with Chunks does: its Store chose to.
func (s *Server) publishUpload(w http.ResponseWriter, r *http.Request) {
	var req wire.Publish
	if err := s.readJSONLimit(w, r, &req, maxPublishBody); err != nil {
		s.fail(w, r, err)
		return
	}
	key, err := blob.ParseKey(req.Key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	owner, ttl, now, err := s.queryPin(r)
	var children []blob.Key
	if err == nil {
		children, err = parseKeyList(req.Children)
	}
	switch {
	case err != nil:
	case req.Size < 0:
		err = fmt.Errorf("%w: size %d: want the upload's size", steaderr.ErrInvalidArgument, req.Size)
	}
	var u *blob.Upload
	if err == nil {
		u, err = s.resume(r, s.blobs, 0)
	}
	switch {
	case err != nil:
	case u.Size() != req.Size:
		err = fmt.Errorf("%w: upload %s holds %d bytes, not %d", steaderr.ErrConflict, u.ID(), u.Size(), req.Size)
	case req.Size == 0:
		err = fmt.Errorf("%w: upload %s holds no byte to publish", steaderr.ErrInvalidArgument, u.ID())
	}
	if err == nil {
		_, err = u.Commit(r.Context(), blob.CommitOptions{Expect: key, Children: children, Owner: owner, TTL: ttl, Now: now, Chunked: true})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writePut(w, key, req.Size, u.Created())
}

// abortUpload discards the upload and its bytes; an upload unknown
// (ended, or another owner's) is not an error.
func (s *Server) abortUpload(w http.ResponseWriter, r *http.Request) {
	u, err := s.resume(r, s.blobs, 0)
	if err == nil {
		err = u.Abort(r.Context())
	}
	if err != nil && !errors.Is(err, steaderr.ErrLost) {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resume continues the upload {id} of the owner upload_owner names
// through blobs, appending with lease (zero: the store's).
func (s *Server) resume(r *http.Request, blobs *blob.Store, lease time.Duration) (*blob.Upload, error) {
	return blobs.ResumeUpload(r.Context(), r.PathValue("id"), blob.UploadOptions{Owner: uploadOwner(r), Lease: lease})
}

// uploadOwner is the owner the request names for its upload.
func uploadOwner(r *http.Request) string { return r.URL.Query().Get(wire.UploadOwnerParam) }

// reapUploads discards the uploads whose lease lapsed at now (the now
// parameter, when the server allows client clocks).
func (s *Server) reapUploads(w http.ResponseWriter, r *http.Request) {
	blobs, err := s.blobsAt(r)
	var n int
	if err == nil {
		n, err = blobs.ReapUploads(r.Context())
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Reaped{Reaped: n})
}

// readChunk answers the chunk of {chunks} holding byte {off}, its first
// byte's offset in the wire.ChunkStartHeader header: its bytes, or, for a
// chunk kept as a bucket object, no body and the chunk's size and object
// in wire.ChunkSizeHeader and wire.ChunkObjectHeader (the remote engine
// reads its bytes as a range of the value).
func (s *Server) readChunk(w http.ResponseWriter, r *http.Request) {
	set, err := chunkSetOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	off, err := strconv.ParseInt(r.PathValue("off"), 10, 64)
	if err != nil || off < 0 {
		s.fail(w, r, &badRequest{fmt.Sprintf("offset %.40q: want a byte offset", r.PathValue("off"))})
		return
	}
	c, err := s.blobEng.ReadChunk(r.Context(), set, off)
	switch {
	case err != nil:
	case c.Object != "" && (len(c.Object) > wire.MaxObjectName || !headerSafe(c.Object)):
		err = fmt.Errorf("chunk %d@%d: an object name the wire cannot carry (%d bytes)", set, off, len(c.Object))
	case c.Object == "" && len(c.Data) > wire.MaxChunk:
		err = fmt.Errorf("chunk %d@%d: a chunk over the wire's limit (%d bytes)", set, off, len(c.Data))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set(wire.ChunkStartHeader, strconv.FormatInt(c.Start, 10))
	h.Set("Content-Type", "application/octet-stream")
	if c.Object != "" {
		h.Set(wire.ChunkSizeHeader, strconv.FormatInt(c.Size, 10))
		h.Set(wire.ChunkObjectHeader, c.Object)
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(c.Data)))
	w.WriteHeader(http.StatusOK)
	w.Write(c.Data)
}

// headerSafe reports whether s is printable ASCII, as a header value
// carries it unchanged.
func headerSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// storedBlob answers a blob's stored form (wire.Stored), which a remote
// engine's Get returns.
func (s *Server) storedBlob(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st, err := s.blobEng.Get(r.Context(), key)
	var out wire.Stored
	if err == nil {
		out, err = storedForm(st)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// storedForm is a stored form as the wire carries it; an inline value
// over the wire's chunk limit cannot be.
func storedForm(st blob.Stored) (wire.Stored, error) {
	if len(st.Value) > wire.MaxChunk {
		return wire.Stored{}, errors.New("an inline value over the wire's chunk limit")
	}
	return wire.Stored{Size: st.Size, Value: st.Value, Chunks: int64(st.Chunks), Object: st.Object}, nil
}

// leaseOf parses the lease query parameter, a Go duration from 1µs up to
// blob.MaxUploadLease, cut to whole microseconds.
func leaseOf(r *http.Request) (time.Duration, error) {
	lease, err := time.ParseDuration(r.URL.Query().Get("lease"))
	if err != nil || lease < time.Microsecond || lease > blob.MaxUploadLease {
		return 0, &badRequest{fmt.Sprintf("lease %.40q: want a duration from 1µs up to %s", r.URL.Query().Get("lease"), blob.MaxUploadLease)}
	}
	return lease.Truncate(time.Microsecond), nil
}

// chunkSetOf parses the {chunks} path value, a positive chunk set id.
func chunkSetOf(r *http.Request) (blob.ChunkSet, error) {
	n, err := strconv.ParseInt(r.PathValue("chunks"), 10, 64)
	if err != nil || n <= 0 {
		return 0, &badRequest{fmt.Sprintf("chunk set %.40q: want a positive integer", r.PathValue("chunks"))}
	}
	return blob.ChunkSet(n), nil
}
