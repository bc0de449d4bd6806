package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/remote/wire"
)

// FuzzParseETag checks that If-Match parsing never panics and accepts
// exactly the quoted positive versions it writes.
func FuzzParseETag(f *testing.F) {
	for _, seed := range []string{`"1"`, `W/"1"`, `*`, `"0"`, `"-1"`, `""`, `"1", "2"`, ` "7" `, `"99999999999999999999"`, `"+1"`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := wire.ParseETag(v)
		if err != nil {
			return
		}
		if n < 1 || wire.ETag(n) != strings.TrimSpace(v) {
			t.Fatalf("ParseETag(%q) = %d, but ETag(%d) = %s", v, n, n, wire.ETag(n))
		}
	})
}

// FuzzContentDigest checks that no Content-Digest header panics and that
// an accepted one names a valid key.
func FuzzContentDigest(f *testing.F) {
	for _, seed := range []string{"sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:", "sha-256=abc", "sha-512=:AA==:", "", ",", "sha-256=::", "a=b, sha-256=:AAAA:"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		key, err := parseContentDigest(header)
		if err == nil && !key.IsZero() && len(key.String()) != len("sha256:")+64 {
			t.Fatalf("parseContentDigest(%q) = %q", header, key)
		}
	})
}

// FuzzPath sends any method and path to the server: no answer is a 500,
// and every error answer is a JSON error with a code.
func FuzzPath(f *testing.F) {
	for _, seed := range []string{"/v1/blobs/sha256:00", "/v1/blobs/..%2F..%2Fetc", "/v1/locks/%2e%2e/acquire", "/v1/records/%00", "/v1/groups/a%2Fb/claimable", "//v1//blobs", "/v1/blobs/sha256:" + strings.Repeat("a", 64), "/v1/records/%ff%fe"} {
		f.Add("GET", seed)
		f.Add("DELETE", seed)
	}
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	srv := New(st, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Fuzz(func(t *testing.T, method, path string) {
		switch method {
		case "GET", "PUT", "POST", "DELETE", "HEAD", "PATCH":
		default:
			return
		}
		u, err := url.ParseRequestURI(path)
		if err != nil || !strings.HasPrefix(path, "/") {
			return
		}
		r := httptest.NewRequest(method, "http://stead"+u.RequestURI(), strings.NewReader("{}"))
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != 503 {
			t.Fatalf("%s %s = %d %s", method, path, w.Code, w.Body)
		}
		if w.Code >= 400 && method != "HEAD" {
			var e wire.Error
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code == "" {
				t.Fatalf("%s %s = %d with body %q, not a JSON error", method, path, w.Code, w.Body)
			}
		}
	})
}
