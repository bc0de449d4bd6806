package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// asStead, set in a process's environment, makes the test binary run as
// the stead command (main) instead of running tests: startServe
// re-executes the binary so, and no test builds one.
const asStead = "STEAD_E2E_AS_STEAD"

func TestMain(m *testing.M) {
	if os.Getenv(asStead) != "" {
		main()
		return
	}
	pgtest.Main(m)
}

// process is a running stead serve.
type process struct {
	cmd  *exec.Cmd
	base string
	done chan error
}

// startServe starts stead serve over db on a free loopback port with the
// given token and extra flags, and stops it when t ends.
func startServe(t *testing.T, db, token string, flags ...string) *process {
	t.Helper()
	args := append([]string{"--db", db, "--log-level", "error", "serve", "--addr", "127.0.0.1:0"}, flags...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asStead+"=1", "STEAD_TOKEN="+token)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("stead serve printed no address: %v", err)
	}
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("stead serve printed %q", line)
	}
	p.base = strings.TrimSpace(line[i:])
	return p
}

// client calls the API with a token.
type client struct {
	t     *testing.T
	base  string
	token string
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) code() string {
	var e struct{ Code string }
	json.Unmarshal([]byte(a.body), &e)
	return e.Code
}

func (c client) do(method, path, body string, header ...string) answer {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// check fails t unless a has status and, when code is set, that code.
func check(t *testing.T, what string, a answer, status int, code string) {
	t.Helper()
	if a.status != status || (code != "" && a.code() != code) {
		t.Errorf("%s = %d %s, want %d %s", what, a.status, a.body, status, code)
	}
}

// TestServeProcess drives every route of a real stead serve process over
// PostgreSQL with Go's HTTP client, then stops it with SIGTERM.
func TestServeProcess(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	p := startServe(t, db.StoreURL(), "e2e-token", "--max-blob-size", "1024", "--body-grace", "300ms", "--min-body-rate", "1000")
	c := client{t: t, base: p.base, token: "e2e-token"}
	anon := client{t: t, base: p.base}
	wrong := client{t: t, base: p.base, token: "e2e-token-not"}

	// Probes and auth.
	check(t, "healthz", anon.do("GET", "/healthz", ""), 200, "")
	check(t, "readyz", anon.do("GET", "/readyz", ""), 200, "")
	check(t, "put without a token", anon.do("PUT", "/v1/blobs", "x"), 401, "unauthorized")
	check(t, "put with a wrong token", wrong.do("PUT", "/v1/blobs", "x"), 401, "unauthorized")
	check(t, "lowercase bearer", anon.do("GET", "/v1/info", "", "Authorization", "bearer e2e-token"), 200, "")
	check(t, "token in the query is not a token", anon.do("GET", "/v1/info?token=e2e-token", ""), 401, "unauthorized")
	check(t, "metrics without a token", anon.do("GET", "/metrics", ""), 401, "unauthorized")
	check(t, "unknown route", c.do("GET", "/v1/nothing", ""), 404, "route_not_found")
	check(t, "wrong method", c.do("POST", "/v1/schema", ""), 405, "method_not_allowed")
	check(t, "schema", c.do("GET", "/v1/schema", ""), 200, "")
	check(t, "migrate", c.do("POST", "/v1/schema/migrate", ""), 200, "")

	// Blobs.
	value := "end to end"
	key := blob.KeyOf([]byte(value)).String()
	check(t, "put", c.do("PUT", "/v1/blobs", value), 201, "")
	check(t, "post again", c.do("POST", "/v1/blobs", value), 200, "")
	check(t, "put under a wrong key", c.do("PUT", "/v1/blobs/"+blob.KeyOf([]byte("other")).String(), value), 400, "digest_mismatch")
	check(t, "put under its key", c.do("PUT", "/v1/blobs/"+key, value), 200, "")
	d := sha256.Sum256([]byte("not it"))
	check(t, "Content-Digest mismatch", c.do("POST", "/v1/blobs", value, "Content-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(d[:])+":"), 400, "digest_mismatch")
	check(t, "oversized body", c.do("PUT", "/v1/blobs", strings.Repeat("x", 2048)), 413, "too_large")
	check(t, "malformed key", c.do("GET", "/v1/blobs/sha256:ABC", ""), 400, "invalid_key")
	check(t, "percent-encoded traversal", c.do("GET", "/v1/blobs/%2e%2e%2f%2e%2e%2fetc", ""), 400, "invalid_key")
	if a := c.do("GET", "/v1/blobs/"+key, "", "Range", "bytes=4-6"); a.status != 206 || a.body != "to " {
		t.Errorf("range = %d %q", a.status, a.body)
	}
	check(t, "unsatisfiable range", c.do("GET", "/v1/blobs/"+key, "", "Range", "bytes=100-"), 416, "range_not_satisfiable")
	check(t, "If-None-Match", c.do("GET", "/v1/blobs/"+key, "", "If-None-Match", `"`+key+`"`), 304, "")
	if a := c.do("HEAD", "/v1/blobs/"+key, ""); a.status != 200 || a.header.Get("Content-Length") != fmt.Sprint(len(value)) {
		t.Errorf("head = %d %v", a.status, a.header)
	}
	if a := c.do("GET", "/v1/blobs?limit=10", ""); a.status != 200 || !strings.Contains(a.body, key) {
		t.Errorf("list = %d %s", a.status, a.body)
	}
	// The upload's pin protects the blob: a delete is refused.
	check(t, "delete of a pinned blob", c.do("DELETE", "/v1/blobs/"+key, ""), 409, "protected")
	check(t, "get after a refused delete", c.do("GET", "/v1/blobs/"+key, ""), 200, "")

	// A body slower than the minimum rate is cut off.
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer e2e-token\r\nContent-Length: 500\r\n\r\nx")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 408 {
		t.Errorf("slow body: %v %v, want 408", resp, err)
	}
	conn.Close()

	// Locks.
	check(t, "acquire", c.do("POST", "/v1/locks/e2e/acquire", `{"owner":"a","ttl":"30s"}`), 200, "")
	check(t, "acquire held", c.do("POST", "/v1/locks/e2e/acquire", `{"owner":"b","ttl":"30s"}`), 409, "held")
	check(t, "renew", c.do("POST", "/v1/locks/e2e/renew", `{"owner":"a","token":1,"ttl":"30s"}`), 200, "")
	check(t, "release", c.do("POST", "/v1/locks/e2e/release", `{"owner":"a","token":1}`), 200, "")
	check(t, "release again", c.do("POST", "/v1/locks/e2e/release", `{"owner":"a","token":1}`), 409, "lost")
	check(t, "client clock refused", c.do("POST", "/v1/locks/e2e/acquire", `{"owner":"a","ttl":"30s","now":"2099-01-01T00:00:00Z"}`), 400, "bad_request")

	// Records.
	check(t, "register", c.do("PUT", "/v1/groups/g", ""), 200, "")
	check(t, "group exists", c.do("GET", "/v1/groups/g", ""), 200, "")
	rec := `{"group":"g","status":"active"}`
	check(t, "save without precondition", c.do("PUT", "/v1/records/r1", rec), 428, "precondition_required")
	check(t, "create", c.do("PUT", "/v1/records/r1", rec, "If-None-Match", "*"), 201, "")
	check(t, "create again", c.do("PUT", "/v1/records/r1", rec, "If-None-Match", "*"), 412, "conflict")
	check(t, "update", c.do("PUT", "/v1/records/r1", rec, "If-Match", `"1"`), 200, "")
	check(t, "stale update", c.do("PUT", "/v1/records/r1", rec, "If-Match", `"1"`), 412, "conflict")
	check(t, "weak If-Match", c.do("PUT", "/v1/records/r1", rec, "If-Match", `W/"2"`), 400, "invalid_argument")
	if a := c.do("GET", "/v1/records/r1", ""); a.status != 200 || a.header.Get("ETag") != `"2"` {
		t.Errorf("load = %d %v", a.status, a.header)
	}
	check(t, "claimable", c.do("GET", "/v1/groups/g/claimable", ""), 200, "")
	check(t, "wait", c.do("GET", "/v1/groups/g/wait?timeout=1s", ""), 200, "")
	check(t, "claim", c.do("POST", "/v1/records/r1/claim", `{"group":"g","owner":"w","ttl":"1m"}`), 200, "")
	check(t, "claim leased", c.do("POST", "/v1/records/r1/claim", `{"group":"g","owner":"x","ttl":"1m"}`), 409, "leased")
	check(t, "renew record", c.do("POST", "/v1/records/r1/renew", `{"group":"g","owner":"w","incarnation":1,"ttl":"1m"}`), 200, "")
	check(t, "claim next", c.do("POST", "/v1/groups/g/claim-next", `{"owner":"w","ttl":"1m","n":3}`), 200, "")
	check(t, "probe", c.do("GET", "/v1/groups/g/probe", ""), 200, "")
	check(t, "delete record", c.do("DELETE", "/v1/records/r1", ""), 204, "")
	check(t, "load deleted", c.do("GET", "/v1/records/r1", ""), 404, "not_found")

	// Metrics, parsed.
	a := c.do("GET", "/metrics", "")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(a.body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	for _, name := range []string{"stead_http_requests_total", "stead_http_request_duration_seconds", "stead_blob_puts_total", "stead_lock_acquires_total", "stead_record_saves_total", "stead_record_claims_total"} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// SIGTERM: a clean exit.
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("stead serve after SIGTERM: %v", err)
		}
		p.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("stead serve did not exit after SIGTERM")
	}
}

// TestConformanceProcess runs the engine suite's Blob, Upload and
// Lifecycle areas against a real stead serve process over the default
// engine, SQLite: it proves the binary's wiring (flags, token, routes,
// shutdown). engine/remote runs every area over HTTP against a server in
// process.
func TestConformanceProcess(t *testing.T) {
	t.Parallel()
	enginetest.Run(t, enginetest.Harness{
		Areas:           []string{"Blob", "Lifecycle", "Upload"},
		CancelMayCommit: true,
		ChunkSize:       processChunk,
		NoFuncSources:   "a Go-function source cannot cross HTTP, and a server over SQLite takes no SQL sources",
		New: func(t *testing.T) engine.Engine {
			p := startServe(t, "sqlite://"+filepath.Join(t.TempDir(), "s.db"), "conformance", "--allow-client-clock")
			eng, err := remote.Open(context.Background(), remote.Config{URL: p.base, Token: "conformance"})
			if err != nil {
				t.Fatalf("remote.Open: %v", err)
			}
			t.Cleanup(func() { eng.Close() })
			return eng
		},
	})
}

// processChunk is the chunk size of the chunked conformance runs through a
// real server: each chunk is a round trip.
const processChunk = 64 << 10
