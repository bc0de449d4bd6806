package server

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
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
	res := &putResult{}
	ctx := context.WithValue(r.Context(), putResultKey{}, res)
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
	key, err := blobs.PutWith(ctx, body, blob.PutOptions{Expect: want, Children: children})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !res.written {
		// A re-put this store's live pin answered without writing: the
		// blob was there.
		res.existed = true
		s.metrics.blobPut(true, int(body.n))
	}
	status := http.StatusCreated
	if res.existed {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/blobs/"+key.String())
	w.Header().Set("ETag", `"`+key.String()+`"`)
	writeJSON(w, status, wire.BlobInfo{Key: key.String(), Size: body.n})
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

// putSpy tells a put whether its key was already stored, for the 200/201
// distinction and the dedup metric.
type putSpy struct {
	blob.Engine
	m *metrics
}

type putResultKey struct{}

type putResult struct{ written, existed bool }

func (p *putSpy) Put(ctx context.Context, pp blob.PutParams) error {
	_, err := p.Engine.Stat(ctx, pp.Key)
	existed := err == nil
	if err != nil && !errors.Is(err, steaderr.ErrNotFound) {
		return err
	}
	if err := p.Engine.Put(ctx, pp); err != nil {
		return err
	}
	if res, ok := ctx.Value(putResultKey{}).(*putResult); ok {
		res.written, res.existed = true, existed
	}
	size := int64(len(pp.Value))
	if pp.Chunks != 0 {
		size = pp.Size
	}
	p.m.blobPut(existed, int(size))
	return nil
}

func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// HEAD asks for the headers only: the size, not the value.
	var rd readSizer
	if r.Method == http.MethodHead {
		info, err := s.blobs.Stat(r.Context(), key)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		rd = &sizeOnly{size: info.Size}
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
	size := strconv.FormatInt(rd.Size(), 10)
	if rw, ok := w.(*responseWriter); ok {
		rw.size = size
	}
	verdict, ranges := checkRange(r.Header.Get("Range"))
	switch {
	case verdict == rangeUnsatisfiable:
		h.Set("Content-Range", "bytes */"+size)
		writeError(w, wire.CodeRangeNotSatisfiable, "empty suffix range")
		return
	case verdict == rangeIgnored:
		r.Header.Del("Range")
	case r.Header.Get("Range") != "":
		r.Header.Set("Range", ranges)
	}
	s.stream(w)
	if r.Method == http.MethodHead {
		http.ServeContent(w, r, "", time.Time{}, rd)
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
func (s *Server) serveValue(w http.ResponseWriter, r *http.Request, key blob.Key, rd readSizer) {
	held := &heldAnswer{ResponseWriter: w}
	content := &readFailure{readSizer: rd}
	http.ServeContent(held, r, "", time.Time{}, content)
	switch {
	case content.err == nil:
	case !held.sent:
		for _, name := range []string{"Content-Length", "Content-Range", "Content-Type", "Accept-Ranges", "ETag", "Cache-Control"} {
			w.Header().Del(name)
		}
		s.fail(w, r, content.err)
		return
	case r.Context().Err() == nil:
		s.log.Error("stead: blob read failed mid-answer", "key", key.String(), "err", content.err)
	}
	held.send()
}

// readSizer is a value's content as http.ServeContent reads it.
type readSizer interface {
	io.ReadSeeker
	Size() int64
}

// readFailure keeps the first error reading its content returned.
type readFailure struct {
	readSizer
	err error
}

func (c *readFailure) Read(p []byte) (int, error) {
	n, err := c.readSizer.Read(p)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// heldAnswer holds back an answer's status until its first byte.
type heldAnswer struct {
	http.ResponseWriter
	status int
	sent   bool
}

func (h *heldAnswer) WriteHeader(code int) {
	if !h.sent && h.status == 0 {
		h.status = code
	}
}

func (h *heldAnswer) Write(p []byte) (int, error) {
	h.send()
	return h.ResponseWriter.Write(p)
}

// send sends the status held back, if any.
func (h *heldAnswer) send() {
	if !h.sent {
		h.sent = true
		if h.status != 0 {
			h.ResponseWriter.WriteHeader(h.status)
		}
	}
}

func (h *heldAnswer) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// sizeOnly is a HEAD answer's content: its size, without its bytes.
// http.ServeContent seeks it to learn the size and sends no body for
// HEAD; what it reads (for a multi-range answer's parts) fails.
type sizeOnly struct{ size, off int64 }

func (c *sizeOnly) Size() int64 { return c.size }

func (c *sizeOnly) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += c.off
	case io.SeekEnd:
		offset += c.size
	}
	if offset < 0 {
		return c.off, errors.New("seek before the start")
	}
	c.off = offset
	return offset, nil
}

func (c *sizeOnly) Read([]byte) (int, error) { return 0, errors.New("a HEAD answer has no body") }

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

// listBlobs streams one page of keys after the cursor: {"blobs": [...],
// "next": "..."}, next set when the page is full. limit=0 lists every
// blob after the cursor in one response, walked a page at a time
// (blob.Store.All): each page is one snapshot, the walk as a whole is not.
// An error after the page began ends it with "error" and "code" members.
func (s *Server) listBlobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after blob.Key
	if text := q.Get("after"); text != "" {
		key, err := blob.ParseKey(text)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		after = key
	}
	limit := defaultListLimit
	if text := q.Get("limit"); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 || n > maxListLimit {
			s.fail(w, r, invalidArgument("limit %q: want 0 (all) to %d", text, maxListLimit))
			return
		}
		limit = n
	}
	s.stream(w)
	var (
		started bool
		count   int
		last    blob.Key
		werr    error
	)
	write := func(b []byte) {
		if werr == nil {
			_, werr = w.Write(b)
		}
	}
	start := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			write([]byte(`{"blobs":[`))
		}
	}
	// A page is read whole before any of it is written, and limit 0 walks
	// page by page (blob.Store.All): no pooled connection waits on a slow
	// client.
	var infos iter.Seq2[blob.Info, error]
	if limit == 0 {
		infos = s.blobs.All(r.Context(), after)
	} else {
		page, err := s.blobs.List(r.Context(), after, limit)
		infos = func(yield func(blob.Info, error) bool) {
			for _, info := range page {
				if !yield(info, nil) {
					return
				}
			}
			if err != nil {
				yield(blob.Info{}, err)
			}
		}
	}
	var err error
	for info, ierr := range infos {
		if ierr != nil {
			err = ierr
			break
		}
		start()
		if count > 0 {
			write([]byte{','})
		}
		b, _ := json.Marshal(wire.BlobInfo{Key: info.Key.String(), Size: info.Size})
		write(b)
		count++
		last = info.Key
		if werr != nil {
			break
		}
	}
	if err != nil && !started {
		s.fail(w, r, err)
		return
	}
	start()
	tail := map[string]any{}
	if err != nil {
		_, code, sentinel := wire.StatusOf(err)
		if sentinel == nil {
			code = wire.CodeInternal
			s.log.Error("stead: blob list", "err", err)
			tail["error"] = "internal error"
		} else {
			tail["error"] = publicMessage(err)
		}
		tail["code"] = code
	} else if limit > 0 && count == limit {
		tail["next"] = last.String()
	}
	b, _ := json.Marshal(tail)
	write([]byte("]"))
	if len(b) > 2 {
		write([]byte{','})
		write(b[1:])
	} else {
		write([]byte("}"))
	}
	write([]byte("\n"))
}

// maxRanges is the most ranges one request may ask for; more are ignored
// (the whole value is sent), so a request cannot multiply the answer's
// size with thousands of tiny parts.
const maxRanges = 16

type rangeVerdict int

const (
	rangeServe         rangeVerdict = iota // to http.ServeContent
	rangeUnsatisfiable                     // 416
	rangeIgnored                           // send the whole value
)

// checkRange judges what http.ServeContent gets wrong in a Range header,
// returning the header to pass on: a zero-length suffix ("bytes=-0") is
// unsatisfiable (RFC 9110 14.1.1) and dropped, unsatisfiable when alone;
// too many ranges are ignored. The rest is ServeContent's to parse.
func checkRange(header string) (rangeVerdict, string) {
	specs, ok := strings.CutPrefix(header, "bytes=")
	if !ok {
		return rangeServe, header
	}
	var kept []string
	n := 0
	for spec := range strings.SplitSeq(specs, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		n++
		if suffix, ok := strings.CutPrefix(spec, "-"); ok && suffix != "" && strings.Trim(suffix, "0") == "" {
			continue
		}
		kept = append(kept, spec)
	}
	switch {
	case n > maxRanges:
		return rangeIgnored, ""
	case n > 0 && len(kept) == 0:
		return rangeUnsatisfiable, ""
	}
	return rangeServe, "bytes=" + strings.Join(kept, ",")
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
	return blob.NewStore(s.blobEng, blob.Options{MaxSize: s.opts.MaxBlobSize, VerifyReads: s.opts.VerifyReads, Now: func() time.Time { return now }})
}
