package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/steaderr"
)

// The chunk endpoints expose the engine's chunked-put seam, so that a
// remote engine (engine/remote) streams values of any size: begin an
// upload, write its chunks, publish them under their key or abort; read a
// published value's chunks. The server takes no client's hash on trust:
// it hashes an upload's chunks as they arrive, in order, so that a
// publish checks the key at once; an upload it cannot vouch for (chunks
// out of order, a write that failed, one written through another server)
// is re-read and hashed at publish.

// beginUpload starts an upload with the lease the lease query parameter
// names (a Go duration), from now (the now parameter, when the server
// allows client clocks), and answers its chunk set id, a random one.
func (s *Server) beginUpload(w http.ResponseWriter, r *http.Request) {
	lease, err := leaseOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now, err := s.queryNow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	set, err := s.blobEng.BeginUpload(r.Context(), blob.BeginUploadParams{Lease: lease, Now: now.Truncate(time.Microsecond)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, wire.Upload{Chunks: int64(set)})
}

// writeChunk stores the body, at most wire.MaxChunk bytes, as the chunk at
// byte {off} of the upload {chunks}, with the lease the lease query
// parameter names (a Go duration). A chunk ending past MaxBlobSize is
// refused.
func (s *Server) writeChunk(w http.ResponseWriter, r *http.Request) {
	set, err := chunkSetOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	off, err := strconv.ParseInt(r.PathValue("off"), 10, 64)
	if err != nil {
		s.fail(w, r, &badRequest{fmt.Sprintf("offset %q: want a byte offset", r.PathValue("off"))})
		return
	}
	if off < 0 || off >= s.opts.MaxBlobSize {
		s.fail(w, r, fmt.Errorf("%w: offset %d: want 0 to %d", steaderr.ErrInvalidArgument, off, s.opts.MaxBlobSize-1))
		return
	}
	lease, err := leaseOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now, err := s.queryNow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body, done, ok := s.openBody(w, r, wire.MaxChunk, wire.CodeBodyTooLarge, "chunk")
	if !ok {
		return
	}
	defer done()
	data, err := io.ReadAll(io.LimitReader(body, wire.MaxChunk+1))
	switch {
	case err != nil:
		s.fail(w, r, err)
		return
	case len(data) > wire.MaxChunk:
		writeError(w, wire.CodeBodyTooLarge, fmt.Sprintf("chunk over the limit of %d bytes", wire.MaxChunk))
		return
	case len(data) == 0:
		s.fail(w, r, &badRequest{"empty chunk"})
		return
	case off > s.opts.MaxBlobSize-int64(len(data)):
		s.fail(w, r, fmt.Errorf("%w: a chunk of %d bytes at offset %d ends past the largest value, %d bytes", steaderr.ErrInvalidArgument, len(data), off, s.opts.MaxBlobSize))
		return
	}
	u := s.hashes.at(set, off)
	if u != nil {
		u.mu.Lock()
		defer u.mu.Unlock()
	}
	err = s.blobEng.WriteChunk(r.Context(), blob.WriteChunkParams{Set: set, Off: off, Data: data, Lease: lease, Now: now.Truncate(time.Microsecond)})
	u.wrote(off, data, lease, err)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// publishUpload publishes the upload's chunks under a key, pinned for the
// owner and ttl the query names (as putPinned), once the server has re-read them and they hash to it.
func (s *Server) publishUpload(w http.ResponseWriter, r *http.Request) {
	set, err := chunkSetOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
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
	if err == nil {
		p := blob.PutParams{Key: key, Chunks: set, Size: req.Size, Owner: owner, TTL: ttl, Now: now, Children: children}
		if digest := s.hashes.take(set, req.Size); !digest.IsZero() {
			err = s.blobs.PublishHashed(r.Context(), p, digest)
		} else {
			if req.Size > 0 && req.Size <= s.opts.MaxBlobSize {
				// Re-reading takes as long as the value is large.
				s.wait(w, time.Duration(req.Size/minRereadRate)*time.Second)
			}
			err = s.blobs.Publish(r.Context(), p)
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.BlobInfo{Key: key.String(), Size: req.Size})
}

func (s *Server) abortUpload(w http.ResponseWriter, r *http.Request) {
	set, err := chunkSetOf(r)
	if err == nil {
		s.hashes.drop(set)
		err = s.blobEng.AbortUpload(r.Context(), set)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// reapUploads discards the uploads whose lease lapsed at now (the now
// parameter, when the server allows client clocks).
func (s *Server) reapUploads(w http.ResponseWriter, r *http.Request) {
	now, err := s.queryNow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := s.blobStore(now).ReapUploads(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Reaped{Reaped: n})
}

// readChunk answers the chunk of {chunks} holding byte {off}: its bytes,
// and its first byte's offset in the wire.ChunkStartHeader header.
func (s *Server) readChunk(w http.ResponseWriter, r *http.Request) {
	set, err := chunkSetOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	off, err := strconv.ParseInt(r.PathValue("off"), 10, 64)
	if err != nil || off < 0 {
		s.fail(w, r, &badRequest{fmt.Sprintf("offset %q: want a byte offset", r.PathValue("off"))})
		return
	}
	start, data, err := s.blobEng.ReadChunk(r.Context(), set, off)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set(wire.ChunkStartHeader, strconv.FormatInt(start, 10))
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	w.Write(data)
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
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(st.Value) > wire.MaxChunk {
		s.fail(w, r, errors.New("an inline value over the wire's chunk limit"))
		return
	}
	writeJSON(w, http.StatusOK, wire.Stored{Size: st.Size, Value: st.Value, Chunks: int64(st.Chunks), Object: st.Object})
}

// leaseOf parses the lease query parameter, a Go duration up to
// blob.MaxUploadLease.
func leaseOf(r *http.Request) (time.Duration, error) {
	lease, err := time.ParseDuration(r.URL.Query().Get("lease"))
	if err != nil || lease < time.Microsecond || lease > blob.MaxUploadLease {
		return 0, &badRequest{fmt.Sprintf("lease %q: want a duration from 1µs up to %s", r.URL.Query().Get("lease"), blob.MaxUploadLease)}
	}
	return lease, nil
}

// chunkSetOf parses the {chunks} path value, a positive chunk set id.
func chunkSetOf(r *http.Request) (blob.ChunkSet, error) {
	n, err := strconv.ParseInt(r.PathValue("chunks"), 10, 64)
	if err != nil || n <= 0 {
		return 0, &badRequest{fmt.Sprintf("chunk set %q: want a positive integer", r.PathValue("chunks"))}
	}
	return blob.ChunkSet(n), nil
}

// minRereadRate is the slowest a publish may re-read an upload, in bytes
// per second: the publish's deadlines grow with the value by it.
const minRereadRate = 4 << 20

// maxHashedUploads bounds the uploads the server hashes as they arrive
// (about 200 bytes each); past it, a new upload is re-read at publish.
const maxHashedUploads = 4096

// uploadHashes holds the running hash of each upload whose chunks have
// arrived in order.
type uploadHashes struct {
	mu sync.Mutex
	m  map[blob.ChunkSet]*uploadHash
}

// uploadHash is one upload's running hash: the chunks at [0, next) were
// written through this server in order, each once, and hashed.
type uploadHash struct {
	mu      sync.Mutex // held across a chunk's write and hashing
	h       hash.Hash
	next    int64
	broken  bool      // a chunk out of order, or a write that failed
	expires time.Time // the upload's lease, as of its last chunk
}

// at returns the running hash a chunk at off of set goes into: a new one
// for the first chunk, nil when the set has none (the server is not
// hashing it).
func (t *uploadHashes) at(set blob.ChunkSet, off int64) *uploadHash {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.m[set]; u != nil {
		return u
	}
	if off != 0 {
		return nil
	}
	if len(t.m) >= maxHashedUploads {
		now := time.Now()
		for s, u := range t.m {
			if u.mu.TryLock() {
				if now.After(u.expires) {
					delete(t.m, s)
				}
				u.mu.Unlock()
			}
		}
		if len(t.m) >= maxHashedUploads {
			return nil
		}
	}
	if t.m == nil {
		t.m = map[blob.ChunkSet]*uploadHash{}
	}
	u := &uploadHash{h: sha256.New(), expires: time.Now().Add(blob.MaxUploadLease)}
	t.m[set] = u
	return u
}

// wrote hashes a chunk written at off under lease, or breaks the hash when the write
// failed (it may have landed or not) or came out of order. u's mu is
// held; a nil u does nothing.
func (u *uploadHash) wrote(off int64, data []byte, lease time.Duration, err error) {
	switch {
	case u == nil:
	case err != nil || off != u.next:
		u.broken = true
	default:
		u.h.Write(data)
		u.next += int64(len(data))
		u.expires = time.Now().Add(lease)
	}
}

// take forgets set's running hash and returns its digest when it covers
// exactly size bytes written in order, else the zero key.
func (t *uploadHashes) take(set blob.ChunkSet, size int64) blob.Key {
	t.mu.Lock()
	u := t.m[set]
	delete(t.m, set)
	t.mu.Unlock()
	if u == nil {
		return blob.Key{}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.broken || u.next != size {
		return blob.Key{}
	}
	key, err := blob.ParseKey("sha256:" + hex.EncodeToString(u.h.Sum(nil)))
	if err != nil {
		return blob.Key{}
	}
	return key
}

// drop forgets set's running hash.
func (t *uploadHashes) drop(set blob.ChunkSet) {
	t.mu.Lock()
	delete(t.m, set)
	t.mu.Unlock()
}
