package buildcache_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestTurborepo(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	art := []byte("a turbo artifact tarball")
	status, _, body := c.doHeaders("PUT", "/v8/artifacts/abc123?teamId=team_1", art, map[string]string{"x-artifact-tag": "c2lnbmF0dXJl", "x-artifact-duration": "420"})
	if status != 202 || !strings.Contains(string(body), "urls") {
		t.Fatalf("PUT = %d %s", status, body)
	}
	status, h, body := c.doHeaders("GET", "/v8/artifacts/abc123?teamId=team_1", nil, nil)
	if status != 200 || !bytes.Equal(body, art) || h.Get("x-artifact-tag") != "c2lnbmF0dXJl" || h.Get("x-artifact-duration") != "420" {
		t.Fatalf("GET = %d %v %q", status, h, body)
	}
	if status, _ := c.do("HEAD", "/v8/artifacts/abc123?teamId=team_1", nil); status != 200 {
		t.Fatalf("HEAD = %d", status)
	}
	// Another team, or none, does not see it.
	for _, q := range []string{"?teamId=team_2", "?slug=team_1", ""} {
		if status, _ := c.do("GET", "/v8/artifacts/abc123"+q, nil); status != 404 {
			t.Fatalf("GET from namespace %q = %d; want 404", q, status)
		}
	}
	status, body = c.do("POST", "/v8/artifacts?teamId=team_1", []byte(`{"hashes":["abc123","nope","../x"]}`))
	var got map[string]map[string]any
	if status != 200 || json.Unmarshal(body, &got) != nil || got["abc123"]["size"] != float64(len(art)) || got["abc123"]["tag"] != "c2lnbmF0dXJl" || got["abc123"]["taskDurationMs"] != float64(420) || got["nope"]["error"] == nil || got["../x"]["error"] == nil {
		t.Fatalf("POST query = %d %s", status, body)
	}
	if status, body := c.do("GET", "/v8/artifacts/status", nil); status != 200 || !strings.Contains(string(body), `"enabled"`) {
		t.Fatalf("status = %d %s", status, body)
	}
	if status, _ := c.do("POST", "/v8/artifacts/events", []byte(`[{"hash":"abc123","event":"HIT"}]`)); status != 200 {
		t.Fatalf("events = %d", status)
	}
	for _, tc := range []struct {
		method, path string
		headers      map[string]string
		status       int
	}{
		{"PUT", "/v8/artifacts/a%2Fb", nil, 404},
		{"PUT", "/v8/artifacts/..", nil, 404},
		{"PUT", "/v8/artifacts/", nil, 404},
		{"PUT", "/v8/artifacts/ok?teamId=a/b", nil, 400},
		{"PUT", "/v8/artifacts/ok", map[string]string{"x-artifact-duration": "-1"}, 400},
		{"PUT", "/v8/artifacts/ok", map[string]string{"x-artifact-tag": strings.Repeat("t", 5000)}, 400},
		{"DELETE", "/v8/artifacts/abc123?teamId=team_1", nil, 405},
		{"POST", "/v8/artifacts", nil, 400},
	} {
		if status, _, body := c.doHeaders(tc.method, tc.path, []byte("x"), tc.headers); status != tc.status {
			t.Errorf("%s %s = %d %s; want %d", tc.method, tc.path, status, body, tc.status)
		}
	}
	if status, _ := c.do("GET", "/v8/artifacts/ok", nil); status != 404 {
		t.Fatalf("a refused PUT stored an entry: %d", status)
	}
	// Unread for its TTL, the entry goes.
	c.clk.Add(61 * time.Minute)
	c.sweep()
	if status, _ := c.do("GET", "/v8/artifacts/abc123?teamId=team_1", nil); status != 404 {
		t.Fatalf("GET after the TTL = %d; want 404", status)
	}
}

func TestNx(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	tarball := []byte("an nx output tarball")
	if status, body := c.do("PUT", "/nx/v1/cache/1234567890", tarball); status != 200 {
		t.Fatalf("PUT = %d %s", status, body)
	}
	if status, body := c.do("PUT", "/nx/v1/cache/1234567890", []byte("other")); status != 409 {
		t.Fatalf("PUT again = %d %s; want 409", status, body)
	}
	if status, body := c.do("GET", "/nx/v1/cache/1234567890", nil); status != 200 || !bytes.Equal(body, tarball) {
		t.Fatalf("GET = %d %q", status, body)
	}
	for _, p := range []string{"/nx/v1/cache/absent", "/nx/v1/cache/", "/nx/v1/cache/a/b", "/nx/other/1"} {
		if status, _ := c.do("GET", p, nil); status != 404 {
			t.Fatalf("GET %s = %d; want 404", p, status)
		}
	}
	// Keyed entries are not content: cas/ does not serve them.
	if status, _ := c.do("GET", "/cache/cas/"+hexOf(tarball), nil); status != 404 {
		t.Fatalf("cas/ of an Nx entry = %d; want 404", status)
	}
}
