package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// TestChildrenOverHTTP: every put that can declare children over HTTP
// honors them — the pinned put (the remote engine's) by its header, a
// publish by its body, up to blob.MaxChildren keys.
func TestChildrenOverHTTP(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	child, other := "a child", "another child"
	for _, v := range []string{child, other} {
		if a := do(t, "PUT", srv.URL+"/v1/blobs", v, nil); a.status != http.StatusCreated {
			t.Fatalf("put %q = %d %s", v, a.status, a.body)
		}
	}
	childKey, otherKey := blob.KeyOf([]byte(child)).String(), blob.KeyOf([]byte(other)).String()
	absent := blob.KeyOf([]byte("never stored")).String()

	pinned := func(value string, children ...string) answer {
		t.Helper()
		url := fmt.Sprintf("%s/v1/blobs/%s?owner=o&ttl=1m", srv.URL, blob.KeyOf([]byte(value)))
		return do(t, "PUT", url, value, map[string]string{"Stead-Children": strings.Join(children, ",")})
	}
	if a := pinned("a parent of a missing child", absent); a.status != http.StatusNotFound || !strings.Contains(a.body, absent) {
		t.Fatalf("pinned put naming an absent child = %d %s; want 404 naming it", a.status, a.body)
	}
	if a := do(t, "HEAD", srv.URL+"/v1/blobs/"+blob.KeyOf([]byte("a parent of a missing child")).String(), "", nil); a.status != http.StatusNotFound {
		t.Fatalf("the refused parent is stored: HEAD = %d", a.status)
	}
	if a := pinned("a parent", childKey); a.status != http.StatusCreated {
		t.Fatalf("pinned put with a child = %d %s", a.status, a.body)
	}
	if a := pinned("a parent", childKey, otherKey); a.status != http.StatusConflict || a.errCode(t) != "children_fixed" {
		t.Fatalf("pinned re-put naming another child = %d %s; want 409 children_fixed", a.status, a.body)
	}
	if a := pinned("an empty-handed parent", "sha256:nothex"); a.status != http.StatusBadRequest || a.errCode(t) != "invalid_key" {
		t.Fatalf("pinned put with a malformed child = %d %s; want 400 invalid_key", a.status, a.body)
	}
	self := "names itself"
	if a := pinned(self, blob.KeyOf([]byte(self)).String()); a.status != http.StatusBadRequest {
		t.Fatalf("pinned put naming itself = %d %s; want 400", a.status, a.body)
	}

	// A publish body holds MaxChildren keys: the answer is about them
	// (404, the first missing named), not about the body's size.
	value := "a parent of many"
	id := uploadChunks(t, srv, []byte(value), len(value))
	many := make([]string, blob.MaxChildren)
	for i := range many {
		many[i] = blob.KeyOf(fmt.Appendf(nil, "absent %d", i)).String()
	}
	body, _ := json.Marshal(map[string]any{"key": blob.KeyOf([]byte(value)).String(), "size": len(value), "children": many})
	a := do(t, "POST", srv.URL+"/v1/uploads/"+id+"/publish?owner=o&ttl=1m", string(body), nil)
	if a.status != http.StatusNotFound || a.errCode(t) != "not_found" {
		t.Fatalf("publish naming %d absent children (%d bytes) = %d %s; want 404", len(many), len(body), a.status, a.body)
	}
}

// TestRefPreconditions: a ref route refuses a conditional header it does
// not evaluate instead of ignoring it, and changes nothing.
func TestRefPreconditions(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	if a := do(t, "PUT", srv.URL+"/v1/blobs", "kept", nil); a.status != http.StatusCreated {
		t.Fatalf("put = %d %s", a.status, a.body)
	}
	key := blob.KeyOf([]byte("kept")).String()
	if a := do(t, "PUT", srv.URL+"/v1/refs/cond", fmt.Sprintf(`{"key":%q,"ttl":"1h"}`, key), nil); a.status != http.StatusCreated {
		t.Fatalf("ref put = %d %s", a.status, a.body)
	}
	for _, tc := range []struct{ method, body, header, value string }{
		{"DELETE", "", "If-None-Match", "*"},
		{"PATCH", `{"ttl":"2h"}`, "If-Match", `"999"`},
		{"PATCH", `{"ttl":"2h"}`, "If-None-Match", "*"},
	} {
		a := do(t, tc.method, srv.URL+"/v1/refs/cond", tc.body, map[string]string{tc.header: tc.value})
		if a.status != http.StatusBadRequest {
			t.Errorf("%s with %s: %s = %d %s; want 400", tc.method, tc.header, tc.value, a.status, a.body)
		}
	}
	a := do(t, "GET", srv.URL+"/v1/refs/cond", "", nil)
	if a.status != http.StatusOK || !strings.Contains(a.body, `"version":`) {
		t.Fatalf("the ref after refused requests = %d %s; want it there", a.status, a.body)
	}
}

// TestRefTTLNull: "ttl": null is the member left out, in a set and in a
// renewal alike: the set makes a ref that never expires, the renewal is
// refused for want of a TTL, naming it.
func TestRefTTLNull(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	if a := do(t, "PUT", srv.URL+"/v1/blobs", "kept", nil); a.status != http.StatusCreated {
		t.Fatalf("put = %d %s", a.status, a.body)
	}
	key := blob.KeyOf([]byte("kept")).String()
	if a := do(t, "PUT", srv.URL+"/v1/refs/null", fmt.Sprintf(`{"key":%q,"ttl":null}`, key), nil); a.status != http.StatusCreated || strings.Contains(a.body, "expiry") {
		t.Fatalf(`ref put with "ttl":null = %d %s; want 201 and no expiry`, a.status, a.body)
	}
	for _, body := range []string{`{"ttl":null}`, `{}`} {
		a := do(t, "PATCH", srv.URL+"/v1/refs/null", body, nil)
		if a.status != http.StatusBadRequest || !strings.Contains(a.body, "ttl") || strings.Contains(a.body, "invalid duration") {
			t.Errorf("PATCH %s = %d %s; want 400 naming the missing ttl", body, a.status, a.body)
		}
	}
}
