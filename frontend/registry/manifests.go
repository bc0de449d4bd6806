package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	distspec "github.com/opencontainers/distribution-spec/specs-go/v1"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The Docker media types the registry accepts besides the OCI ones.
const (
	mediaTypeDockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
)

// isIndex reports whether mt is an index (or manifest list), isManifest
// whether it is an image manifest.
func isIndex(mt string) bool {
	return mt == ocispec.MediaTypeImageIndex || mt == mediaTypeDockerManifestList
}
func isManifest(mt string) bool {
	return mt == ocispec.MediaTypeImageManifest || mt == mediaTypeDockerManifest
}

// manifestDoc is what the registry reads of an image manifest or an
// index: the descriptors that keep content alive, and what a referrers
// list shows.
type manifestDoc struct {
	SchemaVersion *int                 `json:"schemaVersion"`
	MediaType     string               `json:"mediaType"`
	ArtifactType  string               `json:"artifactType"`
	Config        *ocispec.Descriptor  `json:"config"`
	Layers        []ocispec.Descriptor `json:"layers"`
	Manifests     []ocispec.Descriptor `json:"manifests"`
	Subject       *ocispec.Descriptor  `json:"subject"`
	Annotations   map[string]string    `json:"annotations"`
}

// link is what the refs of a manifest carry in their annotation: its
// descriptor as a referrers list shows it. Trimmed says its annotations
// did not fit and are read from the manifest when listed.
type link struct {
	Descriptor ocispec.Descriptor `json:"d"`
	Trimmed    bool               `json:"trimmed,omitempty"`
	// Pushed is when the manifest was pushed (zero for a link written
	// before push times were kept).
	Pushed time.Time `json:"pushed,omitzero"`
	// Pulled is when the manifest was last pulled from its repository,
	// kept in its manifest link only (notePull); zero when never.
	Pulled time.Time `json:"pulled,omitzero"`
}

func (l link) encode() []byte {
	b, _ := json.Marshal(l)
	if len(b) > ref.MaxAnnotation {
		l.Descriptor.Annotations, l.Trimmed = nil, true
		b, _ = json.Marshal(l)
	}
	return b
}

// decodeLink reads a manifest ref's annotation; a ref set by something
// else reads as a descriptor of unknown media type.
func decodeLink(rf ref.Ref) link {
	var l link
	if json.Unmarshal(rf.Annotation, &l) != nil || l.Descriptor.MediaType == "" {
		l = link{Descriptor: ocispec.Descriptor{MediaType: "application/octet-stream"}}
	}
	l.Descriptor.Digest = digestOf(rf.Key)
	return l
}

// parseManifest checks a pushed manifest of media type mt (its
// Content-Type) and returns what it says.
func parseManifest(body []byte, mt string) (manifestDoc, *regError) {
	var doc manifestDoc
	if err := validate.JSONText(body); err != nil {
		return doc, errorf(codeManifestInvalid, "manifest is not valid UTF-8 JSON")
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return doc, errorf(codeManifestInvalid, "manifest: %v", err)
	}
	switch {
	case doc.SchemaVersion == nil || *doc.SchemaVersion != 2:
		return doc, errorf(codeManifestInvalid, "manifest: want schemaVersion 2")
	case mt == "":
		return doc, errorf(codeManifestInvalid, "manifest has neither a Content-Type nor a mediaType")
	case doc.MediaType != "" && doc.MediaType != mt:
		return doc, errorf(codeManifestInvalid, "manifest's mediaType %.100q is not its Content-Type %.100q", doc.MediaType, mt)
	case isManifest(mt) && doc.Config == nil:
		return doc, errorf(codeManifestInvalid, "image manifest without a config")
	case isManifest(mt) && doc.Manifests != nil, isIndex(mt) && (doc.Config != nil || doc.Layers != nil):
		return doc, errorf(codeManifestInvalid, "manifest of type %s mixes an image manifest's fields and an index's", mt)
	case !isManifest(mt) && !isIndex(mt):
		return doc, &regError{code: codeManifestInvalid, msg: fmt.Sprintf("media type %.100q is not supported: push an OCI image manifest or index, or a Docker v2 manifest or manifest list", mt), status: http.StatusUnsupportedMediaType}
	}
	for _, d := range doc.descriptors() {
		if _, e := parseDigest(string(d.Digest)); e != nil {
			return doc, errorf(codeManifestInvalid, "descriptor digest: %s", e.msg)
		}
		if d.Size < 0 {
			return doc, errorf(codeManifestInvalid, "descriptor %s has size %d", d.Digest, d.Size)
		}
	}
	if doc.Subject != nil {
		if _, e := parseDigest(string(doc.Subject.Digest)); e != nil {
			return doc, errorf(codeManifestInvalid, "subject digest: %s", e.msg)
		}
	}
	return doc, nil
}

// descriptors returns the blob and manifest descriptors of doc, not its
// subject.
func (doc manifestDoc) descriptors() []ocispec.Descriptor {
	var ds []ocispec.Descriptor
	if doc.Config != nil {
		ds = append(ds, *doc.Config)
	}
	ds = append(ds, doc.Layers...)
	return append(ds, doc.Manifests...)
}

// nondistributable reports whether a layer of this media type is not
// pushed to registries (foreign layers), so need not be present.
func nondistributable(mt string) bool {
	return strings.Contains(mt, ".nondistributable.") || strings.Contains(mt, ".foreign.")
}

// artifactType is what a referrers list says of doc (the image spec's
// rule): its artifactType, else an image manifest's config media type.
func (doc manifestDoc) artifactType() string {
	if doc.ArtifactType == "" && doc.Config != nil && doc.MediaType != ocispec.MediaTypeImageIndex {
		return doc.Config.MediaType
	}
	return doc.ArtifactType
}

func digestOf(k blob.Key) digest.Digest { return digest.Digest(k.String()) }

// getManifest answers GET and HEAD of /v2/<name>/manifests/<reference>.
func (g *Registry) getManifest(w http.ResponseWriter, r *http.Request, rt route) error {
	name, e := g.manifestRefName(rt)
	if e != nil {
		return e
	}
	rf, ok, err := g.linked(r.Context(), name)
	if err != nil {
		return err
	}
	if !ok {
		return errorf(codeManifestUnknown, "manifest %.140s is not in repository %s", rt.item, rt.name)
	}
	rd, err := g.st.Blobs.Get(r.Context(), rf.Key)
	if err != nil {
		return g.storeError(r, err, codeManifestUnknown)
	}
	defer rd.Close()
	l := decodeLink(rf)
	h := w.Header()
	h.Set("Content-Type", l.Descriptor.MediaType)
	h.Set("Docker-Content-Digest", rf.Key.String())
	h.Set("ETag", `"`+rf.Key.String()+`"`)
	h.Set("Content-Length", strconv.FormatInt(rd.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, rd)
		// A pull, for usage's last pull and retention's keep_pulled_within:
		// a write per half resolution, each.
		now := g.opts.Now()
		if err := g.st.NotePull(r.Context(), repoPrefix(rt.name), rf.Key, now); err != nil && r.Context().Err() == nil {
			g.log.Warn("registry: noting a pull failed", "repository", rt.name, "err", err)
		}
		if err := g.notePull(r.Context(), rt.name, rf, now); err != nil && r.Context().Err() == nil {
			g.log.Warn("registry: noting a manifest's pull failed", "repository", rt.name, "digest", rf.Key.String(), "err", err)
		}
	}
	return nil
}

// manifestRefName is the ref a manifest reference (a tag or a digest)
// reads.
func (g *Registry) manifestRefName(rt route) (string, *regError) {
	if tagRE.MatchString(rt.item) {
		return tagRef(rt.name, rt.item), nil
	}
	if strings.Contains(rt.item, ":") {
		d, e := parseDigest(rt.item)
		if e != nil {
			return "", e
		}
		return manifestRef(rt.name, d), nil
	}
	return "", errorf(codeManifestInvalid, "reference %.80q is neither a tag nor a digest", rt.item)
}

// putManifest answers PUT /v2/<name>/manifests/<reference>. The manifest
// is stored with blob references to what it names in its repository
// (config, layers, child manifests), then linked to the repository,
// tagged, and listed among its subject's referrers.
func (g *Registry) putManifest(w http.ResponseWriter, r *http.Request, rt route) error {
	ctx := r.Context()
	var tags []string
	var want blob.Key
	if tagRE.MatchString(rt.item) {
		tags = []string{rt.item}
	} else {
		if _, e := g.manifestRefName(rt); e != nil {
			return e
		}
		want, _ = parseDigest(rt.item)
		// A push by digest may tag it too: ?tag=a&tag=b.
		tags = r.URL.Query()["tag"]
		if len(tags) > maxTagParams {
			return errorf(codeManifestInvalid, "%d tag parameters, at most %d", len(tags), maxTagParams)
		}
		for _, t := range tags {
			if !tagRE.MatchString(t) {
				return errorf(codeManifestInvalid, "tag %.80q: want [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}", t)
			}
		}
	}
	if r.ContentLength > MaxManifestSize {
		return &regError{code: codeSizeInvalid, msg: fmt.Sprintf("manifest of %d bytes, limit %d", r.ContentLength, MaxManifestSize), status: http.StatusRequestEntityTooLarge}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxManifestSize+1))
	if err != nil {
		return errorf(codeManifestInvalid, "reading the manifest: %v", err)
	}
	if len(body) > MaxManifestSize {
		return &regError{code: codeSizeInvalid, msg: fmt.Sprintf("manifest over the limit of %d bytes", MaxManifestSize), status: http.StatusRequestEntityTooLarge}
	}
	key := blob.KeyOf(body)
	if !want.IsZero() && key != want {
		return errorf(codeDigestInvalid, "manifest hashes to %s, not %s", key, want)
	}
	mt := r.Header.Get("Content-Type")
	if mt != "" {
		if parsed, _, err := mime.ParseMediaType(mt); err == nil {
			mt = parsed
		}
	}
	doc, e := parseManifest(body, mt)
	if e != nil {
		return e
	}
	if mt == "" {
		mt = doc.MediaType
	}
	var children []blob.Key
	for _, d := range doc.descriptors() {
		if nondistributable(d.MediaType) {
			continue
		}
		k, _ := parseDigest(string(d.Digest))
		size, held, err := g.holds(r, rt.name, k, isIndex(mt))
		if err != nil {
			return err
		}
		if !held {
			return errorf(codeManifestBlobUnknown, "%s %s is not in repository %s: push it first", d.MediaType, k, rt.name)
		}
		if size != d.Size {
			return errorf(codeManifestInvalid, "descriptor %s says %d bytes, the blob has %d", k, d.Size, size)
		}
		children = append(children, k)
	}
	// The subject is not a child: a referrer may be pushed before its
	// subject, and a blob's children are fixed by the put that stores it,
	// so they must follow from its content alone. A referrer does not keep
	// its subject.
	var subject blob.Key
	if doc.Subject != nil {
		subject, _ = parseDigest(string(doc.Subject.Digest))
	}
	for _, tag := range tags {
		if g.opts.Retention.immutable(rt.name, tag) {
			if err := g.sameTag(ctx, rt.name, tag, key); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
				return err
			}
		}
	}
	if _, err := g.st.Blobs.PutWith(ctx, bytes.NewReader(body), blob.PutOptions{Expect: key, Children: children}); err != nil {
		switch {
		case errors.Is(err, steaderr.ErrNotFound):
			return errorf(codeManifestBlobUnknown, "a blob the manifest names was deleted meanwhile: push it again")
		case errors.Is(err, steaderr.ErrChildrenFixed):
			// Pushed as a plain blob (or through /v1) before.
			return errorf(codeManifestInvalid, "the manifest's bytes are stored already, without references to what it names: delete that blob from every repository and let it be collected, or push a manifest that differs")
		}
		return err
	}
	desc := ocispec.Descriptor{MediaType: mt, Size: int64(len(body)), ArtifactType: doc.artifactType(), Annotations: doc.Annotations}
	l := link{Descriptor: desc, Pushed: g.opts.Now().UTC()}
	ann := l.encode()
	// The put's pin keeps the manifest until the first ref names it.
	if err := g.linkManifest(ctx, rt.name, key, l); err != nil {
		return err
	}
	h := w.Header()
	for _, tag := range tags {
		if g.opts.Retention.immutable(rt.name, tag) {
			// Create-only: a tag set meanwhile is judged as one found.
			_, err := g.st.Refs.Set(ctx, tagRef(rt.name, tag), key, ref.SetOptions{Annotation: ann, IfAbsent: true})
			if errors.Is(err, steaderr.ErrConflict) {
				err = g.sameTag(ctx, rt.name, tag, key)
			}
			if err != nil {
				return err
			}
		} else if _, err := g.st.Refs.Set(ctx, tagRef(rt.name, tag), key, ref.SetOptions{Annotation: ann}); err != nil {
			return err
		}
		if !want.IsZero() {
			h.Add("OCI-Tag", tag)
		}
	}
	if doc.Subject != nil {
		if _, err := g.st.Refs.Set(ctx, referrerRef(rt.name, subject, key), key, ref.SetOptions{Annotation: ann}); err != nil {
			return err
		}
		h.Set("OCI-Subject", subject.String())
	}
	// The manifest keeps its blobs now: their pending keeps go, so they
	// go with the manifest rather than a PendingTTL later.
	for _, k := range children {
		if err := g.st.Refs.Delete(ctx, pendingRef(rt.name, k), 0); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
			return err
		}
	}
	if err := g.st.NotePush(ctx, repoPrefix(rt.name), key, g.opts.Now()); err != nil {
		return err
	}
	created(w, "/v2/"+rt.name+"/manifests/"+key.String(), key)
	return nil
}

// holds reports whether repo holds d, stored, and its size: as a manifest
// when manifest is set (an index's children), else as a blob or a
// manifest.
func (g *Registry) holds(r *http.Request, repo string, d blob.Key, manifest bool) (int64, bool, error) {
	var ok bool
	var err error
	if manifest {
		_, ok, err = g.linked(r.Context(), manifestRef(repo, d))
	} else {
		ok, err = g.inRepo(r, repo, d)
	}
	if err != nil || !ok {
		return 0, false, err
	}
	info, err := g.st.Blobs.Stat(r.Context(), d)
	if errors.Is(err, steaderr.ErrNotFound) {
		return 0, false, nil
	}
	return info.Size, err == nil, err
}

// deleteManifest answers DELETE of a manifest: by tag, the tag goes; by
// digest, the manifest's link, every tag naming it and its place among
// its subject's referrers go. What it alone kept is collected later.
func (g *Registry) deleteManifest(w http.ResponseWriter, r *http.Request, rt route) error {
	ctx := r.Context()
	if tagRE.MatchString(rt.item) {
		if g.opts.Retention.immutable(rt.name, rt.item) {
			return errorf(codeDenied, "tag %s of repository %s is immutable", rt.item, rt.name)
		}
		err := g.st.Refs.Delete(ctx, tagRef(rt.name, rt.item), 0)
		if errors.Is(err, steaderr.ErrNotFound) {
			return errorf(codeManifestUnknown, "tag %s is not in repository %s", rt.item, rt.name)
		}
		if err != nil {
			return err
		}
		accepted(w)
		return nil
	}
	d, e := parseDigest(rt.item)
	if e != nil {
		return e
	}
	rf, ok, err := g.linked(ctx, manifestRef(rt.name, d))
	if err != nil {
		return err
	}
	if !ok {
		return errorf(codeManifestUnknown, "manifest %s is not in repository %s", d, rt.name)
	}
	if err := g.removeManifest(ctx, rt.name, rf.Key); err != nil {
		return err
	}
	accepted(w)
	return nil
}

// removeManifest unlinks the manifest d from repo: its tags and its place
// among its subject's referrers first, so a failure leaves it linked and
// the removal can be retried, then its link.
func (g *Registry) removeManifest(ctx context.Context, repo string, d blob.Key) error {
	if g.opts.Retention.rule(repo) != nil {
		for t, err := range g.st.Refs.All(ctx, tagPrefix(repo)) {
			if err != nil {
				return err
			}
			if tag := strings.TrimPrefix(t.Name, tagPrefix(repo)); t.Key == d && g.opts.Retention.immutable(repo, tag) {
				return errorf(codeDenied, "manifest %s is tagged %s, an immutable tag of repository %s", d, tag, repo)
			}
		}
	}
	for t, err := range g.st.Refs.All(ctx, tagPrefix(repo)) {
		if err != nil {
			return err
		}
		if t.Key == d {
			if err := g.st.Refs.Delete(ctx, t.Name, t.Version); err != nil && !errors.Is(err, steaderr.ErrNotFound) && !errors.Is(err, steaderr.ErrConflict) {
				return err
			}
		}
	}
	if subject, ok, err := g.subjectOf(ctx, d); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
		return err
	} else if ok {
		if err := g.st.Refs.Delete(ctx, referrerRef(repo, subject, d), 0); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
			return err
		}
	}
	if err := g.st.Refs.Delete(ctx, manifestRef(repo, d), 0); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
		return err
	}
	g.pulls.forget(manifestRef(repo, d))
	return nil
}

// sameTag checks that the immutable tag of repo names key: ErrNotFound
// when there is no such tag, DENIED when it names another manifest.
func (g *Registry) sameTag(ctx context.Context, repo, tag string, key blob.Key) error {
	rf, err := g.st.Refs.Get(ctx, tagRef(repo, tag))
	if err != nil {
		return err
	}
	if rf.Key != key {
		return errorf(codeDenied, "tag %s of repository %s is immutable: it names %s", tag, repo, rf.Key)
	}
	return nil
}

// subjectOf reads the subject of the stored manifest k.
func (g *Registry) subjectOf(ctx context.Context, k blob.Key) (blob.Key, bool, error) {
	doc, err := g.readDoc(ctx, k)
	if err != nil || doc.Subject == nil {
		return blob.Key{}, false, err
	}
	s, e := parseDigest(string(doc.Subject.Digest))
	return s, e == nil, nil
}

func (g *Registry) readDoc(ctx context.Context, k blob.Key) (manifestDoc, error) {
	var doc manifestDoc
	rd, err := g.st.Blobs.Get(ctx, k)
	if err != nil {
		return doc, err
	}
	defer rd.Close()
	body, err := io.ReadAll(io.LimitReader(rd, MaxManifestSize+1))
	if err != nil {
		return doc, err
	}
	_ = json.Unmarshal(body, &doc) // stored only once parsed
	return doc, nil
}

func accepted(w http.ResponseWriter) {
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}

// maxTagParams bounds the tags one push by digest may set.
const maxTagParams = 100

// maxTags bounds one page of a tag list.
const maxTags = 10000

// listTags answers GET /v2/<name>/tags/list with n and last: tags in
// lexical order, at most n (at most maxTags) after last, and a Link to
// the next page when there may be one.
func (g *Registry) listTags(w http.ResponseWriter, r *http.Request, rt route) error {
	q := r.URL.Query()
	n := maxTags
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return errorf(codeUnsupported, "n %.40q: want a count from 0", s).withStatus(http.StatusBadRequest)
		}
		n = min(v, maxTags)
	}
	last := q.Get("last")
	if last != "" && !tagRE.MatchString(last) {
		return errorf(codeUnsupported, "last %.80q is not a tag", last).withStatus(http.StatusBadRequest)
	}
	tags := []string{}
	more := false
	if n > 0 {
		after := ""
		if last != "" {
			after = tagRef(rt.name, last)
		}
		page, err := g.st.Refs.List(r.Context(), tagPrefix(rt.name), after, n+1)
		if err != nil {
			return err
		}
		more = len(page) > n
		for _, t := range page[:min(n, len(page))] {
			tags = append(tags, strings.TrimPrefix(t.Name, tagPrefix(rt.name)))
		}
	}
	if len(tags) == 0 && last == "" {
		exists, err := g.repoExists(r, rt.name)
		if err != nil {
			return err
		}
		if !exists {
			return errorf(codeNameUnknown, "repository %s is not known", rt.name)
		}
	}
	if more {
		next := url.Values{"n": {strconv.Itoa(n)}, "last": {tags[len(tags)-1]}}
		w.Header().Set("Link", fmt.Sprintf(`</v2/%s/tags/list?%s>; rel="next"`, rt.name, next.Encode()))
	}
	writeJSON(w, http.StatusOK, "application/json", distspec.TagList{Name: rt.name, Tags: tags})
	return nil
}

// repoExists reports whether any ref of repo is live.
func (g *Registry) repoExists(r *http.Request, repo string) (bool, error) {
	page, err := g.st.Refs.List(r.Context(), repoPrefix(repo), "", 1)
	return len(page) > 0, err
}

// maxReferrers bounds a referrers list.
const maxReferrers = 10000

// listReferrers answers GET /v2/<name>/referrers/<digest>: an index of
// the manifests whose subject is digest, filtered by artifactType.
func (g *Registry) listReferrers(w http.ResponseWriter, r *http.Request, rt route) error {
	subject, e := parseDigest(rt.item)
	if e != nil {
		return e
	}
	filter := r.URL.Query().Get("artifactType")
	manifests := []ocispec.Descriptor{}
	n := 0
	for rf, err := range g.st.Refs.All(r.Context(), referrerPrefix(rt.name, subject)) {
		if err != nil {
			return err
		}
		if n++; n > maxReferrers {
			break
		}
		l := decodeLink(rf)
		if filter != "" && l.Descriptor.ArtifactType != filter {
			continue
		}
		if l.Trimmed {
			doc, err := g.readDoc(r.Context(), rf.Key)
			if err != nil && !errors.Is(err, steaderr.ErrNotFound) {
				return err
			}
			l.Descriptor.Annotations = doc.Annotations
		}
		manifests = append(manifests, l.Descriptor)
	}
	if filter != "" {
		w.Header().Set("OCI-Filters-Applied", "artifactType")
	}
	writeJSON(w, http.StatusOK, ocispec.MediaTypeImageIndex, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: manifests,
	})
	return nil
}

func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
