package remote_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/lock"
)

// infoTransport answers every request with /v1/info's answer, in process,
// counting the requests.
type infoTransport struct{ calls atomic.Int64 }

func (tr *infoTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tr.calls.Add(1)
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK,
		Header:     http.Header{"Content-Type": {"application/json"}},
		Body:       io.NopCloser(strings.NewReader(`{"cluster":false,"reason":"test"}`)),
		Request:    r,
	}, nil
}

// TestTokenOverPlainHTTP: Open refuses to send a token over http:// to a
// host that is not loopback, before any request, unless the URL opts in
// with insecure=true; https, loopback hosts and token-less opens are
// allowed.
func TestTokenOverPlainHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, token string
		ok         bool
	}{
		{"https://example.com", "t", true},
		{"https://example.com:7070/", "t", true},
		{"http://127.0.0.1:7070", "t", true},
		{"http://127.3.2.1", "t", true},
		{"http://[::1]:7070", "t", true},
		{"http://[::ffff:127.0.0.1]:7070", "t", true},
		{"http://localhost:7070", "t", true},
		{"http://LocalHost", "t", true},
		{"http://example.com", "", true},
		{"http://example.com:7070", "t", false},
		{"http://10.0.0.1:7070", "t", false},
		{"http://0.0.0.0:7070", "t", false},
		{"http://localhost.example.com", "t", false},
		{"http://[2001:db8::1]:7070", "t", false},
		{"http://example.com:7070?insecure=true", "t", true},
		{"http://example.com:7070/?insecure=1", "t", true},
		{"http://example.com:7070?insecure=false", "t", false},
		{"https://example.com?insecure=true", "t", true},
	} {
		t.Run(tc.url+" token="+tc.token, func(t *testing.T) {
			t.Parallel()
			tr := &infoTransport{}
			e, err := remote.Open(context.Background(), remote.Config{URL: tc.url, Token: tc.token, Client: &http.Client{Transport: tr}})
			if tc.ok {
				if err != nil {
					t.Fatalf("Open = %v, want it allowed", err)
				}
				e.Close()
				return
			}
			if !errors.Is(err, stead.ErrInvalidArgument) || !strings.Contains(err.Error(), "insecure=true") {
				t.Fatalf("Open = %v, want ErrInvalidArgument naming insecure=true", err)
			}
			if n := tr.calls.Load(); n != 0 {
				t.Fatalf("a refused Open sent %d requests", n)
			}
		})
	}
	for _, bad := range []string{"http://example.com?insecure=maybe", "http://example.com?insecure=true&insecure=true", "http://127.0.0.1?other=1", "http://localhost:7070/#x", "http://localhost:7070#"} {
		if _, err := remote.Open(context.Background(), remote.Config{URL: bad, Client: &http.Client{Transport: &infoTransport{}}}); !errors.Is(err, stead.ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// TestOpenStripsParameters: the URL's parameters are Open's, never sent.
func TestOpenStripsParameters(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got.Store(r.URL.String())
		return (&infoTransport{}).RoundTrip(r)
	})
	e, err := remote.Open(context.Background(), remote.Config{URL: "http://example.com:7070/?insecure=true", Token: "t", Client: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if u := got.Load(); u != "http://example.com:7070/v1/info" {
		t.Fatalf("Open asked %v, want http://example.com:7070/v1/info", u)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestOwnClientRefusesRedirects: the engine's own client follows no
// redirect, which would carry the bearer token along (to http:// on the
// same host, in clear text).
func TestOwnClientRefusesRedirects(t *testing.T) {
	t.Parallel()
	var trapped atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/info":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"cluster":false,"reason":"test"}`)
		case "/trap":
			trapped.Add(1)
			w.WriteHeader(http.StatusOK)
		default:
			http.Redirect(w, r, "http://"+r.Host+"/trap", http.StatusTemporaryRedirect)
		}
	}))
	t.Cleanup(srv.Close)
	e, err := remote.Open(t.Context(), remote.Config{URL: srv.URL, Token: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if ok, err := e.Locks().Release(t.Context(), lock.ReleaseParams{Name: "job", Owner: "alice", Token: 1}); err == nil {
		t.Fatalf("Release answered by a redirect = %v, nil; want an error", ok)
	}
	if n := trapped.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}
