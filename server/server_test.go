package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

func newServer(t *testing.T, opts server.Options, storeOpts ...stead.Option) *httptest.Server {
	t.Helper()
	st, err := stead.Open(context.Background(), "mem://", storeOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(server.New(st, opts))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, body string, header map[string]string) (*http.Response, string) {
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
	return resp, string(b)
}

func TestBlobs(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{}, stead.WithMaxBlobSize(16))
	key := blob.KeyOf([]byte("hello, world")).String()

	resp, body := do(t, "PUT", srv.URL+"/v1/blobs", "hello, world", nil)
	var put struct {
		Key  string
		Size int64
	}
	if err := json.Unmarshal([]byte(body), &put); err != nil || resp.StatusCode != 201 || put.Key != key || put.Size != 12 {
		t.Fatalf("PUT = %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, "POST", srv.URL+"/v1/blobs", "hello, world", nil); resp.StatusCode != 200 {
		t.Fatalf("POST of the same content = %d, want 200", resp.StatusCode)
	}

	tests := []struct {
		name, method, path string
		header             map[string]string
		status             int
		body               string
		code               string
	}{
		{"get", "GET", "/v1/blobs/" + key, nil, 200, "hello, world", ""},
		{"head", "HEAD", "/v1/blobs/" + key, nil, 200, "", ""},
		{"range", "GET", "/v1/blobs/" + key, map[string]string{"Range": "bytes=7-11"}, 206, "world", ""},
		{"etag match", "GET", "/v1/blobs/" + key, map[string]string{"If-None-Match": `"` + key + `"`}, 304, "", ""},
		{"absent", "GET", "/v1/blobs/" + blob.KeyOf([]byte("nope")).String(), nil, 404, "", "not_found"},
		{"bad key", "GET", "/v1/blobs/sha256:XYZ", nil, 400, "", "invalid_key"},
		{"too large", "PUT", "/v1/blobs", nil, 413, "", "too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reqBody := ""
			if tt.method == "PUT" {
				reqBody = strings.Repeat("x", 17)
			}
			resp, body := do(t, tt.method, srv.URL+tt.path, reqBody, tt.header)
			if resp.StatusCode != tt.status {
				t.Fatalf("%s %s = %d %s, want %d", tt.method, tt.path, resp.StatusCode, body, tt.status)
			}
			if tt.code != "" {
				var e struct{ Error, Code string }
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != tt.code || e.Error == "" {
					t.Fatalf("error body %q, want code %q", body, tt.code)
				}
				return
			}
			if tt.body != "" && body != tt.body {
				t.Fatalf("body %q, want %q", body, tt.body)
			}
			if tt.status == 200 && resp.Header.Get("ETag") != `"`+key+`"` {
				t.Fatalf("ETag %q", resp.Header.Get("ETag"))
			}
		})
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{Token: "s3cret"})
	if resp, _ := do(t, "PUT", srv.URL+"/v1/blobs", "x", nil); resp.StatusCode != 401 {
		t.Fatalf("PUT without a token = %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, "PUT", srv.URL+"/v1/blobs", "x", map[string]string{"Authorization": "Bearer wrong"}); resp.StatusCode != 401 {
		t.Fatalf("PUT with a wrong token = %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, "PUT", srv.URL+"/v1/blobs", "x", map[string]string{"Authorization": "Bearer s3cret"}); resp.StatusCode != 201 {
		t.Fatalf("PUT with the token = %d, want 201", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", srv.URL+"/healthz", "", nil); resp.StatusCode != 200 {
		t.Fatalf("healthz without a token = %d, want 200", resp.StatusCode)
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
