package apicheck

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestBothValidatorsCatch: each mismatch is found by kin-openapi and by
// libopenapi-validator on its own, so that either failing fails the test.
func TestBothValidatorsCatch(t *testing.T) {
	t.Parallel()
	doc := Load(t)
	jsonAnswer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	for _, c := range []struct {
		name, method, path, body string
		handler                  http.HandlerFunc
		want                     string // in both validators' words
	}{
		{"status", "GET", "/v1/info", "", jsonAnswer(http.StatusTeapot, `{}`), "418"},
		{"member", "GET", "/v1/info", "", jsonAnswer(200, `{"cluster":false,"reason":"r","extra":1}`), "extra"},
		{"type", "GET", "/v1/info", "", jsonAnswer(200, `{"cluster":"no"}`), "cluster"},
		{"no operation", "GET", "/v1/nowhere", "", jsonAnswer(200, `{}`), "no operation"},
		{"unknown route's answer", "GET", "/v1/nowhere", "", jsonAnswer(404, `{"error":"e","code":"not_found"}`), "route_not_found"},
		{"accepted a refused request", "POST", "/v1/locks/l/acquire", `{"owner":1}`, jsonAnswer(200, `{"name":"l","token":1}`), "accepted a request the document refuses"},
		{"refusal's code", "POST", "/v1/locks/l/acquire", `{"owner":"o","ttl":"1m"}`, jsonAnswer(409, `{"name":"l","token":1,"error":"e","code":"conflict"}`), "code"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := caught(t, doc, c.handler, c.method, c.path, c.body)
			for _, v := range []string{"kin-openapi", "libopenapi-validator"} {
				if !strings.Contains(got, v+": ") || !strings.Contains(got, c.want) {
					t.Errorf("caught %q, want %s naming %q", got, v, c.want)
				}
			}
		})
	}
}

// TestEncodedSlashRefused: a ref name's slash sent as %2F where the
// document lists it literal routes two ways, which libopenapi-validator
// refuses unless the server refused the request too.
func TestEncodedSlashRefused(t *testing.T) {
	t.Parallel()
	doc := Load(t)
	answer := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Stead-Error-Code", "invalid_name")
			w.WriteHeader(status)
			io.WriteString(w, `{"error":"e","code":"invalid_name"}`)
		}
	}
	if got := caught(t, doc, answer(http.StatusBadRequest), "GET", "/v1/refs/a%2F%2Fb", ""); got != "" {
		t.Errorf("a refusal of an ambiguous path: %s", got)
	}
	if got := caught(t, doc, answer(http.StatusOK), "GET", "/v1/refs/tags%2Fhello", ""); !strings.Contains(got, "libopenapi-validator: answered 200 to a path the document routes two ways") {
		t.Errorf("caught %q, want libopenapi-validator naming the two routes", got)
	}
}

// TestBothValidatorsAccept: answers the document lists pass both
// validators, among them the forms a single validator once refused (a
// lock refusal, a ref name with literal slashes).
func TestBothValidatorsAccept(t *testing.T) {
	t.Parallel()
	doc := Load(t)
	ref := `{"name":"tags/hello","key":"sha256:` + strings.Repeat("0", 64) + `","version":1}`
	answer := func(status int, code, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			if code != "" {
				w.Header().Set("Stead-Error-Code", code)
			}
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	for _, c := range []struct {
		name, method, path, body string
		handler                  http.HandlerFunc
	}{
		{"held", "POST", "/v1/locks/job%2Fone/acquire", `{"owner":"b","ttl":"1m"}`, answer(409, "held", `{"name":"job/one","owner":"a","token":3,"expiry":"2026-01-01T00:00:00Z","now":"2026-01-01T00:00:00Z","error":"held","code":"held"}`)},
		{"lost", "POST", "/v1/locks/job/renew", `{"owner":"a","token":9,"ttl":"1m"}`, answer(409, "lost", `{"name":"job","owner":"a","token":9,"error":"lost","code":"lost"}`)},
		{"ref, one segment", "GET", "/v1/refs/hello", "", answer(200, "", ref)},
		{"ref, literal slash", "GET", "/v1/refs/tags/hello", "", answer(200, "", ref)},
		{"ref, deepest literal form", "DELETE", "/v1/refs/a/b/c/d/e/f/g/h", "", answer(204, "", "")},
		{"ref, past the deepest literal form", "DELETE", "/v1/refs/a/b/c/d/e/f/g/h%2Fi", "", answer(204, "", "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := caught(t, doc, c.handler, c.method, c.path, c.body); got != "" {
				t.Error(got)
			}
		})
	}
}

// caught sends one request to h behind doc's check and returns what the
// check reported.
func caught(t *testing.T, doc *Doc, h http.Handler, method, path, body string) string {
	catch := &catcher{TB: t}
	srv := httptest.NewServer(doc.Wrap(catch, h))
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	srv.Close() // the check has run once the handler returned
	return catch.text()
}

// catcher is a testing.TB whose Errorf records instead of failing.
type catcher struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (c *catcher) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func (c *catcher) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}
