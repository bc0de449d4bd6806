package server_test

import (
	"encoding/json"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// TestResolveRef: GET /v1/refs/{name}?stored=true answers the ref with its
// blob's stored form, and refuses what the library refuses.
func TestResolveRef(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	key := blob.KeyOf([]byte("resolved")).String()
	if a := do(t, "PUT", srv.URL+"/v1/blobs", "resolved", nil); a.status != 201 {
		t.Fatalf("PUT blob = %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/refs/tags/r", `{"key":"`+key+`","ttl":"1h"}`, nil); a.status != 201 {
		t.Fatalf("PUT ref = %d %s", a.status, a.body)
	}
	a := do(t, "GET", srv.URL+"/v1/refs/tags/r?stored=true&touch=1h", "", nil)
	var got struct {
		Name, Key string
		Version   int64
		Stored    struct {
			Size  int64
			Value []byte
		}
	}
	if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.status != 200 || got.Name != "tags/r" || got.Key != key ||
		got.Stored.Size != 8 || string(got.Stored.Value) != "resolved" || a.header.Get("ETag") == "" {
		t.Fatalf("GET ?stored=true = %d %s", a.status, a.body)
	}
	for _, tt := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/refs/tags/r?stored=false", 400, "bad_request"},
		{"/v1/refs/tags/r?stored=true&touch=0s", 400, "invalid_argument"},
		{"/v1/refs/tags/r?stored=true&touch=soon", 400, "bad_request"},
		{"/v1/refs/tags/r?stored=true&stored=false", 400, "bad_request"},
		{"/v1/refs/tags/r?stored=true&touch=1h&touch=junk", 400, "bad_request"},
		{"/v1/refs/tags/r?touch=1h&touch=2h", 400, "bad_request"},
		{"/v1/refs/tags/absent?stored=true", 404, "not_found"},
		{"/v1/refs/tags/%2E%2E?stored=true", 400, "invalid_name"},
	} {
		a := do(t, "GET", srv.URL+tt.path, "", nil)
		if a.status != tt.status || a.errCode(t) != tt.code {
			t.Errorf("GET %s = %d %s, want %d %s", tt.path, a.status, a.body, tt.status, tt.code)
		}
	}
}
