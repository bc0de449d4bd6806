package buildcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/steadkit/stead/server/access"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The prefixes of the caches whose keys are the client's own, not content
// digests: Turborepo's remote cache API, Nx's self-hosted cache API (its
// base URL for the client is <server>/nx, as /v1 is stead's own API), and
// Gradle's HTTP build cache (its url is <server>/gradle/).
const (
	TurboPrefix  = "/v8/"
	NxPrefix     = "/nx/"
	GradlePrefix = "/gradle/"
)

// validKey is the keys (and Turborepo namespaces) accepted: what the
// clients send (hex or decimal hashes), nothing a ref name or URL would
// change.
var validKey = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$`)

// meta is what a keyed entry's ref annotation holds: Turborepo's
// x-artifact-tag (the artifact's signature) and x-artifact-duration.
type meta struct {
	Tag      string `json:"tag,omitempty"`
	Duration int64  `json:"duration,omitempty"`
}

// putKeyed stores r as the entry name (a ref expiring after TTL), with m
// as its annotation; only when no entry is live under name if ifAbsent
// (else ErrConflict).
func (c *Cache) putKeyed(r *http.Request, name string, m meta, ifAbsent bool) error {
	if r.ContentLength > c.opts.MaxBlobSize {
		return fmt.Errorf("%w: %d bytes", steaderr.ErrTooLarge, r.ContentLength)
	}
	var ann []byte
	if m != (meta{}) {
		ann, _ = json.Marshal(m)
		if len(ann) > ref.MaxAnnotation {
			return fmt.Errorf("%w: x-artifact-tag of %d bytes", steaderr.ErrInvalidArgument, len(m.Tag))
		}
	}
	key, err := c.st.Blobs.Put(r.Context(), &capped{r: r.Body, max: c.opts.MaxBlobSize})
	if err != nil {
		return err
	}
	_, err = c.st.Refs.Set(r.Context(), name, key, ref.SetOptions{TTL: c.opts.TTL, Annotation: ann, IfAbsent: ifAbsent})
	return err
}

// getKeyed serves the entry name, renewing it, and returns its meta.
func (c *Cache) getKeyed(w http.ResponseWriter, r *http.Request, name string, header func(meta)) error {
	rf, err := c.touch(r.Context(), name)
	if err != nil {
		return err
	}
	rd, err := c.st.Blobs.Get(r.Context(), rf.Key)
	if err != nil {
		return err
	}
	defer rd.Close()
	var m meta
	if len(rf.Annotation) > 0 {
		_ = json.Unmarshal(rf.Annotation, &m)
	}
	header(m)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(rd.Size(), 10))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, rd)
	}
	return nil
}

// Nx serves Nx's self-hosted remote cache API under NxPrefix:
// PUT/GET <NxPrefix>v1/cache/{hash}. An entry is not replaced while it
// is live (409, as the API says); each is kept by its ref
// cache/nx/<hash>, renewed on read.
func (c *Cache) Nx() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorize(w, r) {
			return
		}
		hash, ok := strings.CutPrefix(r.URL.Path, NxPrefix+"v1/cache/")
		if !ok || !validKey.MatchString(hash) {
			http.Error(w, "want "+NxPrefix+"v1/cache/{hash}", http.StatusNotFound)
			return
		}
		name := "cache/nx/" + hash
		var err error
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			err = c.getKeyed(w, r, name, func(meta) {})
		case http.MethodPut:
			if err = c.putKeyed(r, name, meta{}, true); err == nil {
				w.WriteHeader(http.StatusOK)
			}
		default:
			w.Header().Set("Allow", "GET, HEAD, PUT")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if errors.Is(err, steaderr.ErrConflict) {
			http.Error(w, "the cache holds this hash already", http.StatusConflict)
			return
		}
		if err != nil {
			c.fail(w, r, err)
		}
	})
}

// Gradle serves Gradle's HTTP build cache under GradlePrefix: GET, HEAD
// and PUT <GradlePrefix><key>, 404 for a key not stored, 413 for an
// entry over MaxBlobSize (which Gradle takes as "not cached"). A PUT
// replaces the entry; each is kept by its ref cache/gradle/<key>,
// renewed on read. Gradle sends the server's users' credentials as
// Basic (its credentials block), or the token as the password of the
// user token.
func (c *Cache) Gradle() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorize(w, r) {
			return
		}
		key := strings.TrimPrefix(r.URL.Path, GradlePrefix)
		if !validKey.MatchString(key) {
			http.Error(w, "want "+GradlePrefix+"<key>: 1 to 200 letters, digits, '.', '_' or '-'", http.StatusNotFound)
			return
		}
		name := "cache/gradle/" + key
		var err error
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			err = c.getKeyed(w, r, name, func(meta) {})
		case http.MethodPut:
			if err = c.putKeyed(r, name, meta{}, false); err == nil {
				w.WriteHeader(http.StatusOK)
			}
		default:
			w.Header().Set("Allow", "GET, HEAD, PUT")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if err != nil {
			c.fail(w, r, err)
		}
	})
}

// Turbo serves Turborepo's remote cache API under TurboPrefix:
// GET/HEAD/PUT v8/artifacts/{hash}, POST v8/artifacts (which of some
// hashes are stored), GET v8/artifacts/status, and POST
// v8/artifacts/events (accepted, not kept). Only the PUT needs cache
// write: the query is a read, and the events, telemetry a reading client
// sends after its hits, change nothing. The teamId or slug query
// parameter is a namespace of its own; x-artifact-tag and
// x-artifact-duration are kept as the entry's annotation and answered
// with it. Each entry is kept by its ref cache/turbo/<namespace>/<hash>,
// renewed on read.
func (c *Cache) Turbo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, _ := strings.CutPrefix(r.URL.Path, TurboPrefix+"artifacts")
		action := access.Read
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !(r.Method == http.MethodPost && (rest == "" || rest == "/events")) {
			action = access.Write
		}
		if !authorizeAction(w, r, action) {
			return
		}
		ns, ok := turboNamespace(r)
		if !ok {
			turboError(w, http.StatusBadRequest, "bad_request", "teamId and slug are 1 to 200 letters, digits, '.', '_' or '-'")
			return
		}
		switch {
		case rest == "" && r.Method == http.MethodPost:
			c.turboQuery(w, r, ns)
			return
		case rest == "/status" && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, map[string]string{"status": "enabled"})
			return
		case rest == "/events" && r.Method == http.MethodPost:
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
			w.WriteHeader(http.StatusOK)
			return
		}
		hash, ok := strings.CutPrefix(rest, "/")
		if !ok || !validKey.MatchString(hash) {
			turboError(w, http.StatusNotFound, "not_found", "want "+TurboPrefix+"artifacts/{hash}")
			return
		}
		name := ns + hash
		var err error
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			err = c.getKeyed(w, r, name, func(m meta) {
				if m.Tag != "" {
					w.Header().Set("x-artifact-tag", m.Tag)
				}
				if m.Duration != 0 {
					w.Header().Set("x-artifact-duration", strconv.FormatInt(m.Duration, 10))
				}
			})
		case http.MethodPut:
			m := meta{Tag: r.Header.Get("x-artifact-tag")}
			if d := r.Header.Get("x-artifact-duration"); d != "" {
				if m.Duration, err = strconv.ParseInt(d, 10, 64); err != nil || m.Duration < 0 {
					turboError(w, http.StatusBadRequest, "bad_request", "x-artifact-duration is not a count of milliseconds")
					return
				}
			}
			if err = c.putKeyed(r, name, m, false); err == nil {
				writeJSON(w, http.StatusAccepted, map[string][]string{"urls": {r.URL.Path}})
			}
		default:
			w.Header().Set("Allow", "GET, HEAD, PUT")
			turboError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
			return
		}
		if err != nil {
			c.fail(w, r, err)
		}
	})
}

// turboNamespace returns the ref prefix of the request's teamId or slug.
func turboNamespace(r *http.Request) (string, bool) {
	q := r.URL.Query()
	for _, p := range []string{"teamId", "slug"} {
		if v := q.Get(p); v != "" {
			return "cache/turbo/" + p + ":" + v + "/", validKey.MatchString(v)
		}
	}
	return "cache/turbo/-/", true
}

// turboQuery answers POST v8/artifacts {"hashes": [...]}: each hash
// stored with its size, duration and tag, each other with an error.
func (c *Cache) turboQuery(w http.ResponseWriter, r *http.Request, ns string) {
	var req struct {
		Hashes []string `json:"hashes"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || len(req.Hashes) > 10000 {
		turboError(w, http.StatusBadRequest, "bad_request", `want {"hashes": [...]}, at most 10000, in at most 1 MiB`)
		return
	}
	type found struct {
		Size           int64  `json:"size"`
		TaskDurationMs int64  `json:"taskDurationMs"`
		Tag            string `json:"tag,omitempty"`
	}
	out := map[string]any{}
	for _, h := range req.Hashes {
		missing := map[string]any{"error": map[string]string{"message": "artifact not found"}}
		if !validKey.MatchString(h) {
			out[h] = missing
			continue
		}
		rf, err := c.touch(r.Context(), ns+h)
		if err == nil {
			var info, stErr = c.st.Blobs.Stat(r.Context(), rf.Key)
			if err = stErr; err == nil {
				var m meta
				_ = json.Unmarshal(rf.Annotation, &m)
				out[h] = found{Size: info.Size, TaskDurationMs: m.Duration, Tag: m.Tag}
				continue
			}
		}
		if !errors.Is(err, steaderr.ErrNotFound) {
			c.fail(w, r, err)
			return
		}
		out[h] = missing
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func turboError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]map[string]string{"error": {"code": code, "message": message}})
}
