package server_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/server"
)

// syncBuffer is a buffer the server's handlers write to concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAccessLog: with an access log, each request is one line naming its
// method, route, status, bytes answered, duration and identity (the
// caller the route authenticated, "-" when none did).
func TestAccessLog(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	srv := newServer(t, server.Options{Token: "secret", AccessLog: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))})
	type call struct {
		method, path, token, body string
		route                     string
		status                    int
		identity                  string
	}
	calls := []call{
		{"PUT", "/v1/blobs", "secret", "hello", "PUT /v1/blobs", 201, "token"},
		{"GET", "/v1/blobs/sha256:" + strings.Repeat("0", 64), "secret", "", "GET /v1/blobs/{key}", 404, "token"},
		{"GET", "/v1/info", "wrong", "", "GET /v1/info", 401, "-"},
		{"GET", "/healthz", "", "", "GET /healthz", 200, "-"},
		{"GET", "/nowhere", "secret", "", "unmatched", 404, "-"}, // no route, so no one authenticated
	}
	sizes := make([]int, len(calls))
	for i, c := range calls {
		req, err := http.NewRequestWithContext(t.Context(), c.method, srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("%s %s = %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		sizes[i] = len(b)
	}
	line := regexp.MustCompile(`^level=INFO msg=access method=(\S+) route=("[^"]*"|\S+) status=(\d+) bytes=(\d+) duration=(\S+) client=127\.0\.0\.1 identity=(\S+)$`)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(calls) {
		t.Fatalf("access log has %d lines, want %d:\n%s", len(lines), len(calls), buf.String())
	}
	for i, c := range calls {
		m := line.FindStringSubmatch(lines[i])
		if m == nil {
			t.Fatalf("access log line %q does not match %v", lines[i], line)
		}
		route, _ := strconv.Unquote(m[2])
		if route == "" {
			route = m[2]
		}
		if _, err := time.ParseDuration(m[5]); err != nil {
			t.Errorf("line %q: duration %q: %v", lines[i], m[5], err)
		}
		if m[1] != c.method || route != c.route || m[3] != strconv.Itoa(c.status) || m[4] != strconv.Itoa(sizes[i]) || m[6] != c.identity {
			t.Errorf("access log line %q; want method %s, route %q, status %d, bytes %d, identity %s", lines[i], c.method, c.route, c.status, sizes[i], c.identity)
		}
	}
}
