package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/server"
)

// serveReal runs a server on a real loopback listener and returns its
// address and a function that shuts it down and returns Serve's error.
func serveReal(t *testing.T, opts server.Options) (addr string, shutdown func() error) {
	t.Helper()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.New(st, opts).Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	shutdown = func() error {
		once.Do(func() {
			cancel()
			serveErr = <-done
		})
		return serveErr
	}
	t.Cleanup(func() { shutdown() })
	return ln.Addr().String(), shutdown
}

// dial opens a raw connection that fails the test rather than hang.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// readAnswer reads one HTTP answer from c.
func readAnswer(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// wantClosed checks that the server closes c without sending anything
// more.
func wantClosed(t *testing.T, c net.Conn) {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept the connection open (read %q)", b)
		}
	}
}

// TestSlowBody sends an upload one byte at a time, slower than the
// minimum rate: it is cut off with 408 instead of holding the connection.
func TestSlowBody(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{BodyGrace: 200 * time.Millisecond, MinBodyRate: 1000})
	c := dial(t, addr)
	fmt.Fprintf(c, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n")
	go func() {
		for i := 0; i < 100; i++ {
			if _, err := c.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	status, body := readAnswer(t, c)
	if status != http.StatusRequestTimeout || !strings.Contains(body, `"code":"timeout"`) {
		t.Fatalf("slow body = %d %s, want 408 timeout", status, body)
	}
}

// TestTruncatedBody closes the request side before the promised length:
// 400, not 500.
func TestTruncatedBody(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{})
	c := dial(t, addr)
	fmt.Fprintf(c, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly ten b")
	c.(*net.TCPConn).CloseWrite()
	status, body := readAnswer(t, c)
	if status != http.StatusBadRequest || !strings.Contains(body, `"code":"bad_request"`) {
		t.Fatalf("truncated body = %d %s, want 400 bad_request", status, body)
	}
}

// TestIdleConnections opens many keep-alive connections and leaves them
// idle: the server closes every one after IdleTimeout; a connection that
// never sends a header is closed too.
func TestIdleConnections(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{IdleTimeout: 200 * time.Millisecond, RequestTimeout: 300 * time.Millisecond, MaxConnsPerClient: 1024})
	silent := dial(t, addr)
	conns := make([]net.Conn, 520)
	for i := range conns {
		conns[i] = dial(t, addr)
		fmt.Fprintf(conns[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if status, _ := readAnswer(t, conns[i]); status != 200 {
			t.Fatalf("healthz = %d", status)
		}
	}
	for _, c := range conns {
		wantClosed(t, c)
	}
	wantClosed(t, silent)
}

// TestHTTPLayerErrors: what net/http refuses before a request reaches the
// API (huge headers, 431, not memory, among them) is answered in plain
// text, and docs/openapi.yaml lists each of those answers.
func TestHTTPLayerErrors(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(doc)), " ") // lines unwrapped
	addr, _ := serveReal(t, server.Options{})
	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"malformed header", "GET /healthz HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", http.StatusBadRequest},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"huge headers", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 200<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
		{"unknown transfer encoding", "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", http.StatusNotImplemented},
		{"unknown HTTP version", "GET /healthz HTTP/3.0\r\nHost: x\r\n\r\n", http.StatusHTTPVersionNotSupported},
		{"unknown expectation", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: gold\r\n\r\n", http.StatusExpectationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dial(t, addr)
			fmt.Fprint(c, tc.request)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tc.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "text/plain") {
				t.Fatalf("Content-Type %q, want plain text: the HTTP layer answered, not the API", ct)
			}
			if line := fmt.Sprintf("%d %s", tc.status, http.StatusText(tc.status)); !strings.Contains(text, line) {
				t.Errorf("docs/openapi.yaml does not list %q among the HTTP layer's plain-text answers", line)
			}
		})
	}
}

// TestUploadCap holds the only upload slot with a stalled upload: the next
// upload is refused at once with 503 busy and Retry-After.
func TestUploadCap(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{MaxUploads: 1})
	c := dial(t, addr)
	fmt.Fprintf(c, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
	// The stalled upload holds the slot once its handler runs: wait for
	// that, since an upload sent before it would take the slot instead.
	testkit.Until(t, "the stalled upload to hold the slot", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		text, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(text), "\nstead_http_uploads_in_progress 1\n")
	})
	var busy http.Header
	testkit.Until(t, "an upload past the cap to be refused", func() bool {
		resp, err := http.Post("http://"+addr+"/v1/blobs", "application/octet-stream", strings.NewReader("next"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		busy = resp.Header
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if busy.Get("Retry-After") == "" || busy.Get("Stead-Error-Code") != "busy" {
		t.Fatalf("busy answer headers %v", busy)
	}
}

// TestShutdown: an upload in flight that keeps sending finishes; a stalled
// upload is cut off instead of holding shutdown for its grace.
func TestShutdown(t *testing.T) {
	t.Parallel()
	const grace = 30 * time.Second
	addr, shutdown := serveReal(t, server.Options{ShutdownGrace: grace, BodyGrace: 5 * time.Minute})
	stalled := dial(t, addr)
	fmt.Fprintf(stalled, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
	steady := dial(t, addr)
	fmt.Fprintf(steady, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
	testkit.Until(t, "both uploads to be in their handlers", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), "stead_http_uploads_in_progress 2")
	})
	go func() {
		for range 8 { // the rest of the body, a byte every 200ms
			time.Sleep(200 * time.Millisecond)
			if _, err := steady.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	if err := shutdown(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if took := time.Since(start); took >= grace {
		t.Fatalf("shutdown waited %v, its whole grace, for a stalled upload", took)
	}
	if status, body := readAnswer(t, steady); status != http.StatusCreated {
		t.Fatalf("the upload in flight got %d %s, want 201", status, body)
	}
	wantClosed(t, stalled)
}

// TestConnectionCap holds the only connection slot: a second connection
// is not served until the first closes.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{MaxConns: 1})
	first := dial(t, addr)
	fmt.Fprintf(first, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if status, _ := readAnswer(t, first); status != 200 {
		t.Fatalf("first connection = %d", status)
	}
	second := dial(t, addr)
	fmt.Fprintf(second, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	second.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := second.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection past the cap was served")
	}
	first.Close()
	second.SetReadDeadline(time.Now().Add(20 * time.Second))
	if status, _ := readAnswer(t, second); status != 200 {
		t.Fatalf("second connection after the first closed = %d", status)
	}
}

// TestLongPollOutlivesRequestTimeout: a long poll and a lock wait run past
// the request timeout without their context being cut.
func TestLongPollOutlivesRequestTimeout(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{RequestTimeout: 300 * time.Millisecond})
	base := "http://" + addr
	req, _ := http.NewRequest("PUT", base+"/v1/groups/g", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("register: %v", err)
	}
	resp, err := http.Get(base + "/v1/groups/g/wait?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `{"claimable":false}`+"\n" {
		t.Fatalf("long poll past the request timeout = %d %s", resp.StatusCode, b)
	}
	resp, err = http.Post(base+"/v1/locks/l/acquire", "application/json", strings.NewReader(`{"owner":"a","ttl":"1m"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Post(base+"/v1/locks/l/acquire", "application/json", strings.NewReader(`{"owner":"b","ttl":"1m","wait":"1s"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 409 || !strings.Contains(string(b), `"code":"held"`) {
		t.Fatalf("lock wait past the request timeout = %d %s", resp.StatusCode, b)
	}
}

// metricsSay polls /metrics until it holds line.
func metricsSay(t *testing.T, addr, line string) {
	t.Helper()
	testkit.Until(t, line, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), line+"\n")
	})
}

// TestShutdownEndsStalledJSONAndWaits: at shutdown a stalled record save
// and a stalled lock request are cut off with 408, and a long poll and a
// lock wait answer their "not yet" at once; Serve returns nil instead of
// running out its grace.
func TestShutdownEndsStalledJSONAndWaits(t *testing.T) {
	t.Parallel()
	addr, shutdown := serveReal(t, server.Options{ShutdownGrace: 20 * time.Second, BodyGrace: 5 * time.Minute, RequestTimeout: time.Minute})
	holder := dial(t, addr)
	post := func(c net.Conn, path, body string) {
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body)
	}
	post(holder, "/v1/locks/l/acquire", `{"owner":"a","ttl":"1m0s"}`)
	if status, body := readAnswer(t, holder); status != http.StatusOK {
		t.Fatalf("acquire = %d %s", status, body)
	}
	record := dial(t, addr)
	fmt.Fprintf(record, "PUT /v1/records/r HTTP/1.1\r\nHost: x\r\nIf-None-Match: *\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	lockBody := dial(t, addr)
	fmt.Fprintf(lockBody, "POST /v1/locks/m/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"owner\":")
	longPoll := dial(t, addr)
	fmt.Fprintf(longPoll, "GET /v1/groups/g/wait?timeout=60s HTTP/1.1\r\nHost: x\r\n\r\n")
	lockWait := dial(t, addr)
	post(lockWait, "/v1/locks/l/acquire", `{"owner":"b","ttl":"1m0s","wait":"1m0s"}`)
	metricsSay(t, addr, "stead_http_requests_in_flight 5") // the four and /metrics
	if err := shutdown(); err != nil {
		t.Fatalf("Serve: %v, want nil: nothing in flight should hold shutdown", err)
	}
	for name, c := range map[string]net.Conn{"stalled record save": record, "stalled lock body": lockBody} {
		if status, body := readAnswer(t, c); status != http.StatusRequestTimeout {
			t.Errorf("%s = %d %s, want 408", name, status, body)
		}
	}
	if status, body := readAnswer(t, longPoll); status != http.StatusOK || body != `{"claimable":false}`+"\n" {
		t.Errorf("long poll = %d %s, want 200 claimable false", status, body)
	}
	if status, body := readAnswer(t, lockWait); status != http.StatusConflict || !strings.Contains(body, `"code":"held"`) {
		t.Errorf("lock wait = %d %s, want 409 held", status, body)
	}
}

// TestSlowRecordSave: a record save whose body stalls is cut off at the
// minimum body rate, like an upload, so it cannot hold an upload slot for
// the whole request timeout.
func TestSlowRecordSave(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{BodyGrace: 200 * time.Millisecond, MinBodyRate: 1000, MaxUploads: 1, RequestTimeout: 5 * time.Minute})
	c := dial(t, addr)
	fmt.Fprintf(c, "PUT /v1/records/slot HTTP/1.1\r\nHost: x\r\nIf-None-Match: *\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	status, body := readAnswer(t, c)
	if status != http.StatusRequestTimeout || !strings.Contains(body, `"code":"timeout"`) {
		t.Fatalf("stalled record save = %d %s, want 408 timeout", status, body)
	}
	metricsSay(t, addr, "stead_http_uploads_in_progress 0")
}

// pacedReader yields n bytes, chunk at a time, one chunk every "every".
type pacedReader struct {
	n, chunk int
	every    time.Duration
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(p.every)
	k := min(p.chunk, p.n, len(b))
	for i := range k {
		b[i] = 'a'
	}
	p.n -= k
	return k, nil
}

// TestUploadLongerThanRequestTimeout: an upload that keeps above the
// minimum rate but lasts longer than the request timeout gets its answer.
func TestUploadLongerThanRequestTimeout(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{RequestTimeout: time.Second, BodyGrace: time.Second, MinBodyRate: 1024})
	body := &pacedReader{n: 8 << 10, chunk: 2 << 10, every: 700 * time.Millisecond} // about 3 KiB/s for 2.8s, each wait longer than the database deadline
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/blobs", body)
	req.ContentLength = 8 << 10
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("upload: %v, want 201", err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload = %d %s, want 201", resp.StatusCode, b)
	}
}

// TestRecordSaveMemoryBudget: large record saves in flight are bounded by
// a byte budget: past it a save is refused at once with 503 busy rather
// than read into memory.
func TestRecordSaveMemoryBudget(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{BodyGrace: 5 * time.Minute})
	save := func(id string, length int) net.Conn {
		c := dial(t, addr)
		fmt.Fprintf(c, "PUT /v1/records/%s HTTP/1.1\r\nHost: x\r\nIf-None-Match: *\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", id, length)
		return c
	}
	// 21 MiB: about the largest save, a 16 MiB payload in base64.
	for i := range 4 {
		save(fmt.Sprint("big", i), 21<<20)
	}
	metricsSay(t, addr, "stead_http_uploads_in_progress 4")
	status, body := readAnswer(t, save("one-more", 21<<20))
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"busy"`) {
		t.Fatalf("a fifth large save = %d %s, want 503 busy", status, body)
	}
}

// TestUncleanPath: a path with dot segments or doubled slashes answers
// JSON 404, not net/http's redirect with an HTML body.
func TestUncleanPath(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{})
	for _, p := range []string{"/v1/blobs/../healthz", "/v1//blobs", "/./healthz"} {
		c := dial(t, addr)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", p)
		if status, body := readAnswer(t, c); status != http.StatusNotFound || !strings.Contains(body, `"code":"route_not_found"`) {
			t.Errorf("GET %s = %d %s, want 404 route_not_found", p, status, body)
		}
	}
}
