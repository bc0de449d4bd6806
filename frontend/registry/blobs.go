package registry

import (
	"context"
	"errors"
	"net/http"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/httprange"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// inRepo reports whether repo holds the blob d: pushed or mounted there
// (and not deleted), or a manifest of it (a client may fetch a manifest
// through the blobs endpoint).
func (g *Registry) inRepo(r *http.Request, repo string, d blob.Key) (bool, error) {
	_, ok, err := g.linked(r.Context(), blobRef(repo, d))
	if err != nil || ok {
		return ok, err
	}
	_, ok, err = g.linked(r.Context(), manifestRef(repo, d))
	return ok, err
}

// openLinked opens the blob d that repo holds, its link and the blob read
// in one call: through its blob link or, failing that, its manifest
// link. A link naming another key (set through /v1/refs) still says repo
// holds d, which is then read on its own. ErrNotFound: repo does not
// hold d, or d was collected.
func (g *Registry) openLinked(ctx context.Context, repo string, d blob.Key) (*blob.Reader, error) {
	rf, rd, err := g.st.Refs.Open(ctx, blobRef(repo, d), 0)
	if errors.Is(err, steaderr.ErrNotFound) {
		rf, rd, err = g.st.Refs.Open(ctx, manifestRef(repo, d), 0)
	}
	if err != nil || rf.Key == d {
		return rd, err
	}
	rd.Close()
	return g.st.Blobs.Get(ctx, d)
}

// getBlob answers GET and HEAD of /v2/<name>/blobs/<digest>, with Range.
func (g *Registry) getBlob(w http.ResponseWriter, r *http.Request, rt route) error {
	d, e := parseDigest(rt.item)
	if e != nil {
		return e
	}
	rd, err := g.openLinked(r.Context(), rt.name, d)
	if errors.Is(err, steaderr.ErrNotFound) {
		// Not linked, or linked but collected since: a link keeps nothing.
		return errorf(codeBlobUnknown, "blob %s is not in repository %s", d, rt.name)
	}
	if err != nil {
		return err
	}
	defer rd.Close()
	if r.Method == http.MethodHead {
		// A client that finds the blob skips its upload and pushes a
		// manifest naming it: keep it for that long.
		if err := g.keepPending(r, rt.name, d); errors.Is(err, steaderr.ErrNotFound) {
			return errorf(codeBlobUnknown, "blob %s is not in repository %s", d, rt.name)
		} else if err != nil {
			return err
		}
	}
	// rt.item is d's text, the only form parseDigest takes. The header
	// keys are canonical already, and the values one allocation: the
	// digest is the ETag within its quotes.
	etag := `"` + rt.item + `"`
	digests := []string{etag[1 : len(etag)-1], etag}
	h := w.Header()
	h["Docker-Content-Digest"] = digests[0:1:1]
	h["Content-Type"] = octetStream
	h["Etag"] = digests[1:2:2]
	h["Cache-Control"] = blobCacheControl
	var content httprange.Content = rd
	if r.Method == http.MethodHead {
		content = httprange.NewSizeOnly(rd.Size())
	}
	// The same Range rules as the API's blobs (a HEAD answers a range's
	// headers, 206), and the same held answer: a blob whose first read
	// fails (its bytes lost) is an error answer, not a 200 with none.
	sent, err := httprange.ServeHeld(w, r, content, func(w http.ResponseWriter) {
		writeError(w, errorf(codeRangeNotSatisfiable, "the range asks for no byte of the blob"))
	})
	switch {
	case err != nil && !sent:
		h.Del("Docker-Content-Digest")
		return err
	case err != nil && r.Context().Err() == nil:
		g.log.Error("registry: blob read failed mid-answer", "digest", d.String(), "err", err)
	}
	return nil
}

// Header values every blob answer shares. Nothing writes into a header's
// values (Header.Add appends to a copy, their capacity being their length).
var (
	octetStream      = []string{"application/octet-stream"}[:1:1]
	blobCacheControl = []string{"max-age=31536000"}[:1:1]
)

// keepPending makes sure repo's pending ref keeps d for at least half of
// PendingTTL, renewing or setting it; ErrNotFound means d was collected.
func (g *Registry) keepPending(r *http.Request, repo string, d blob.Key) error {
	_, err := g.st.Refs.GetTouch(r.Context(), pendingRef(repo, d), g.opts.PendingTTL)
	if errors.Is(err, steaderr.ErrNotFound) {
		_, err = g.st.Refs.Set(r.Context(), pendingRef(repo, d), d, ref.SetOptions{TTL: g.opts.PendingTTL})
	}
	return err
}

// deleteBlob unlinks a blob from its repository: it stays readable
// through any other repository that links it, and is collected once
// nothing keeps it.
func (g *Registry) deleteBlob(w http.ResponseWriter, r *http.Request, rt route) error {
	d, e := parseDigest(rt.item)
	if e != nil {
		return e
	}
	ctx := r.Context()
	err := g.st.Refs.Delete(ctx, blobRef(rt.name, d), 0)
	if errors.Is(err, steaderr.ErrNotFound) {
		return errorf(codeBlobUnknown, "blob %s is not in repository %s", d, rt.name)
	}
	if err != nil {
		return err
	}
	if err := g.st.Refs.Delete(ctx, pendingRef(rt.name, d), 0); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
		return err
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
	return nil
}
