package server

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/httprange"
	"github.com/steadkit/stead/steaderr"
)

// putBlob stores the request body: PUT/POST /v1/blobs, or PUT
// /v1/blobs/{key} where the client claims the digest. A Content-Digest
// sha-256 is a claim too. A claim is checked before anything is stored.
func (s *Server) putBlob(w http.ResponseWriter, r *http.Request) {
	var want blob.Key
	if text := r.PathValue("key"); text != "" {
		key, err := blob.ParseKey(text)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		want = key
	}
	if r.URL.Query().Has("owner") {
		s.putPinned(w, r, want)
		return
	}
	if header := r.Header.Get("Content-Digest"); header != "" {
		key, err := parseContentDigest(header)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !key.IsZero() && !want.IsZero() && key != want {
			writeError(w, wire.CodeDigestMismatch, "Content-Digest names another digest than the URL")
			return
		}
		if !key.IsZero() {
			want = key
		}
	}
	body, done, ok := s.openBody(w, r, s.opts.MaxBlobSize, wire.CodeTooLarge, "blob")
	if !ok {
		return
	}
	defer done()
	blobs, err := s.blobsAt(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	children, err := parseKeyList(splitList(r.Header.Values(wire.ChildrenHeader)))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := blobs.PutWith(r.Context(), body, blob.PutOptions{Expect: want, Children: children})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.writePut(w, res.Key, body.n, res.Created)
}

// writePut answers a put of key (size bytes): 201 Created when the put
// stored it, 200 when it was stored already.
func (s *Server) writePut(w http.ResponseWriter, key blob.Key, size int64, created bool) {
	s.metrics.blobPut(!created, int(size))
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/v1/blobs/"+key.String())
	w.Header().Set("ETag", `"`+key.String()+`"`)
	writeJSON(w, status, wire.BlobInfo{Key: key.String(), Size: size})
}

// parseContentDigest returns the key a Content-Digest header (RFC 9530)
// claims with its sha-256 members, or the zero key when it has none.
// Algorithm names are lower case (structured-field keys); every sha-256
// member must be well formed and all must agree.
func parseContentDigest(header string) (blob.Key, error) {
	var key blob.Key
	for member := range strings.SplitSeq(header, ",") {
		alg, value, ok := strings.Cut(strings.TrimSpace(member), "=")
		if !ok || alg != strings.ToLower(alg) {
			return blob.Key{}, &badRequest{"Content-Digest: want sha-256=:BASE64:"}
		}
		if alg != "sha-256" {
			continue
		}
		if len(value) < 2 || value[0] != ':' || value[len(value)-1] != ':' {
			return blob.Key{}, &badRequest{"Content-Digest: sha-256 is a byte sequence, :BASE64:"}
		}
		digest, err := base64.StdEncoding.DecodeString(value[1 : len(value)-1])
		if err != nil || len(digest) != 32 {
			return blob.Key{}, &badRequest{"Content-Digest: sha-256 is not 32 bytes of base64"}
		}
		k, err := blob.ParseKey("sha256:" + hex.EncodeToString(digest))
		if err != nil {
			return blob.Key{}, err
		}
		if !key.IsZero() && k != key {
			return blob.Key{}, &badRequest{"Content-Digest: sha-256 members disagree"}
		}
		key = k
	}
	return key, nil
}

func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// HEAD asks for the headers only: the size, not the value.
	var rd httprange.Content
	if r.Method == http.MethodHead {
		info, err := s.blobs.Stat(r.Context(), key)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		rd = httprange.NewSizeOnly(info.Size)
	} else {
		brd, err := s.blobs.Get(r.Context(), key)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer brd.Close()
		rd = brd
	}
	// Content never changes under a key: the key is the strong ETag.
	h := w.Header()
	h.Set("ETag", `"`+key.String()+`"`)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("Content-Type", "application/octet-stream")
	if rw, ok := w.(*responseWriter); ok {
		rw.size = strconv.FormatInt(rd.Size(), 10)
	}
	s.stream(w)
	if r.Method == http.MethodHead {
		httprange.ServeContent(w, r, rd, emptySuffixRange)
	} else {
		s.serveValue(w, r, key, rd)
	}
	if rw, ok := w.(*responseWriter); ok {
		s.metrics.blobGet(rw.n)
	}
}

// serveValue answers a GET of key's value from rd. Its status and headers
// wait for the first byte of the value: a value whose first read fails (an
// object missing from the bucket) gets an error answer, not a 200 with no
// bytes. A read failing after the answer began leaves it short, which the
// client sees against its Content-Length, and is logged, unless the
// client went away.
func (s *Server) serveValue(w http.ResponseWriter, r *http.Request, key blob.Key, rd httprange.Content) {
	sent, err := httprange.ServeHeld(w, r, rd, emptySuffixRange)
	switch {
	case err == nil:
	case !sent:
		s.fail(w, r, err)
	case r.Context().Err() == nil:
		s.log.Error("stead: blob read failed mid-answer", "key", key.String(), "err", err)
	}
}

// emptySuffixRange answers a Range that asks for no bytes (bytes=-0).
func emptySuffixRange(w http.ResponseWriter) {
	writeError(w, wire.CodeRangeNotSatisfiable, "empty suffix range")
}

func (s *Server) deleteBlob(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	var blobs *blob.Store
	if err == nil {
		blobs, err = s.blobsAt(r)
	}
	if err == nil {
		err = blobs.Delete(r.Context(), key)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listBlobs: GET /v1/blobs?after=&limit=, one page of blobs in key order,
// one snapshot: {"blobs": [...], "next": KEY} when the page is full.
func (s *Server) listBlobs(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r, blob.DefaultPageSize)
	var after blob.Key
	if text := r.URL.Query().Get("after"); text != "" && err == nil {
		after, err = blob.ParseKey(text)
	}
	var page []blob.Info
	if err == nil {
		page, err = s.blobs.List(r.Context(), after, limit)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.BlobPage{Blobs: make([]wire.BlobInfo, len(page))}
	for i, info := range page {
		out.Blobs[i] = wire.BlobInfo{Key: info.Key.String(), Size: info.Size}
	}
	if len(page) == limit {
		out.Next = out.Blobs[len(page)-1].Key
	}
	writeJSON(w, http.StatusOK, out)
}

// blobsAt returns the blob store to serve a request naming now (its now
// query parameter): the server's own, or one pinning on that fixed
// instant.
func (s *Server) blobsAt(r *http.Request) (*blob.Store, error) {
	now, err := s.queryNow(r)
	return s.blobStore(now), err
}

// splitList splits header values holding comma-separated lists.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// parseKeyList parses keys a client names, at most blob.MaxChildren.
func parseKeyList(texts []string) ([]blob.Key, error) {
	if len(texts) > blob.MaxChildren {
		return nil, fmt.Errorf("%w: %d keys, at most %d", steaderr.ErrInvalidArgument, len(texts), blob.MaxChildren)
	}
	var keys []blob.Key
	for _, t := range texts {
		k, err := blob.ParseKey(t)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// blobStore returns the server's blob store, or one on the clock stopped
// at now when now is set (a client's clock, allowed in tests).
func (s *Server) blobStore(now time.Time) *blob.Store {
	if now.IsZero() {
		return s.blobs
	}
	return blob.NewStore(s.blobEng, blob.Options{MaxSize: s.opts.MaxBlobSize, Now: func() time.Time { return now }})
}
