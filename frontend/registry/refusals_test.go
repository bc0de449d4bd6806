package registry_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUploadRefusals checks that a PATCH refused for its size or for a
// Content-Range its body does not match leaves the upload as it was, and
// that a PUT whose body makes the upload hash to another digest ends the
// upload, so that its retry starts over rather than append the body twice.
func TestUploadRefusals(t *testing.T) {
	c := newClient(t, "") // MaxBlobSize 1 MiB
	begin := func() string {
		t.Helper()
		resp, _ := c.do("POST", "/v2/team/app/blobs/uploads/", nil, nil)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST = %d", resp.StatusCode)
		}
		return resp.Header.Get("Location")
	}
	wantRange := func(loc, want string) {
		t.Helper()
		resp, _ := c.do("GET", loc, nil, nil)
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Range") != want {
			t.Fatalf("status = %d Range %q, want 204 Range %q", resp.StatusCode, resp.Header.Get("Range"), want)
		}
	}

	loc := begin()
	if resp, body := c.do("PATCH", loc, nil, randomBytes(7, 3<<20)); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("PATCH of 3 MiB over a limit of 1 MiB = %d %s, want 413", resp.StatusCode, body)
	}
	wantRange(loc, "0-0")

	for _, tc := range []struct{ name, rng, body string }{
		{"longer than its Content-Range", "0-3", "0123456789"},
		{"shorter than its Content-Range", "0-9", "0123"},
	} {
		loc := begin()
		// A body of unknown length (chunked), so that only the range bounds it.
		req, _ := http.NewRequest("PATCH", c.base+loc, struct{ io.Reader }{strings.NewReader(tc.body)})
		req.Header.Set("Content-Range", tc.rng)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a PATCH %s = %d, want 400 BLOB_UPLOAD_INVALID", tc.name, resp.StatusCode)
		}
		wantRange(loc, "0-0")
	}

	loc = begin()
	c.do("PATCH", loc, nil, []byte("hello "))
	if resp, body := c.do("PUT", loc+"?digest=sha256:"+fmt.Sprintf("%064x", 1), nil, []byte("world")); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "DIGEST_INVALID") {
		t.Fatalf("PUT with a body and a wrong digest = %d %s, want 400 DIGEST_INVALID", resp.StatusCode, body)
	}
	if resp, body := c.do("GET", loc, nil, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "BLOB_UPLOAD_UNKNOWN") {
		t.Fatalf("after a PUT with a body refused DIGEST_INVALID the upload is %d %s, want 404 BLOB_UPLOAD_UNKNOWN", resp.StatusCode, body)
	}

	// The same for an upload that took no chunk: its PUT's body is the
	// whole blob, and the upload ends with the PUT, refused or not.
	loc = begin()
	if resp, body := c.do("PUT", loc+"?digest=sha256:"+fmt.Sprintf("%064x", 1), nil, []byte("whole")); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "DIGEST_INVALID") {
		t.Fatalf("a whole-blob PUT with a wrong digest = %d %s, want 400 DIGEST_INVALID", resp.StatusCode, body)
	}
	if resp, body := c.do("GET", loc, nil, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "BLOB_UPLOAD_UNKNOWN") {
		t.Fatalf("after a whole-blob PUT refused DIGEST_INVALID the upload is %d %s, want 404 BLOB_UPLOAD_UNKNOWN", resp.StatusCode, body)
	}
}
