package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/server"
)

// TestLargeBlobStreams uploads a 20 MiB value the way curl -T does (a
// PUT with a Content-Length, the body streamed) and reads ranges of it
// back through a real server over SQLite, sampling the live heap all the
// while: both directions stream, so the heap never holds more than a few
// chunks, never the value.
func TestLargeBlobStreams(t *testing.T) {
	const size = 20 << 20
	st, err := stead.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// Not wrapped in the API check: its copies of the bodies would be
	// counted as the server's heap. Other tests check these routes.
	srv := httptest.NewServer(server.New(st, server.Options{Logger: quiet}))
	t.Cleanup(srv.Close)

	content := func() io.Reader { return io.LimitReader(rand.NewChaCha8([32]byte{1}), size) }
	h := sha256.New()
	io.Copy(h, content())
	want := fmt.Sprintf("sha256:%x", h.Sum(nil))

	// The sample counts garbage not yet swept, which the pacer lets grow
	// up to GOGC% of the live heap whatever earlier tests left live:
	// collect often, from a collected start, so growth is what streaming
	// holds.
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	base := liveHeap()
	peak := sampleHeap(t)

	req, err := http.NewRequest(http.MethodPut, srv.URL+"/v1/blobs", content())
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Key  string
		Size int64
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || info.Key != want || info.Size != size {
		t.Fatalf("PUT of %d bytes = %d %+v (%v), want 201 %s", size, resp.StatusCode, info, err, want)
	}

	// The whole value, hashed as it arrives.
	resp, err = http.Get(srv.URL + "/v1/blobs/" + want)
	if err != nil {
		t.Fatal(err)
	}
	h.Reset()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || n != size || fmt.Sprintf("sha256:%x", h.Sum(nil)) != want {
		t.Fatalf("GET = %d bytes hashing to %x (%v), want %d bytes of %s", n, h.Sum(nil), err, size, want)
	}

	// A range across a chunk boundary, deep in the value.
	src := content()
	io.CopyN(io.Discard, src, 15<<20-10)
	all, _ := io.ReadAll(io.LimitReader(src, 20))
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/v1/blobs/"+want, nil)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", 15<<20-10, 15<<20+9))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(got, all) {
		t.Fatalf("ranged GET = %d %x (%v), want 206 %x", resp.StatusCode, got, err, all)
	}

	// Generous: the value is 20 MiB; a buffered path would hold all of it.
	const bound = 16 << 20
	grew := peak() - base
	t.Logf("live heap grew by %d bytes at most", grew)
	if grew > bound {
		t.Fatalf("live heap grew by %d bytes while streaming a %d-byte value, want under %d", grew, size, bound)
	}
}

// liveHeap returns the bytes of live and not yet swept heap objects.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// sampleHeap samples liveHeap every millisecond until the test ends; the
// returned function stops sampling and returns the highest sample.
func sampleHeap(t *testing.T) func() int64 {
	var (
		mu   sync.Mutex
		peak int64
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			mu.Lock()
			peak = max(peak, liveHeap())
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop := func() int64 {
		once.Do(func() { close(done); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
	t.Cleanup(func() { stop() })
	return stop
}
