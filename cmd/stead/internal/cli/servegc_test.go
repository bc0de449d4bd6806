package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeSweeps: a server with the registry sweeps on its interval, and
// its sweeps show in /metrics; a negative interval is a usage error.
func TestServeSweeps(t *testing.T) {
	t.Parallel()
	if code, _, stderr := run(t, context.Background(), "--db", "mem://", "serve", "--gc-interval", "-1s"); code != 2 || !strings.Contains(stderr, "negative") {
		t.Fatalf("serve --gc-interval -1s = %d %q, want 2 naming it negative", code, stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	var wg sync.WaitGroup
	code := -1
	wg.Go(func() {
		code = Run(ctx, []string{"--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--gc-interval", "1ms"}, pw, &stderr)
		pw.Close()
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed nothing: %v", err)
	}
	go io.Copy(io.Discard, pr)
	base := strings.TrimSpace(line[strings.Index(line, "http://"):])
	// An empty store declares no liveness: its sweeps delete nothing and
	// are counted so. Wait (bounded) for the first.
	const want = `stead_gc_sweeps_total{result="no_liveness"}`
	var body string
	for range 1000 {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if body = string(b); strings.Contains(body, want) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if !strings.Contains(body, want) {
		t.Fatalf("no sweep in /metrics:\n%s", body)
	}
	if code != 0 {
		t.Fatalf("serve exited %d: %s", code, stderr.String())
	}
}
