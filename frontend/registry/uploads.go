package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server/access"
	"github.com/steadkit/stead/steaderr"
)

// chunkSize is the most one staged chunk of an upload holds.
const chunkSize = blob.DefaultChunkSize

// upload is one chunked upload in progress: the bytes [0, size) are
// staged, in order, under set (0 until the first), and hashed.
type upload struct {
	id   string
	repo string
	mu   sync.Mutex // held by the request working on it
	set  blob.ChunkSet
	size int64
	hash hash.Hash
	// used is when a request last ended, under the table's lock.
	used time.Time
	busy int  // requests working on it or waiting to, under the table's lock
	gone bool // ended (finished, cancelled or expired), under the table's lock
}

// uploadTable holds the uploads in progress, each dropped once idle past
// UploadIdle.
type uploadTable struct {
	g  *Registry
	mu sync.Mutex
	m  map[string]*upload
}

func newUploadTable(g *Registry) *uploadTable { return &uploadTable{g: g, m: map[string]*upload{}} }

// start begins an upload to repo; nil when MaxUploads are in progress.
func (t *uploadTable) start(repo string) *upload {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	if len(t.m) >= t.g.opts.MaxUploads {
		return nil
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	u := &upload{id: hex.EncodeToString(b[:]), repo: repo, hash: sha256.New(), used: time.Now()}
	t.m[u.id] = u
	return u
}

// expireLocked drops the uploads idle past UploadIdle; their staged
// chunks, whose lease lapses as long, are reaped by the store.
func (t *uploadTable) expireLocked() {
	now := time.Now()
	for id, u := range t.m {
		if u.busy == 0 && now.Sub(u.used) > t.g.opts.UploadIdle {
			u.gone = true
			delete(t.m, id)
		}
	}
}

// take returns repo's upload id for one request, locked, or nil when
// there is none (never begun, ended, expired, another repository's). A
// request already working on it makes take wait.
func (t *uploadTable) take(repo, id string) *upload {
	t.mu.Lock()
	t.expireLocked()
	u := t.m[id]
	if u == nil || u.repo != repo {
		t.mu.Unlock()
		return nil
	}
	u.busy++
	t.mu.Unlock()
	u.mu.Lock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if u.gone {
		u.busy--
		u.mu.Unlock()
		return nil
	}
	return u
}

// release ends a request's work on u; ended drops it.
func (t *uploadTable) release(u *upload, ended bool) {
	t.mu.Lock()
	u.busy--
	u.used = time.Now()
	if ended {
		u.gone = true
		delete(t.m, u.id)
	}
	t.mu.Unlock()
	u.mu.Unlock()
}

// closeAll aborts every upload in progress.
func (t *uploadTable) closeAll() {
	t.mu.Lock()
	ups := make([]*upload, 0, len(t.m))
	for id, u := range t.m {
		u.gone = true
		delete(t.m, id)
		ups = append(ups, u)
	}
	t.mu.Unlock()
	for _, u := range ups {
		if u.set != 0 {
			_ = t.g.blobEng.AbortUpload(context.Background(), u.set)
		}
	}
}

// location is the URL of u, which the client sends its next request to.
func (u *upload) location() string {
	return "/v2/" + u.repo + "/blobs/uploads/" + u.id
}

// describe sets the headers every answer about u carries.
func (u *upload) describe(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Location", u.location())
	h.Set("Docker-Upload-UUID", u.id)
	end := u.size - 1
	if end < 0 {
		end = 0
	}
	h.Set("Range", "0-"+strconv.FormatInt(end, 10))
	h.Set("Content-Length", "0")
}

// startUpload answers POST /v2/<name>/blobs/uploads/: a cross-repository
// mount (?mount=&from=), a whole blob in one request (?digest=), or the
// start of an upload.
func (g *Registry) startUpload(w http.ResponseWriter, r *http.Request, rt route) error {
	q := r.URL.Query()
	if mount := q.Get("mount"); mount != "" {
		mounted, err := g.mount(r, rt.name, mount, q.Get("from"))
		if err != nil || mounted {
			if err == nil {
				d, _ := parseDigest(mount)
				created(w, "/v2/"+rt.name+"/blobs/"+d.String(), d)
			}
			return err
		}
		// Not mountable: the client pushes the blob instead.
	}
	if ds := q.Get("digest"); ds != "" {
		d, e := parseDigest(ds)
		if e != nil {
			return e
		}
		if err := g.putWhole(r, rt.name, d, r.Body); err != nil {
			return err
		}
		created(w, "/v2/"+rt.name+"/blobs/"+d.String(), d)
		return nil
	}
	u := g.uploads.start(rt.name)
	if u == nil {
		return errorf(codeTooManyRequests, "%d uploads in progress: retry later", g.opts.MaxUploads)
	}
	u.describe(w)
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// mount links the blob digest, held by repository from (by any, when from
// is empty), into repo; mounted is false when it cannot be mounted. A
// caller that may not pull from, or names none while its access is
// restricted, is not told whether the blob is there: it pushes the blob.
func (g *Registry) mount(r *http.Request, repo, digest, from string) (mounted bool, err error) {
	d, e := parseDigest(digest)
	if e != nil {
		return false, e
	}
	if from == "" && !access.Unrestricted(r.Context()) {
		return false, nil
	}
	if from != "" {
		if access.Check(r.Context(), access.Repository, from, access.Pull) != nil {
			return false, nil
		}
		if checkName(from) != nil {
			return false, nil
		}
		ok, err := g.inRepo(r, from, d)
		if err != nil || !ok {
			return false, err
		}
	}
	if ok, err := g.st.Blobs.Has(r.Context(), d); err != nil || !ok {
		return false, err
	}
	err = g.linkBlob(r.Context(), repo, d)
	if errors.Is(err, steaderr.ErrNotFound) {
		return false, nil // collected meanwhile
	}
	return err == nil, err
}

// putWhole stores body as the blob d and links it to repo.
func (g *Registry) putWhole(r *http.Request, repo string, d blob.Key, body io.Reader) error {
	if r.ContentLength > g.opts.MaxBlobSize {
		return &regError{code: codeSizeInvalid, msg: fmt.Sprintf("blob of %d bytes, limit %d", r.ContentLength, g.opts.MaxBlobSize), status: http.StatusRequestEntityTooLarge}
	}
	if body == nil {
		body = http.NoBody
	}
	if err := g.st.Blobs.PutExpect(r.Context(), d, body); err != nil {
		return g.storeError(r, err, codeBlobUnknown)
	}
	return g.linkBlob(r.Context(), repo, d)
}

// created answers 201 for the blob d at loc.
func created(w http.ResponseWriter, loc string, d blob.Key) {
	h := w.Header()
	h.Set("Location", loc)
	h.Set("Docker-Content-Digest", d.String())
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusCreated)
}

// session takes the upload a request names, answering
// BLOB_UPLOAD_UNKNOWN when there is none.
func (g *Registry) session(rt route) (*upload, error) {
	u := g.uploads.take(rt.name, rt.item)
	if u == nil {
		return nil, errorf(codeBlobUploadUnknown, "upload %.80q is not in progress", rt.item)
	}
	return u, nil
}

func (g *Registry) uploadStatus(w http.ResponseWriter, r *http.Request, rt route) error {
	u, err := g.session(rt)
	if err != nil {
		return err
	}
	defer g.uploads.release(u, false)
	u.describe(w)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// patchUpload appends a chunk: the body, at the offset Content-Range
// names when it is given, which must be where the upload ends.
func (g *Registry) patchUpload(w http.ResponseWriter, r *http.Request, rt route) error {
	u, err := g.session(rt)
	if err != nil {
		return err
	}
	defer g.uploads.release(u, false)
	if err := g.checkRange(w, r, u); err != nil {
		return err
	}
	if err := g.appendBody(r, u); err != nil {
		if errors.Is(err, steaderr.ErrLost) {
			g.dropLost(u)
		}
		return err
	}
	u.describe(w)
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// dropLost forgets an upload whose staged chunks the store reaped.
func (g *Registry) dropLost(u *upload) {
	g.uploads.mu.Lock()
	u.gone = true
	delete(g.uploads.m, u.id)
	g.uploads.mu.Unlock()
}

// checkRange checks a chunk's Content-Range, "<start>-<end>", against the
// upload's end and the body's declared length; a chunk that does not
// start where the upload ends is answered 416 with the upload's Range.
func (g *Registry) checkRange(w http.ResponseWriter, r *http.Request, u *upload) error {
	cr := r.Header.Get("Content-Range")
	if cr == "" {
		return nil
	}
	start, end, ok := parseContentRange(cr)
	if !ok {
		return errorf(codeBlobUploadInvalid, "Content-Range %.80q: want <start>-<end>", cr)
	}
	if start != u.size {
		u.describe(w)
		return errorf(codeRangeInvalid, "chunk starts at %d, the upload ends at %d", start, u.size)
	}
	if r.ContentLength >= 0 && r.ContentLength != end-start+1 {
		return errorf(codeBlobUploadInvalid, "Content-Range %s is %d bytes, the body %d", cr, end-start+1, r.ContentLength)
	}
	return nil
}

// parseContentRange parses "<start>-<end>" (a "bytes " unit is allowed),
// end at or past start.
func parseContentRange(s string) (start, end int64, ok bool) {
	s = strings.TrimPrefix(s, "bytes ")
	a, b, found := strings.Cut(s, "-")
	if !found || a == "" || b == "" || a[0] == '+' || b[0] == '+' {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(a, 10, 64)
	end, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start || end == 1<<63-1 {
		return 0, 0, false
	}
	return start, end, true
}

// appendBody stages the request body after the upload's bytes, a chunk
// at a time, hashing it. A body cut short keeps what arrived whole in
// chunks: the client resumes from the Range it is told.
func (g *Registry) appendBody(r *http.Request, u *upload) error {
	if r.Body == nil {
		return nil
	}
	ctx := r.Context()
	buf := make([]byte, chunkSize)
	for {
		n, rerr := io.ReadFull(r.Body, buf)
		if n > 0 {
			if u.size > g.opts.MaxBlobSize-int64(n) {
				return &regError{code: codeSizeInvalid, msg: fmt.Sprintf("blob over the limit of %d bytes", g.opts.MaxBlobSize), status: http.StatusRequestEntityTooLarge}
			}
			if u.set == 0 {
				set, err := g.blobEng.BeginUpload(ctx, blob.BeginUploadParams{Lease: g.opts.UploadIdle})
				if err != nil {
					return err
				}
				u.set = set
			}
			if err := g.blobEng.WriteChunk(ctx, blob.WriteChunkParams{Set: u.set, Off: u.size, Data: buf[:n], Lease: g.opts.UploadIdle}); err != nil {
				return err
			}
			u.hash.Write(buf[:n])
			u.size += int64(n)
		}
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			return nil
		case rerr != nil:
			return errorf(codeBlobUploadInvalid, "reading the chunk: %v", rerr)
		}
	}
}

// finishUpload answers PUT ?digest=: the body, if any, is the last chunk;
// the upload is stored under digest once its bytes hash to it.
func (g *Registry) finishUpload(w http.ResponseWriter, r *http.Request, rt route) error {
	d, e := parseDigest(r.URL.Query().Get("digest"))
	if e != nil {
		return e
	}
	u, err := g.session(rt)
	if err != nil {
		return err
	}
	ended := false
	defer func() { g.uploads.release(u, ended) }()
	if u.set == 0 {
		// Nothing staged: the body is the whole blob.
		if err := g.checkRange(w, r, u); err != nil {
			return err
		}
		if err := g.putWhole(r, rt.name, d, r.Body); err != nil {
			return err
		}
		ended = true
		created(w, "/v2/"+rt.name+"/blobs/"+d.String(), d)
		return nil
	}
	if err := g.checkRange(w, r, u); err != nil {
		return err
	}
	if err := g.appendBody(r, u); err != nil {
		if errors.Is(err, steaderr.ErrLost) {
			ended = true
		}
		return err
	}
	var got blob.Key
	if err := got.UnmarshalText([]byte("sha256:" + hex.EncodeToString(u.hash.Sum(nil)))); err != nil {
		return err
	}
	if got != d {
		// The upload stays: the client may cancel it, or it expires.
		return errorf(codeDigestInvalid, "the upload's %d bytes hash to %s, not %s", u.size, got, d)
	}
	err = g.st.Blobs.PublishHashed(r.Context(), blob.PutParams{Key: d, Chunks: u.set, Size: u.size, Owner: g.st.InstanceID(), TTL: g.st.Blobs.PinTTL()}, got)
	if err != nil {
		if errors.Is(err, steaderr.ErrLost) {
			ended = true
		}
		return g.storeError(r, err, codeBlobUploadUnknown)
	}
	ended = true
	if err := g.linkBlob(r.Context(), rt.name, d); err != nil {
		return err
	}
	created(w, "/v2/"+rt.name+"/blobs/"+d.String(), d)
	return nil
}

// cancelUpload answers DELETE of an upload: its staged chunks go.
func (g *Registry) cancelUpload(w http.ResponseWriter, r *http.Request, rt route) error {
	u, err := g.session(rt)
	if err != nil {
		return err
	}
	defer g.uploads.release(u, true)
	if u.set != 0 {
		if err := g.blobEng.AbortUpload(r.Context(), u.set); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusNoContent)
	return nil
}
