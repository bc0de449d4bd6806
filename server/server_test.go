package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/steadkit/stead/internal/testing/apicheck"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// quiet is a logger for servers whose internal errors a test provokes.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newServer(t *testing.T, opts server.Options) *httptest.Server {
	t.Helper()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, opts)))
	t.Cleanup(srv.Close)
	return srv
}

// answer is a response, its body read.
type answer struct {
	status int
	header http.Header
	body   string
}

// errCode returns the code of a JSON error body, failing t when the body
// is not one.
func (a answer) errCode(t *testing.T) string {
	t.Helper()
	var e struct{ Error, Code string }
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Code == "" || e.Error == "" {
		t.Fatalf("body %q is not a JSON error", a.body)
	}
	if a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("error Content-Type %q", a.header.Get("Content-Type"))
	}
	return e.Code
}

func do(t *testing.T, method, url, body string, header map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func contentDigest(value string) string {
	d := sha256.Sum256([]byte(value))
	return "sha-256=:" + base64.StdEncoding.EncodeToString(d[:]) + ":"
}

func TestBlobs(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{MaxBlobSize: 16})
	key := blob.KeyOf([]byte("hello, world")).String()

	a := do(t, "PUT", srv.URL+"/v1/blobs", "hello, world", nil)
	var put struct {
		Key  string
		Size int64
	}
	if err := json.Unmarshal([]byte(a.body), &put); err != nil || a.status != 201 || put.Key != key || put.Size != 12 {
		t.Fatalf("PUT = %d %s", a.status, a.body)
	}
	if a := do(t, "POST", srv.URL+"/v1/blobs", "hello, world", nil); a.status != 200 {
		t.Fatalf("POST of the same content = %d, want 200", a.status)
	}
	other := "other value"
	otherKey := blob.KeyOf([]byte(other)).String()

	tests := []struct {
		name, method, path string
		header             map[string]string
		reqBody            string
		status             int
		body               string
		code               string
	}{
		{"get", "GET", "/v1/blobs/" + key, nil, "", 200, "hello, world", ""},
		{"head", "HEAD", "/v1/blobs/" + key, nil, "", 200, "", ""},
		{"range", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=7-11"}, "", 206, "world", ""},
		{"suffix range", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=-5"}, "", 206, "world", ""},
		{"range past end", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=99999999999-"}, "", 416, "", "range_not_satisfiable"},
		{"empty suffix range", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=-0"}, "", 416, "", "range_not_satisfiable"},
		{"malformed range", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=5-2"}, "", 416, "", "range_not_satisfiable"},
		{"garbled range", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=x-y"}, "", 416, "", "range_not_satisfiable"},
		{"malformed range head", "HEAD", "/v1/blobs/" + key, map[string]string{"Range": "bytes=5-2"}, "", 416, "", ""},
		{"too many ranges", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=" + strings.Repeat("0-0,", 20) + "1-1"}, "", 200, "hello, world", ""},
		{"empty suffix among ranges", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=-0,7-11"}, "", 206, "world", ""},
		{"etag match", "GET", "/v1/blobs/" + key, map[string]string{"If-None-Match": `"` + key + `"`}, "", 304, "", ""},
		{"absent", "GET", "/v1/blobs/" + blob.KeyOf([]byte("nope")).String(), nil, "", 404, "", "not_found"},
		{"absent head", "HEAD", "/v1/blobs/" + blob.KeyOf([]byte("nope")).String(), nil, "", 404, "", ""},
		{"bad key", "GET", "/v1/blobs/sha256:XYZ", nil, "", 400, "", "invalid_key"},
		{"encoded traversal", "GET", "/v1/blobs/..%2F..%2Fetc%2Fpasswd", nil, "", 400, "", "invalid_key"},
		{"too large", "PUT", "/v1/blobs", nil, strings.Repeat("x", 17), 413, "", "too_large"},
		{"claimed key mismatch", "PUT", "/v1/blobs/" + key, nil, other, 400, "", "digest_mismatch"},
		{"claimed bad key", "PUT", "/v1/blobs/sha256:00", nil, other, 400, "", "invalid_key"},
		{"content digest mismatch", "POST", "/v1/blobs", map[string]string{"Content-Digest": contentDigest("not it")}, other, 400, "", "digest_mismatch"},
		{"content digest malformed", "POST", "/v1/blobs", map[string]string{"Content-Digest": "sha-256=abc"}, other, 400, "", "bad_request"},
		{"content digest short", "POST", "/v1/blobs", map[string]string{"Content-Digest": "sha-256=:AAAA:"}, other, 400, "", "bad_request"},
		{"content digest second member malformed", "POST", "/v1/blobs", map[string]string{"Content-Digest": contentDigest(other) + ", sha-256=abc"}, other, 400, "", "bad_request"},
		{"content digest uppercase", "POST", "/v1/blobs", map[string]string{"Content-Digest": "SHA-256" + strings.TrimPrefix(contentDigest(other), "sha-256")}, other, 400, "", "bad_request"},
		{"unknown route", "GET", "/v2/nothing", nil, "", 404, "", "route_not_found"},
		{"wrong method", "PATCH", "/v1/blobs/" + key, nil, "", 405, "", "method_not_allowed"},
		{"list bad limit", "GET", "/v1/blobs?limit=-1", nil, "", 400, "", "invalid_argument"},
		{"list bad cursor", "GET", "/v1/blobs?after=x", nil, "", 400, "", "invalid_key"},
		{"delete absent", "DELETE", "/v1/blobs/" + otherKey, nil, "", 404, "", "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := do(t, tt.method, srv.URL+tt.path, tt.reqBody, tt.header)
			if a.status != tt.status {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, a.status, a.body, tt.status)
			}
			// RFC 9110 15.5.17: a 416 says the representation's length.
			if tt.status == 416 && a.header.Get("Content-Range") != "bytes */12" {
				t.Fatalf("416 with Content-Range %q, want %q", a.header.Get("Content-Range"), "bytes */12")
			}
			if tt.code != "" {
				if code := a.errCode(t); code != tt.code {
					t.Fatalf("code %q, want %q (%s)", code, tt.code, a.body)
				}
				if a.header.Get("Stead-Error-Code") != tt.code {
					t.Fatalf("Stead-Error-Code %q, want %q", a.header.Get("Stead-Error-Code"), tt.code)
				}
				return
			}
			if tt.body != "" && a.body != tt.body {
				t.Fatalf("body %q, want %q", a.body, tt.body)
			}
			if tt.status == 200 && a.header.Get("ETag") != `"`+key+`"` {
				t.Fatalf("ETag %q", a.header.Get("ETag"))
			}
		})
	}
	t.Run("multi-range", func(t *testing.T) {
		t.Parallel()
		a := do(t, "GET", srv.URL+"/v1/blobs/"+key, "", map[string]string{"Range": "bytes=0-4,7-11"})
		if a.status != 206 || !strings.HasPrefix(a.header.Get("Content-Type"), "multipart/byteranges") || !strings.Contains(a.body, "hello") || !strings.Contains(a.body, "world") {
			t.Fatalf("two ranges = %d %v %q", a.status, a.header, a.body)
		}
	})
	t.Run("wrong method says Allow", func(t *testing.T) {
		t.Parallel()
		a := do(t, "PATCH", srv.URL+"/v1/blobs/"+key, "", nil)
		if allow := a.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "DELETE") {
			t.Fatalf("Allow %q", allow)
		}
	})
}

// TestBlobClaims checks that a claimed digest stores nothing on a
// mismatch and the value on a match.
func TestBlobClaims(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	value := "claimed"
	key := blob.KeyOf([]byte(value)).String()
	if a := do(t, "PUT", srv.URL+"/v1/blobs/"+key, "not the claimed value", nil); a.status != 400 || a.errCode(t) != "digest_mismatch" {
		t.Fatalf("mismatched PUT = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs", "", nil); a.body != `{"blobs":[]}`+"\n" {
		t.Fatalf("after a mismatch the store lists %s, want nothing", a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/blobs/"+key, value, nil); a.status != 201 {
		t.Fatalf("matching PUT = %d %s", a.status, a.body)
	}
	if a := do(t, "POST", srv.URL+"/v1/blobs", value, map[string]string{"Content-Digest": "sha-512=:AAAA:, " + contentDigest(value)}); a.status != 200 {
		t.Fatalf("matching Content-Digest POST = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs/"+key, "", nil); a.body != value {
		t.Fatalf("GET = %d %q", a.status, a.body)
	}
	// The put's pin protects the blob: a delete is refused, and changes
	// nothing (deletes that go through: the conformance suite).
	if a := do(t, "DELETE", srv.URL+"/v1/blobs/"+key, "", nil); a.status != 409 || a.errCode(t) != "protected" {
		t.Fatalf("DELETE of a pinned blob = %d %s, want 409 protected", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs/"+key, "", nil); a.body != value {
		t.Fatalf("GET after a refused DELETE = %d %q", a.status, a.body)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{Token: "s3cret"})
	for _, tc := range []struct {
		header string
		status int
	}{
		{"", 401},
		{"Bearer wrong", 401},
		{"Bearer s3cret-and-more", 401},
		{"Basic s3cret", 401},
		{"Bearers3cret", 401},
		{"Bearer s3cret", 201},
		{"bearer s3cret", 200},
		{"BEARER s3cret", 200},
	} {
		a := do(t, "PUT", srv.URL+"/v1/blobs", "x", map[string]string{"Authorization": tc.header})
		if a.status != tc.status {
			t.Errorf("PUT with Authorization %q = %d, want %d", tc.header, a.status, tc.status)
		}
		if a.status == 401 && (a.errCode(t) != "unauthorized" || a.header.Get("WWW-Authenticate") == "") {
			t.Errorf("401 answer %v %s", a.header, a.body)
		}
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401, "/v1/info": 401} {
		if a := do(t, "GET", srv.URL+path, "", nil); a.status != want {
			t.Errorf("GET %s without a token = %d, want %d", path, a.status, want)
		}
	}
}

func TestLocks(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	post := func(path, body string) (answer, map[string]any) {
		a := do(t, "POST", srv.URL+path, body, nil)
		var m map[string]any
		_ = json.Unmarshal([]byte(a.body), &m)
		return a, m
	}
	a, g := post("/v1/locks/job%2Fone/acquire", `{"owner":"alice","ttl":"30s"}`)
	if a.status != 200 || g["granted"] != true || g["token"] != 1.0 || g["name"] != "job/one" || g["expiry"] == nil {
		t.Fatalf("acquire = %d %s", a.status, a.body)
	}
	a, g = post("/v1/locks/job%2Fone/acquire", `{"owner":"bob","ttl":"30s"}`)
	if a.status != 409 || a.errCode(t) != "held" || g["token"] != 1.0 || g["granted"] != nil {
		t.Fatalf("contended acquire = %d %s", a.status, a.body)
	}
	a, _ = post("/v1/locks/job%2Fone/acquire", `{"owner":"bob","ttl":"30s","wait":"50ms"}`)
	if a.status != 409 || a.errCode(t) != "held" {
		t.Fatalf("acquire with a wait that runs out = %d %s", a.status, a.body)
	}
	a, g = post("/v1/locks/job%2Fone/renew", `{"owner":"alice","token":1,"ttl":"1m"}`)
	if a.status != 200 || g["token"] != 1.0 {
		t.Fatalf("renew = %d %s", a.status, a.body)
	}
	a, g = post("/v1/locks/job%2Fone/renew", `{"owner":"alice","token":7,"ttl":"1m"}`)
	if a.status != 409 || a.errCode(t) != "lost" || g["token"] != 7.0 {
		t.Fatalf("renew of another grant = %d %s", a.status, a.body)
	}
	a, g = post("/v1/locks/job%2Fone/release", `{"owner":"alice","token":1}`)
	if a.status != 200 || g["released"] != true || g["token"] != 1.0 {
		t.Fatalf("release = %d %s", a.status, a.body)
	}
	a, _ = post("/v1/locks/job%2Fone/release", `{"owner":"alice","token":1}`)
	if a.status != 409 || a.errCode(t) != "lost" {
		t.Fatalf("second release = %d %s", a.status, a.body)
	}
	a, g = post("/v1/locks/job%2Fone/acquire", `{"owner":"bob","ttl":"30s","wait":"1s"}`)
	if a.status != 200 || g["token"] != 2.0 {
		t.Fatalf("acquire after release = %d %s", a.status, a.body)
	}
	if a, _ := post("/v1/locks/x/acquire", `{"owner":"`+strings.Repeat("a", 100<<10)+`","ttl":"30s"}`); a.status != 413 || a.errCode(t) != "body_too_large" {
		t.Errorf("acquire with a 100 KiB body = %d %s, want 413 body_too_large", a.status, a.body)
	}
	for _, tc := range []struct{ body, code string }{
		{`{"owner":"","ttl":"30s"}`, "invalid_name"},
		{`{"owner":"a","ttl":"0s"}`, "invalid_argument"},
		{`{"owner":"a","ttl":"-5s"}`, "invalid_argument"},
		{`{"owner":"a","ttl":"30s","wait":"2h"}`, "invalid_argument"},
		{`{"owner":"a","ttl":30}`, "bad_request"},
		{`{"owner":"a","ttl":"30s","extra":1}`, "bad_request"},
		{`{"owner":"a","ttl":"30s"} trailing`, "bad_request"},
		{`{"owner":"a","ttl":"30s","now":"2030-01-01T00:00:00Z"}`, "bad_request"},
		{`not json`, "bad_request"},
	} {
		if a, _ := post("/v1/locks/x/acquire", tc.body); a.status != 400 || a.errCode(t) != tc.code {
			t.Errorf("acquire with %s = %d %s, want 400 %s", tc.body, a.status, a.body, tc.code)
		}
	}
}

func TestRecords(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	if a := do(t, "PUT", srv.URL+"/v1/groups/workers", "", nil); a.status != 200 {
		t.Fatalf("register = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/groups/nobody", "", nil); a.status != 404 {
		t.Fatalf("absent group = %d %s", a.status, a.body)
	}
	rec := `{"group":"workers","status":"active","payload":"aGVsbG8="}`
	if a := do(t, "PUT", srv.URL+"/v1/records/job-1", rec, nil); a.status != 428 || a.errCode(t) != "precondition_required" {
		t.Fatalf("save without a precondition = %d %s", a.status, a.body)
	}
	a := do(t, "PUT", srv.URL+"/v1/records/job-1", rec, map[string]string{"If-None-Match": "*"})
	if a.status != 201 || a.header.Get("ETag") != `"1"` {
		t.Fatalf("create = %d %v %s", a.status, a.header, a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/records/job-1", rec, map[string]string{"If-None-Match": "*"}); a.status != 412 || a.errCode(t) != "conflict" {
		t.Fatalf("second create = %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/records/job-1", rec, map[string]string{"If-Match": `"1"`}); a.status != 200 || a.header.Get("ETag") != `"2"` {
		t.Fatalf("update = %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/records/job-1", rec, map[string]string{"If-Match": `"1"`}); a.status != 412 || a.errCode(t) != "conflict" {
		t.Fatalf("stale update = %d %s", a.status, a.body)
	}
	for _, etag := range []string{`W/"2"`, `2`, `"2", "3"`, `*`, `"0"`, `"-1"`, `"+2"`, `"02"`, `"99999999999999999999"`, `""`} {
		if a := do(t, "PUT", srv.URL+"/v1/records/job-1", rec, map[string]string{"If-Match": etag}); a.status != 400 {
			t.Errorf("If-Match %s = %d %s, want 400", etag, a.status, a.body)
		}
	}
	a = do(t, "GET", srv.URL+"/v1/records/job-1", "", nil)
	var got struct {
		ID, Group, Status string
		Payload           []byte
		Version           int64
	}
	if err := json.Unmarshal([]byte(a.body), &got); err != nil || a.header.Get("ETag") != `"2"` || got.Version != 2 || string(got.Payload) != "hello" || got.ID != "job-1" {
		t.Fatalf("load = %d %v %s", a.status, a.header, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/groups/workers/claimable", "", nil); !strings.Contains(a.body, `"id":"job-1"`) {
		t.Fatalf("claimable = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/groups/workers/wait?timeout=1s", "", nil); a.body != `{"claimable":true}`+"\n" {
		t.Fatalf("wait = %d %s", a.status, a.body)
	}
	a = do(t, "POST", srv.URL+"/v1/groups/workers/claim-next", `{"owner":"w1","ttl":"1m","n":5}`, nil)
	if a.status != 200 || !strings.Contains(a.body, `"owner":"w1","incarnation":1`) {
		t.Fatalf("claim-next = %d %s", a.status, a.body)
	}
	if a := do(t, "POST", srv.URL+"/v1/records/job-1/claim", `{"group":"workers","owner":"w2","ttl":"1m"}`, nil); a.status != 409 || a.errCode(t) != "leased" {
		t.Fatalf("claim of a leased record = %d %s", a.status, a.body)
	}
	if a := do(t, "POST", srv.URL+"/v1/records/job-1/renew", `{"group":"workers","owner":"w1","incarnation":1,"ttl":"2m"}`, nil); a.status != 200 || !strings.Contains(a.body, `"incarnation":1`) {
		t.Fatalf("renew = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/groups/workers/wait?timeout=10ms", "", nil); a.body != `{"claimable":false}`+"\n" {
		t.Fatalf("wait with nothing claimable = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/groups/workers/probe", "", nil); !strings.Contains(a.body, `"claimable":false`) {
		t.Fatalf("probe = %d %s", a.status, a.body)
	}
	if a := do(t, "DELETE", srv.URL+"/v1/records/job-1", "", nil); a.status != 204 {
		t.Fatalf("delete = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/records/job-1", "", nil); a.status != 404 || a.errCode(t) != "not_found" {
		t.Fatalf("load after delete = %d %s", a.status, a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/records/job-2", `{"group":"nobody","status":"active"}`, map[string]string{"If-None-Match": "*"}); a.status != 409 || a.errCode(t) != "unknown_group" {
		t.Fatalf("save into an unknown group = %d %s", a.status, a.body)
	}
}

// TestMetrics scrapes /metrics and parses it with the Prometheus text
// parser.
func TestMetrics(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{})
	do(t, "PUT", srv.URL+"/v1/blobs", "m", nil)
	do(t, "PUT", srv.URL+"/v1/blobs", "m", nil)
	do(t, "GET", srv.URL+"/nowhere", "", nil)
	a := do(t, "GET", srv.URL+"/metrics", "", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(a.body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	count := func(name string, labels map[string]string) float64 {
		f, ok := families[name]
		if !ok {
			t.Fatalf("no %s in /metrics", name)
		}
		var sum float64
	metric:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"stead_http_requests_total", map[string]string{"route": "PUT /v1/blobs", "code": "201"}, 1},
		{"stead_http_requests_total", map[string]string{"route": "PUT /v1/blobs", "code": "200"}, 1},
		{"stead_http_requests_total", map[string]string{"route": "unmatched", "code": "404"}, 1},
		{"stead_http_request_duration_seconds", map[string]string{"route": "PUT /v1/blobs"}, 2},
		{"stead_blob_puts_total", map[string]string{"result": "existed"}, 1},
		{"stead_blob_put_bytes_total", nil, 2},
	} {
		if got := count(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "localhost:80": true, "[::1]:7070": true, "127.1.2.3:1": true,
		":7070": false, "0.0.0.0:7070": false, "[::]:7070": false, "10.0.0.1:7070": false, "example.com:80": false,
		"127.example.com:7070": false, "localhost.evil.com:80": false, "127.0.0.1": false, "": false,
	} {
		if got := server.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
