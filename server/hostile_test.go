package server_test

import (
	"encoding/json"
	"fmt"
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

// TestPublishAnswers checks publish's refusals against the document: a
// size over the largest blob is 413 too_large, a size of zero or less
// 400, and a publish after its upload was aborted 409 lost.
func TestPublishAnswers(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	value := "published after abort"
	key := blob.KeyOf([]byte(value))
	begin := func() string {
		t.Helper()
		a := do(t, "POST", srv.URL+"/v1/uploads?lease=1m", "", nil)
		if a.status != http.StatusCreated {
			t.Fatalf("begin = %d %s", a.status, a.body)
		}
		var up struct{ Chunks int64 }
		mustJSON(t, a.body, &up)
		return fmt.Sprint(up.Chunks)
	}
	set := begin()
	publish := func(set string, size int64) answer {
		return do(t, "POST", srv.URL+"/v1/uploads/"+set+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, size), nil)
	}
	if a := publish(set, 1<<62); a.status != http.StatusRequestEntityTooLarge || a.errCode(t) != "too_large" {
		t.Errorf("publish of 2^62 bytes = %d %s, want 413 too_large", a.status, a.body)
	}
	for _, size := range []int64{0, -1} {
		if a := publish(set, size); a.status != http.StatusBadRequest || a.errCode(t) != "invalid_argument" {
			t.Errorf("publish of %d bytes = %d %s, want 400 invalid_argument", size, a.status, a.body)
		}
	}
	if a := do(t, "PUT", srv.URL+"/v1/chunks/"+set+"/0?lease=1m", value, nil); a.status != http.StatusNoContent {
		t.Fatalf("chunk write = %d %s", a.status, a.body)
	}
	if a := do(t, "DELETE", srv.URL+"/v1/uploads/"+set, "", nil); a.status != http.StatusNoContent {
		t.Fatalf("abort = %d %s", a.status, a.body)
	}
	if a := publish(set, int64(len(value))); a.status != http.StatusConflict || a.errCode(t) != "lost" {
		t.Errorf("publish after abort = %d %s, want 409 lost", a.status, a.body)
	}
	// An upload whose first chunk never came is as good as lost too.
	if a := publish(begin(), int64(len(value))); a.status != http.StatusConflict || a.errCode(t) != "lost" {
		t.Errorf("publish of an upload without chunks = %d %s, want 409 lost", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs/"+key.String(), "", nil); a.status != http.StatusNotFound {
		t.Fatalf("after refused publishes, GET = %d", a.status)
	}
}

// mustJSON decodes body into v, failing t when it is not JSON.
func mustJSON(t *testing.T, body string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
}
