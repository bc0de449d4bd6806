package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// TestHostileJSON sends integers out of range and text that is not valid
// UTF-8 in JSON bodies: each is a 400 that changes nothing. Owners that
// encoding/json would all decode to U+FFFD stay distinct: none is taken,
// so none can release another's grant.
func TestHostileJSON(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	for _, c := range []struct {
		name, method, path, body, code string
	}{
		{"take limit past int32", "POST", "/v1/gc/take", `{"limit":2147483648}`, "invalid_argument"},
		{"take limit negative", "POST", "/v1/gc/take", `{"limit":-1}`, "invalid_argument"},
		{"take limit past int64", "POST", "/v1/gc/take", `{"limit":92233720368547758070}`, "bad_request"},
		{"claim-next n past int32", "POST", "/v1/groups/g/claim-next", `{"owner":"o","ttl":"1m","n":2147483648}`, "invalid_argument"},
		{"claim negative incarnation", "POST", "/v1/records/r/renew", `{"group":"g","owner":"o","ttl":"1m","incarnation":-1}`, "invalid_argument"},
		{"lock negative token", "POST", "/v1/locks/l/release", `{"owner":"o","token":-1}`, "invalid_argument"},
		{"owner raw 0xff", "POST", "/v1/locks/l/acquire", "{\"owner\":\"\xff\",\"ttl\":\"1m\"}", "invalid_name"},
		{"owner lone high surrogate", "POST", "/v1/locks/l/acquire", `{"owner":"\ud800","ttl":"1m"}`, "invalid_name"},
		{"owner lone low surrogate", "POST", "/v1/locks/l/acquire", `{"owner":"\udfff","ttl":"1m"}`, "invalid_name"},
		{"owner high surrogate then text", "POST", "/v1/locks/l/acquire", `{"owner":"\ud800a","ttl":"1m"}`, "invalid_name"},
		{"group lone surrogate", "POST", "/v1/records/r/claim", `{"group":"\udc00","owner":"o","ttl":"1m"}`, "invalid_name"},
		{"save tenant lone surrogate", "PUT", "/v1/records/r", `{"group":"g","tenant":"\ud800","status":"active"}`, "invalid_name"},
		{"pin owner lone surrogate", "POST", "/v1/blobs/" + blob.KeyOf([]byte("x")).String() + "/pins", `{"owner":"\ud800","ttl":"1m"}`, "invalid_name"},
	} {
		header := map[string]string{"Content-Type": "application/json"}
		if c.method == "PUT" {
			header["If-None-Match"] = "*"
		}
		a := do(t, c.method, srv.URL+c.path, c.body, header)
		if a.status != http.StatusBadRequest || a.errCode(t) != c.code {
			t.Errorf("%s: %s %s = %d %s, want 400 %s", c.name, c.method, c.path, a.status, a.body, c.code)
		}
	}
	// A well-formed pair is a character, not a lone surrogate.
	if a := do(t, "POST", srv.URL+"/v1/locks/l/acquire", `{"owner":"\ud83d\ude00","ttl":"1m"}`, nil); a.status != http.StatusOK {
		t.Fatalf("acquire by an owner with a surrogate pair = %d %s", a.status, a.body)
	}
}

// mustJSON decodes body into v, failing t when it is not JSON.
func mustJSON(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
}
