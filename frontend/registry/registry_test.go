package registry_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/distribution-spec/specs-go/v1"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

// client talks to a registry served over a memory store.
type client struct {
	t     *testing.T
	base  string
	st    *stead.Store
	token string
}

func newClient(t *testing.T, token string) *client {
	t.Helper()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{MaxBlobSize: 1 << 20})
	addr := fronttest.Serve(t, st, server.Options{Token: token, Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	t.Cleanup(func() {
		st.Close()
	})
	return &client{t: t, base: "http://" + addr, st: st, token: token}
}

func (c *client) do(method, path string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body == nil {
		req.Body = nil
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if _, set := hdr["Authorization"]; c.token != "" && !set {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// wantError checks an answer is status with the spec's error body
// carrying code.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	var er specs.ErrorResponse
	if resp.StatusCode != status {
		t.Fatalf("%s = %d %s; want %d %s", what, resp.StatusCode, body, status, code)
	}
	if err := json.Unmarshal(body, &er); err != nil || len(er.Errors) != 1 || er.Errors[0].Code != code || er.Errors[0].Message == "" {
		t.Fatalf("%s body = %s (%v); want one error with code %s and a message", what, body, err, code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s Content-Type = %q", what, ct)
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pushBlob pushes b to repo in one POST.
func (c *client) pushBlob(repo string, b []byte) string {
	c.t.Helper()
	d := digestOf(b)
	resp, body := c.do("POST", "/v2/"+repo+"/blobs/uploads/?digest="+d, nil, b)
	if resp.StatusCode != http.StatusCreated {
		c.t.Fatalf("push blob = %d %s", resp.StatusCode, body)
	}
	return d
}

// refCount counts the refs the registry keeps.
func (c *client) refCount() int {
	c.t.Helper()
	page, err := c.st.Refs.List(context.Background(), "oci/", "", 10000)
	if err != nil {
		c.t.Fatal(err)
	}
	return len(page)
}

func TestBase(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	resp, body := c.do("GET", "/v2/", nil, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Docker-Distribution-API-Version") != "registry/2.0" || string(body) != "{}" {
		t.Fatalf("GET /v2/ = %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// TestBaseDatabaseDown: the base endpoint, which clients probe before a
// push, says the store cannot serve while its database is away (503 with
// Retry-After), and answers 200 again once it is back.
func TestBaseDatabaseDown(t *testing.T) {
	t.Parallel()
	storeURL, p := pgtest.New(t).Proxied(t)
	st, err := stead.Open(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{Logger: slog.New(slog.DiscardHandler)})
	addr := fronttest.Serve(t, st, server.Options{Logger: slog.New(slog.DiscardHandler), Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	t.Cleanup(func() {
		st.Close()
	})
	c := &client{t: t, base: "http://" + addr, st: st}
	if resp, body := c.do("GET", "/v2/", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("GET /v2/ with the database up = %d %s", resp.StatusCode, body)
	}
	p.CutOff()
	for _, method := range []string{"GET", "HEAD"} {
		resp, body := c.do(method, "/v2/", nil, nil)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s /v2/ with the database down = %d %v %s, want 503 with Retry-After", method, resp.StatusCode, resp.Header, body)
		}
		if method == "GET" {
			wantError(t, "GET /v2/ with the database down", resp, body, 503, "UNAVAILABLE")
		}
	}
	p.Restore()
	testkit.Until(t, "GET /v2/ to answer 200 once the database is back", func() bool {
		resp, _ := c.do("GET", "/v2/", nil, nil)
		return resp.StatusCode == 200
	})
}

func TestAuth(t *testing.T) {
	t.Parallel()
	c := newClient(t, "s3cret")
	for _, auth := range []string{"", "Bearer wrong", "Basic czNjcmV0", "Bearer"} {
		resp, body := c.do("GET", "/v2/", map[string]string{"Authorization": auth}, nil)
		wantError(t, "GET /v2/ with "+auth, resp, body, http.StatusUnauthorized, "UNAUTHORIZED")
		if ch := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer realm=") {
			t.Fatalf("challenge = %q", ch)
		}
	}
	if resp, body := c.do("GET", "/v2/", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("GET /v2/ with the token = %d %s", resp.StatusCode, body)
	}
}

func TestHostileNames(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	for _, name := range []string{"UPPER", "a__-b", "-a", "a-", "a.", "a/_tags", "_x", "a%00b", "a%20b", strings.Repeat("a", 256), "a:b", "a@b"} {
		resp, body := c.do("GET", "/v2/"+name+"/tags/list", nil, nil)
		wantError(t, "tags of "+name, resp, body, http.StatusBadRequest, "NAME_INVALID")
	}
	if resp, body := c.do("GET", "/v2/"+strings.Repeat("a/", 127)+"a/tags/list", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("tags of a 255-byte name = %d %s; want 404 NAME_UNKNOWN", resp.StatusCode, body)
	}
}

func TestHostileDigests(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	for _, tc := range []struct{ d, msg string }{
		{"sha512:" + strings.Repeat("ab", 64), "sha256"},
		{"md5:" + strings.Repeat("ab", 16), "sha256"},
		{"sha256:" + strings.Repeat("AB", 32), "lowercase"},
		{"sha256:" + strings.Repeat("ab", 31), "64"},
		{"sha256:", "64"},
	} {
		for _, path := range []string{"/v2/r/blobs/" + tc.d, "/v2/r/referrers/" + tc.d, "/v2/r/blobs/uploads/?digest=" + tc.d} {
			method := "GET"
			if strings.Contains(path, "uploads") {
				method = "POST"
			}
			resp, body := c.do(method, path, nil, []byte("x"))
			wantError(t, method+" "+path, resp, body, http.StatusBadRequest, "DIGEST_INVALID")
			if !strings.Contains(string(body), tc.msg) {
				t.Fatalf("%s: %s; want it to say %q", path, body, tc.msg)
			}
		}
	}
	// A blob whose content is not its digest is not stored.
	resp, body := c.do("POST", "/v2/r/blobs/uploads/?digest="+digestOf([]byte("other")), nil, []byte("content"))
	wantError(t, "push of mismatched content", resp, body, http.StatusBadRequest, "DIGEST_INVALID")
	if n := c.refCount(); n != 0 {
		t.Fatalf("%d refs after refused pushes", n)
	}
}

func TestChunkedUploadRanges(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	resp, body := c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Range") != "0-0" {
		t.Fatalf("start = %d %s %v", resp.StatusCode, body, resp.Header)
	}
	loc := resp.Header.Get("Location")
	resp, body = c.do("PATCH", loc, map[string]string{"Content-Range": "0-4"}, []byte("hello"))
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Range") != "0-4" {
		t.Fatalf("first chunk = %d %s %v", resp.StatusCode, body, resp.Header)
	}
	loc = resp.Header.Get("Location")
	for _, tc := range []struct {
		cr     string
		body   string
		status int
	}{
		{"0-4", "hello", http.StatusRequestedRangeNotSatisfiable}, // again
		{"6-10", "world", http.StatusRequestedRangeNotSatisfiable},
		{"5-3", "xyz", http.StatusBadRequest},
		{"abc", "x", http.StatusBadRequest},
		{"-1-3", "abcde", http.StatusBadRequest},
		{"+5-9", "abcde", http.StatusBadRequest},
		{"5-9223372036854775807", "x", http.StatusBadRequest},
		{"5-99999999999999999999", "x", http.StatusBadRequest},
		{"5-20", "short", http.StatusBadRequest}, // Content-Length disagrees
	} {
		resp, body := c.do("PATCH", loc, map[string]string{"Content-Range": tc.cr}, []byte(tc.body))
		wantError(t, "PATCH Content-Range "+tc.cr, resp, body, tc.status, "BLOB_UPLOAD_INVALID")
		if tc.status == http.StatusRequestedRangeNotSatisfiable && resp.Header.Get("Range") != "0-4" {
			t.Fatalf("416 Range = %q; want 0-4", resp.Header.Get("Range"))
		}
	}
	resp, _ = c.do("GET", loc, nil, nil)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Range") != "0-4" {
		t.Fatalf("status after refused chunks = %d %v; want the upload at 0-4", resp.StatusCode, resp.Header)
	}
	// Another repository's upload id is unknown there.
	other := strings.Replace(loc, "/v2/r/", "/v2/s/", 1)
	resp, body = c.do("GET", other, nil, nil)
	wantError(t, "upload through another repository", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
	// A wrong digest with no body keeps the upload, which then finishes;
	// one whose body was appended ends it (its retry starts over).
	resp, body = c.do("PUT", loc+"?digest="+digestOf([]byte("hello world")), nil, nil)
	wantError(t, "finish with a wrong digest", resp, body, http.StatusBadRequest, "DIGEST_INVALID")
	resp, body = c.do("PATCH", loc, map[string]string{"Content-Range": "5-9"}, []byte(" worl"))
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Range") != "0-9" {
		t.Fatalf("PATCH after a refused finish = %d %s %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = c.do("PUT", loc+"?digest="+digestOf([]byte("hello world")), nil, []byte("d"))
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Docker-Content-Digest") != digestOf([]byte("hello world")) {
		t.Fatalf("finish = %d %s", resp.StatusCode, body)
	}
	resp, _ = c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	ended := resp.Header.Get("Location")
	c.do("PATCH", ended, map[string]string{"Content-Range": "0-4"}, []byte("hullo"))
	resp, body = c.do("PUT", ended+"?digest="+digestOf([]byte("hello world")), map[string]string{"Content-Range": "5-10"}, []byte(" world"))
	wantError(t, "finish with a body and a wrong digest", resp, body, http.StatusBadRequest, "DIGEST_INVALID")
	resp, body = c.do("GET", ended, nil, nil)
	wantError(t, "an upload a wrong digest ended", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
	resp, body = c.do("GET", "/v2/r/blobs/"+digestOf([]byte("hello world")), map[string]string{"Range": "bytes=6-"}, nil)
	if resp.StatusCode != http.StatusPartialContent || string(body) != "world" {
		t.Fatalf("range read = %d %q", resp.StatusCode, body)
	}
	resp, body = c.do("GET", loc, nil, nil)
	wantError(t, "status of a finished upload", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
	// Over the blob size limit.
	resp, body = c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	big := make([]byte, 1<<20+1)
	resp, body = c.do("PATCH", resp.Header.Get("Location"), nil, big)
	wantError(t, "chunk past the size limit", resp, body, http.StatusRequestEntityTooLarge, "SIZE_INVALID")
}

func TestTagPagination(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	cfg := c.pushBlob("r", []byte("{}"))
	man := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":2},"layers":[]}`, cfg)
	for _, tag := range []string{"e", "a", "c", "b", "d"} {
		resp, body := c.do("PUT", "/v2/r/manifests/"+tag, map[string]string{"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, []byte(man))
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("put %s = %d %s", tag, resp.StatusCode, body)
		}
	}
	for _, tc := range []struct {
		query string
		want  string
		link  bool
	}{
		{"", `["a","b","c","d","e"]`, false},
		{"?n=2", `["a","b"]`, true},
		{"?n=2&last=b", `["c","d"]`, true},
		{"?n=2&last=d", `["e"]`, false},
		{"?n=0", `[]`, false},
		{"?last=e", `[]`, false},
		{"?n=100000000", `["a","b","c","d","e"]`, false},
	} {
		resp, body := c.do("GET", "/v2/r/tags/list"+tc.query, nil, nil)
		var tl specs.TagList
		if err := json.Unmarshal(body, &tl); err != nil || resp.StatusCode != 200 {
			t.Fatalf("tags%s = %d %s", tc.query, resp.StatusCode, body)
		}
		got, _ := json.Marshal(tl.Tags)
		if string(got) != tc.want || (resp.Header.Get("Link") != "") != tc.link {
			t.Fatalf("tags%s = %s, Link %q; want %s, link %v", tc.query, got, resp.Header.Get("Link"), tc.want, tc.link)
		}
	}
	for _, q := range []string{"?n=-1", "?n=99999999999999999999", "?n=abc", "?last=" + strings.Repeat("x", 200), "?last=%00"} {
		resp, body := c.do("GET", "/v2/r/tags/list"+q, nil, nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("tags%s = %d %s; want 400", q, resp.StatusCode, body)
		}
	}
	resp, body := c.do("GET", "/v2/nothing/tags/list", nil, nil)
	wantError(t, "tags of an unknown repository", resp, body, http.StatusNotFound, "NAME_UNKNOWN")
}

func TestHostileManifests(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	cfg := c.pushBlob("r", []byte("{}"))
	missing := digestOf([]byte("never pushed"))
	const oci = "application/vnd.oci.image.manifest.v1+json"
	image := func(layers string) string {
		return fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":2},"layers":[%s]}`, oci, cfg, layers)
	}
	before := c.refCount()
	for _, tc := range []struct {
		name, ct, body string
		ref            string
		status         int
		code           string
	}{
		{"not JSON", oci, `{"schemaVersion":2,`, "t", 400, "MANIFEST_INVALID"},
		{"JSON of another shape", oci, `[1,2]`, "t", 400, "MANIFEST_INVALID"},
		{"invalid UTF-8", oci, "{\"schemaVersion\":2,\"annotations\":{\"a\":\"\xff\"}}", "t", 400, "MANIFEST_INVALID"},
		{"lone surrogate", oci, `{"schemaVersion":2,"annotations":{"a":"\ud800"}}`, "t", 400, "MANIFEST_INVALID"},
		{"schema version 1", oci, `{"schemaVersion":1}`, "t", 400, "MANIFEST_INVALID"},
		{"no config", oci, `{"schemaVersion":2,"mediaType":"` + oci + `","layers":[]}`, "t", 400, "MANIFEST_INVALID"},
		{"media types disagree", "application/vnd.oci.image.index.v1+json", image(""), "t", 400, "MANIFEST_INVALID"},
		{"unknown media type", "application/x-whatever", `{"schemaVersion":2}`, "t", 415, "MANIFEST_INVALID"},
		{"no media type", "", `{"schemaVersion":2,"config":{}}`, "t", 400, "MANIFEST_INVALID"},
		{"missing layer", oci, image(fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":3}`, missing)), "t", 400, "MANIFEST_BLOB_UNKNOWN"},
		{"sha512 layer", oci, image(`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha512:` + strings.Repeat("ab", 64) + `","size":3}`), "t", 400, "MANIFEST_INVALID"},
		{"wrong size", oci, image(fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":999}`, cfg)), "t", 400, "MANIFEST_INVALID"},
		{"negative size", oci, image(fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":-1}`, cfg)), "t", 400, "MANIFEST_INVALID"},
		{"wrong digest", oci, image(""), digestOf([]byte("x")), 400, "DIGEST_INVALID"},
		{"bad reference", oci, image(""), "-tag", 400, "MANIFEST_INVALID"},
		{"too large", oci, `{"schemaVersion":2,"annotations":{"a":"` + strings.Repeat("x", registry.MaxManifestSize) + `"}}`, "t", 413, "SIZE_INVALID"},
	} {
		resp, body := c.do("PUT", "/v2/r/manifests/"+tc.ref, map[string]string{"Content-Type": tc.ct}, []byte(tc.body))
		wantError(t, tc.name, resp, body, tc.status, tc.code)
	}
	if n := c.refCount(); n != before {
		t.Fatalf("refused manifests left %d refs, %d before", n, before)
	}
	// A manifest in another repository is not a child here.
	other := c.pushBlob("s", []byte("layer"))
	resp, body := c.do("PUT", "/v2/r/manifests/t", map[string]string{"Content-Type": oci}, []byte(image(fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":%q,"size":5}`, other))))
	wantError(t, "layer of another repository", resp, body, 400, "MANIFEST_BLOB_UNKNOWN")
	// Manifest bytes pushed as a plain blob first are stored without
	// references, which a blob keeps for good.
	asBlob := image("")
	c.pushBlob("r", []byte(asBlob))
	resp, body = c.do("PUT", "/v2/r/manifests/t", map[string]string{"Content-Type": oci}, []byte(asBlob))
	wantError(t, "manifest stored as a blob before", resp, body, 400, "MANIFEST_INVALID")
	resp, body = c.do("GET", "/v2/r/manifests/"+missing, nil, nil)
	wantError(t, "unknown manifest", resp, body, 404, "MANIFEST_UNKNOWN")
	resp, body = c.do("DELETE", "/v2/r/manifests/nosuchtag", nil, nil)
	wantError(t, "delete of an unknown tag", resp, body, 404, "MANIFEST_UNKNOWN")
	resp, body = c.do("DELETE", "/v2/r/blobs/"+missing, nil, nil)
	wantError(t, "delete of an unknown blob", resp, body, 404, "BLOB_UNKNOWN")
	resp, body = c.do("POST", "/v2/r/tags/list", nil, nil)
	wantError(t, "POST of a tag list", resp, body, 405, "UNSUPPORTED")
}

// TestBlobRanges: a blob's Range answers are /v1's: a zero-length suffix
// is unsatisfiable (416), HEAD answers a range's headers (206), and more
// than 16 ranges are ignored (the whole blob, 200).
func TestBlobRanges(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	value := []byte(strings.Repeat("0123456789", 100))
	d := c.pushBlob("r", value)
	path := "/v2/r/blobs/" + d
	resp, body := c.do("GET", path, map[string]string{"Range": "bytes=-0"}, nil)
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || resp.Header.Get("Content-Range") != "bytes */1000" {
		t.Fatalf("GET bytes=-0 = %d %v %s, want 416 with Content-Range bytes */1000", resp.StatusCode, resp.Header, body)
	}
	resp, body = c.do("HEAD", path, map[string]string{"Range": "bytes=10-19"}, nil)
	if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != "bytes 10-19/1000" || resp.Header.Get("Content-Length") != "10" || len(body) != 0 {
		t.Fatalf("HEAD bytes=10-19 = %d %v %q, want 206 with Content-Range bytes 10-19/1000", resp.StatusCode, resp.Header, body)
	}
	resp, body = c.do("GET", path, map[string]string{"Range": "bytes=10-19"}, nil)
	if resp.StatusCode != http.StatusPartialContent || string(body) != "0123456789" {
		t.Fatalf("GET bytes=10-19 = %d %q", resp.StatusCode, body)
	}
	many := make([]string, 401)
	for i := range many {
		many[i] = fmt.Sprintf("%d-%d", 2*i, 2*i+1)
	}
	resp, body = c.do("GET", path, map[string]string{"Range": "bytes=" + strings.Join(many, ",")}, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, value) {
		t.Fatalf("GET of 401 ranges = %d, %d bytes; want 200 with the whole blob", resp.StatusCode, len(body))
	}
}

// TestManifestRoundTrip pushes a manifest by tag, reads it back with its
// media type and digest, and deletes it by digest, which takes its tag.
func TestManifestRoundTrip(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	cfg := c.pushBlob("r", []byte("{}"))
	layer := c.pushBlob("r", []byte("layer bytes"))
	const mt = "application/vnd.docker.distribution.manifest.v2+json"
	man := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":%q,"size":2},"layers":[{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","digest":%q,"size":11}]}`, mt, cfg, layer)
	resp, body := c.do("PUT", "/v2/r/manifests/v1", map[string]string{"Content-Type": mt}, []byte(man))
	if resp.StatusCode != 201 || resp.Header.Get("Docker-Content-Digest") != digestOf([]byte(man)) {
		t.Fatalf("put = %d %s", resp.StatusCode, body)
	}
	for _, ref := range []string{"v1", digestOf([]byte(man))} {
		resp, body = c.do("GET", "/v2/r/manifests/"+ref, nil, nil)
		if resp.StatusCode != 200 || string(body) != man || resp.Header.Get("Content-Type") != mt || resp.Header.Get("Docker-Content-Digest") != digestOf([]byte(man)) {
			t.Fatalf("get %s = %d %q %v", ref, resp.StatusCode, body, resp.Header)
		}
	}
	// The put and the GETs are noted for usage's last push and pull.
	u, err := c.st.Usage(t.Context(), "oci/r/_")
	if err != nil || u.LastPush.IsZero() || u.LastPull.Before(u.LastPush) || u.Refs == 0 {
		t.Fatalf("usage after a push and pulls = %+v, %v; want a last push and a last pull after it", u, err)
	}
	resp, _ = c.do("DELETE", "/v2/r/manifests/"+digestOf([]byte(man)), nil, nil)
	if resp.StatusCode != 202 {
		t.Fatalf("delete = %d", resp.StatusCode)
	}
	resp, body = c.do("GET", "/v2/r/manifests/v1", nil, nil)
	wantError(t, "tag of a deleted manifest", resp, body, 404, "MANIFEST_UNKNOWN")
}

// TestConcurrentChunks has eight clients race to append chunks to one
// upload at the offset they last saw: each chunk either lands where it
// said or is refused with 416, and the blob is exactly the chunks that
// landed, in offset order.
func TestConcurrentChunks(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	resp, _ := c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	loc := resp.Header.Get("Location")
	const chunk, writers, each = 8, 8, 20
	var mu sync.Mutex
	landed := map[int64][]byte{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				resp, _ := c.do("GET", loc, nil, nil)
				var end int64
				fmt.Sscanf(resp.Header.Get("Range"), "0-%d", &end)
				start := end + 1
				if resp.Header.Get("Range") == "0-0" {
					mu.Lock()
					_, first := landed[0]
					mu.Unlock()
					if !first {
						start = 0
					}
				}
				data := []byte(fmt.Sprintf("w%dk%04d", w, k))[:chunk]
				resp, body := c.do("PATCH", loc, map[string]string{"Content-Range": fmt.Sprintf("%d-%d", start, start+chunk-1)}, data)
				switch resp.StatusCode {
				case http.StatusAccepted:
					mu.Lock()
					if _, dup := landed[start]; dup {
						t.Errorf("two chunks landed at %d", start)
					}
					landed[start] = data
					mu.Unlock()
				case http.StatusRequestedRangeNotSatisfiable:
				default:
					t.Errorf("PATCH at %d = %d %s", start, resp.StatusCode, body)
				}
			}
		}()
	}
	wg.Wait()
	var want []byte
	for off := int64(0); ; off += chunk {
		b, ok := landed[off]
		if !ok {
			if int(off) != len(landed)*chunk {
				t.Fatalf("chunks landed with a gap at %d", off)
			}
			break
		}
		want = append(want, b...)
	}
	resp, body := c.do("PUT", loc+"?digest="+digestOf(want), nil, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("finish = %d %s", resp.StatusCode, body)
	}
	resp, body = c.do("GET", "/v2/r/blobs/"+digestOf(want), nil, nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, want) {
		t.Fatalf("blob = %d, %d bytes; want the %d bytes that landed", resp.StatusCode, len(body), len(want))
	}
}

// TestBlobHeadLikeGet checks that a HEAD of a blob has the status and
// headers of the GET it stands for: whole,
// a range, a revalidation, a range asking for nothing, and a blob the
// repository does not hold.
func TestBlobHeadLikeGet(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	value := []byte(strings.Repeat("0123456789", 100))
	d := c.pushBlob("r", value)
	c.pushBlob("other", []byte("elsewhere"))
	for _, tc := range []struct {
		name, path string
		hdr        map[string]string
		status     int
	}{
		{"whole", "/v2/r/blobs/" + d, nil, http.StatusOK},
		{"range", "/v2/r/blobs/" + d, map[string]string{"Range": "bytes=10-19"}, http.StatusPartialContent},
		{"if-none-match", "/v2/r/blobs/" + d, map[string]string{"If-None-Match": `"` + d + `"`}, http.StatusNotModified},
		{"empty range", "/v2/r/blobs/" + d, map[string]string{"Range": "bytes=-0"}, http.StatusRequestedRangeNotSatisfiable},
		{"other repository", "/v2/other/blobs/" + d, nil, http.StatusNotFound},
	} {
		get, _ := c.do("GET", tc.path, tc.hdr, nil)
		head, body := c.do("HEAD", tc.path, tc.hdr, nil)
		if get.StatusCode != tc.status || head.StatusCode != tc.status || len(body) != 0 {
			t.Errorf("%s: GET = %d, HEAD = %d with %d bytes; want %d and no body", tc.name, get.StatusCode, head.StatusCode, len(body), tc.status)
			continue
		}
		get.Header.Del("Date")
		head.Header.Del("Date")
		if fmt.Sprint(get.Header) != fmt.Sprint(head.Header) {
			t.Errorf("%s: HEAD headers\n%v\nwant the GET's\n%v", tc.name, head.Header, get.Header)
		}
	}
}
