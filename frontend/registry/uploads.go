package registry

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server/access"
	"github.com/steadkit/stead/steaderr"
)

// A chunked upload is the store's (blob.Upload,
// docs/decisions/0045-durable-uploads.md): its size, running hash and
// owner (the repository) are committed with each chunk, and every request
// resumes it by id, so any Registry over the same database continues it,
// and none keeps anything of it in memory.

// uploadLocation is the URL of repo's upload id, which the client sends
// its next request to.
func uploadLocation(repo, id string) string { return "/v2/" + repo + "/blobs/uploads/" + id }

// describe sets the headers every answer about repo's upload id, size
// bytes long, carries.
func describe(w http.ResponseWriter, repo, id string, size int64) {
	h := w.Header()
	h.Set("Location", uploadLocation(repo, id))
	h.Set("Docker-Upload-UUID", id)
	h.Set("Range", "0-"+strconv.FormatInt(max(size-1, 0), 10))
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
		if err := g.putWhole(r, rt.name, d, r.Body, -1); err != nil {
			return err
		}
		created(w, "/v2/"+rt.name+"/blobs/"+d.String(), d)
		return nil
	}
	u, err := g.st.Blobs.BeginUpload(r.Context(), blob.UploadOptions{Owner: rt.name, Lease: g.opts.UploadIdle})
	if err != nil {
		return err
	}
	describe(w, rt.name, u.ID(), 0)
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

// putWhole stores body, n bytes when n >= 0, as the blob d and links it
// to repo.
func (g *Registry) putWhole(r *http.Request, repo string, d blob.Key, body io.Reader, n int64) error {
	if r.ContentLength > g.opts.MaxBlobSize {
		return &regError{code: codeSizeInvalid, msg: fmt.Sprintf("blob of %d bytes, limit %d", r.ContentLength, g.opts.MaxBlobSize), status: http.StatusRequestEntityTooLarge}
	}
	if body == nil {
		body = http.NoBody
	}
	if d.IsZero() {
		return g.storeError(r, fmt.Errorf("blob put: %w: zero key", steaderr.ErrInvalidKey), codeBlobUnknown)
	}
	// The blob, its pending keep and its link, in one commit when the
	// blob is small (ref.Store.Put), as linkBlob sets them.
	_, err := g.st.Refs.Put(r.Context(), g.limitBody(body, 0, n), ref.PutOptions{Expect: d, Refs: []ref.PutRef{
		{Name: pendingRef(repo, d), SetOptions: ref.SetOptions{TTL: g.opts.PendingTTL}},
		{Name: blobRef(repo, d), SetOptions: ref.SetOptions{Weak: true}},
	}})
	if err != nil {
		return g.storeError(r, err, codeBlobUnknown)
	}
	return nil
}

// created answers 201 for the blob d at loc.
func created(w http.ResponseWriter, loc string, d blob.Key) {
	h := w.Header()
	h.Set("Location", loc)
	h.Set("Docker-Content-Digest", d.String())
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusCreated)
}

// resume continues the upload a request names, answering
// BLOB_UPLOAD_UNKNOWN when there is none: an id no upload has, one that
// ended (finished, cancelled, reaped) or another repository's.
func (g *Registry) resume(r *http.Request, rt route) (*blob.Upload, error) {
	u, err := g.st.Blobs.ResumeUpload(r.Context(), rt.item, blob.UploadOptions{Owner: rt.name, Lease: g.opts.UploadIdle})
	if errors.Is(err, steaderr.ErrLost) {
		return nil, errorf(codeBlobUploadUnknown, "upload %.80q is not in progress", rt.item)
	}
	return u, err
}

func (g *Registry) uploadStatus(w http.ResponseWriter, r *http.Request, rt route) error {
	u, err := g.resume(r, rt)
	if err != nil {
		return err
	}
	describe(w, rt.name, u.ID(), u.Size())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// patchUpload appends a chunk: the body, at the offset Content-Range
// names when it is given, which must be where the upload ends.
func (g *Registry) patchUpload(w http.ResponseWriter, r *http.Request, rt route) error {
	u, err := g.resume(r, rt)
	if err != nil {
		return err
	}
	n, err := checkRange(w, r, rt, u)
	if err != nil {
		return err
	}
	if err := g.appendBody(w, r, rt, u, n); err != nil {
		return err
	}
	describe(w, rt.name, u.ID(), u.Size())
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// checkRange checks a chunk's Content-Range, "<start>-<end>", against the
// upload's end and the body's declared length, and returns the chunk's
// length (-1 without a Content-Range); a chunk that does not start where
// the upload ends is answered 416 with the upload's Range.
func checkRange(w http.ResponseWriter, r *http.Request, rt route, u *blob.Upload) (int64, error) {
	cr := r.Header.Get("Content-Range")
	if cr == "" {
		return -1, nil
	}
	start, end, ok := parseContentRange(cr)
	if !ok {
		return 0, errorf(codeBlobUploadInvalid, "Content-Range %.80q: want <start>-<end>", cr)
	}
	if size := u.Size(); start != size {
		describe(w, rt.name, u.ID(), size)
		return 0, errorf(codeRangeInvalid, "chunk starts at %d, the upload ends at %d", start, size)
	}
	if r.ContentLength >= 0 && r.ContentLength != end-start+1 {
		return 0, errorf(codeBlobUploadInvalid, "Content-Range %s is %d bytes, the body %d", cr, end-start+1, r.ContentLength)
	}
	return end - start + 1, nil
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

// hasBody reports whether r carries a body that may not be empty.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// appendBody appends the request body, if any, to u. A body cut short
// keeps what the upload committed of it (its whole chunks; on a bytes
// tier, nothing past the inline limit): the client resumes from the
// Range it is told. An append another request committed first is
// answered 416 with the upload's Range as it now is.
func (g *Registry) appendBody(w http.ResponseWriter, r *http.Request, rt route, u *blob.Upload, n int64) error {
	if !hasBody(r) {
		return nil
	}
	if n < 0 {
		n = r.ContentLength
	}
	if n > g.opts.MaxBlobSize-u.Size() {
		// Refused before a byte is read, so the upload is as it was.
		return &regError{code: codeSizeInvalid, msg: fmt.Sprintf("a chunk of %d bytes takes the blob over the limit of %d bytes", n, g.opts.MaxBlobSize), status: http.StatusRequestEntityTooLarge}
	}
	_, err := u.Append(r.Context(), g.limitBody(r.Body, u.Size(), n))
	if errors.Is(err, steaderr.ErrConflict) {
		return g.conflict(w, r, rt)
	}
	return err
}

// conflict answers a step another request's append beat (the upload no
// longer ends where this one started): 416 with the upload's Range as it
// now is.
func (g *Registry) conflict(w http.ResponseWriter, r *http.Request, rt route) error {
	u, err := g.resume(r, rt)
	if err != nil {
		return err
	}
	describe(w, rt.name, u.ID(), u.Size())
	return errorf(codeRangeInvalid, "another request appended to the upload first: it ends at %d", u.Size())
}

// finishUpload answers PUT ?digest=: the body, if any, is the last chunk;
// the upload is stored under digest once its bytes hash to it.
func (g *Registry) finishUpload(w http.ResponseWriter, r *http.Request, rt route) error {
	d, e := parseDigest(r.URL.Query().Get("digest"))
	if e != nil {
		return e
	}
	u, err := g.resume(r, rt)
	if err != nil {
		return err
	}
	n, err := checkRange(w, r, rt, u)
	if err != nil {
		return err
	}
	loc := "/v2/" + rt.name + "/blobs/" + d.String()
	if u.Size() == 0 && hasBody(r) {
		// Nothing appended (oras's and regctl's push): the body is the
		// whole blob, stored as a monolithic POST's is, and the empty
		// upload goes meanwhile, a round trip beside the put's, whether
		// the put succeeds or not: a retry starts over with a new upload.
		aborted := make(chan error, 1)
		go func() { aborted <- u.Abort(r.Context()) }()
		err := g.putWhole(r, rt.name, d, r.Body, n)
		if aerr := <-aborted; aerr != nil {
			g.log.Warn("registry: discarding an empty upload failed (its lease reaps it)", "upload", u.ID(), "err", aerr)
		}
		if err != nil {
			return err
		}
		created(w, loc, d)
		return nil
	}
	appended := hasBody(r)
	if err := g.appendBody(w, r, rt, u, n); err != nil {
		return err
	}
	if _, err := u.Commit(r.Context(), blob.CommitOptions{Expect: d}); err != nil {
		switch {
		case errors.Is(err, steaderr.ErrDigestMismatch) && appended:
			// The body is appended: the upload ends, so that the PUT's
			// retry does not append it twice but starts over.
			if aerr := u.Abort(r.Context()); aerr != nil {
				g.log.Warn("registry: discarding an upload of the wrong digest failed (its lease reaps it)", "upload", u.ID(), "err", aerr)
			}
			return errorf(codeDigestInvalid, "the upload's %d bytes do not hash to %s: the upload is discarded", u.Size(), d)
		case errors.Is(err, steaderr.ErrDigestMismatch):
			// The upload stays: the client may cancel it, or it expires.
			return errorf(codeDigestInvalid, "the upload's %d bytes do not hash to %s", u.Size(), d)
		case errors.Is(err, steaderr.ErrConflict):
			return g.conflict(w, r, rt)
		}
		return g.storeError(r, err, codeBlobUploadUnknown)
	}
	if err := g.linkBlob(r.Context(), rt.name, d); err != nil {
		return err
	}
	created(w, loc, d)
	return nil
}

// cancelUpload answers DELETE of an upload: its bytes go.
func (g *Registry) cancelUpload(w http.ResponseWriter, r *http.Request, rt route) error {
	u, err := g.resume(r, rt)
	if err != nil {
		return err
	}
	if err := u.Abort(r.Context()); err != nil {
		return err
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// limitBody reads body for a blob that holds size bytes already: at most
// what MaxBlobSize leaves (one byte more is SIZE_INVALID), and exactly n
// bytes when n >= 0 (a Content-Range's: more or fewer is
// BLOB_UPLOAD_INVALID), its read errors told as the client's
// (BLOB_UPLOAD_INVALID).
func (g *Registry) limitBody(body io.Reader, size, n int64) io.Reader {
	b := &blobBody{r: body, room: g.opts.MaxBlobSize - size, limit: g.opts.MaxBlobSize, exact: n}
	if n >= 0 {
		b.room = min(b.room, n)
	}
	return b
}

type blobBody struct {
	r     io.Reader
	room  int64
	limit int64
	exact int64 // the body's length, -1 for any
	read  int64
}

func (b *blobBody) Read(p []byte) (int, error) {
	if b.room <= 0 {
		// Only the end of the body may follow the limit.
		var one [1]byte
		switch n, err := io.ReadFull(b.r, one[:]); {
		case n == 1 && b.exact >= 0:
			return 0, errorf(codeBlobUploadInvalid, "the body is longer than its Content-Range's %d bytes", b.exact)
		case n == 1:
			return 0, &regError{code: codeSizeInvalid, msg: fmt.Sprintf("blob over the limit of %d bytes", b.limit), status: http.StatusRequestEntityTooLarge}
		case err == io.EOF:
			return 0, io.EOF
		default:
			return 0, errorf(codeBlobUploadInvalid, "reading the request body: %v", err)
		}
	}
	if int64(len(p)) > b.room {
		p = p[:b.room]
	}
	n, err := b.r.Read(p)
	b.room -= int64(n)
	b.read += int64(n)
	switch {
	case err == io.EOF && b.exact >= 0 && b.read < b.exact:
		err = errorf(codeBlobUploadInvalid, "the body is shorter than its Content-Range's %d bytes", b.exact)
	case err != nil && err != io.EOF:
		err = errorf(codeBlobUploadInvalid, "reading the request body: %v", err)
	}
	return n, err
}
