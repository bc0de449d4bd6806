package buildcache_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGradleCache speaks Gradle's HTTP build cache protocol as Gradle
// does (PUT with Expect: 100-continue and its artifact media type, GET
// with its Accept, preemptive Basic credentials) with the server's
// users: a runner stores and replaces, a reader reads and may not write,
// a wrong password is 401 with a Basic challenge, a key not stored 404,
// an entry over the size limit 413 (which Gradle takes as not cached),
// hostile keys 404.
func TestGradleCache(t *testing.T) {
	t.Parallel()
	addr := serveCacheUsers(t)
	const mediaType = "application/vnd.gradle.build-cache-artifact.v2"
	key := "5c1e3f8f0a2b4d6e8f00112233445566"
	do := func(method, path, user, pass string, body []byte) (int, http.Header, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, rd)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		req.Header.Set("X-Gradle-Version", "8.10")
		if method == http.MethodPut {
			req.Header.Set("Content-Type", mediaType)
			req.Header.Set("Expect", "100-continue")
		} else {
			req.Header.Set("Accept", mediaType+", */*")
		}
		resp, err := (&http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	first, second := []byte("task outputs, zipped"), []byte("task outputs, built again")
	for _, c := range []struct {
		method, key, user, pass string
		body                    []byte
		want                    int
		wantBody                []byte
	}{
		{"GET", key, "runner", "runner-pw", nil, 404, nil},
		{"PUT", key, "reader", "reader-pw", first, 403, nil},
		{"PUT", key, "runner", "runner-pw", first, 200, nil},
		{"GET", key, "reader", "reader-pw", nil, 200, first},
		{"PUT", key, "runner", "runner-pw", second, 200, nil},
		{"GET", key, "reader", "reader-pw", nil, 200, second},
		{"HEAD", key, "reader", "reader-pw", nil, 200, nil},
		{"GET", key, "reader", "wrong", nil, 401, nil},
		{"GET", key, "", "", nil, 401, nil},
		{"PUT", "big", "runner", "runner-pw", bytes.Repeat([]byte("x"), 1<<20+1), 413, nil},
		{"GET", "big", "runner", "runner-pw", nil, 404, nil},
		{"GET", "..", "runner", "runner-pw", nil, 404, nil},
		{"GET", "a/b", "runner", "runner-pw", nil, 404, nil},
		{"GET", "", "runner", "runner-pw", nil, 404, nil},
		{"GET", strings.Repeat("k", 201), "runner", "runner-pw", nil, 404, nil},
		{"DELETE", key, "runner", "runner-pw", nil, 405, nil},
	} {
		status, h, body := do(c.method, "/gradle/"+c.key, c.user, c.pass, c.body)
		if status != c.want || (c.wantBody != nil && !bytes.Equal(body, c.wantBody)) {
			t.Errorf("%s %.40s as %s = %d %q; want %d %q", c.method, c.key, c.user, status, body, c.want, c.wantBody)
		}
		if c.want == 401 && !strings.Contains(strings.Join(h.Values("WWW-Authenticate"), " "), "Basic") {
			t.Errorf("%s as %q: challenges %v; want Basic", c.method, c.user, h.Values("WWW-Authenticate"))
		}
	}
}

// TestGradleEntryExpires keeps a Gradle entry by an expiring ref,
// renewed on read, gone once nobody reads it for the TTL.
func TestGradleEntryExpires(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	if status, body := c.do("PUT", "/gradle/abc123", []byte("outputs")); status != 200 {
		t.Fatalf("PUT = %d %s", status, body)
	}
	rf, err := c.st.Refs.Get(t.Context(), "cache/gradle/abc123")
	if err != nil || rf.Expiry.IsZero() {
		t.Fatalf("entry ref = %+v, %v; want an expiring ref", rf, err)
	}
	c.clk.Add(40 * time.Minute)
	if status, _ := c.do("GET", "/gradle/abc123", nil); status != 200 {
		t.Fatalf("GET = %d", status)
	}
	c.clk.Add(40 * time.Minute)
	if status, _ := c.do("GET", "/gradle/abc123", nil); status != 200 {
		t.Fatalf("GET after a renewal = %d", status)
	}
	c.clk.Add(61 * time.Minute)
	c.sweep()
	if status, _ := c.do("GET", "/gradle/abc123", nil); status != 404 {
		t.Fatalf("GET after the TTL unread = %d; want 404", status)
	}
}
