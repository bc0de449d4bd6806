package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
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

// TestUploadEndpoints drives the chunked-put endpoints the remote engine
// uses: hostile input is refused with 400/413 and stores nothing, and a
// publish whose chunks do not hash to the claimed key publishes nothing.
func TestUploadEndpoints(t *testing.T) {
	t.Parallel()
	srv := newServer(t, server.Options{MaxBlobSize: 1 << 20})
	a := do(t, http.MethodPost, srv.URL+"/v1/uploads?lease=1m", "", nil)
	var up struct{ Chunks int64 }
	if err := json.Unmarshal([]byte(a.body), &up); a.status != http.StatusCreated || err != nil || up.Chunks <= 0 {
		t.Fatalf("POST /v1/uploads = %d %q", a.status, a.body)
	}
	set := fmt.Sprint(up.Chunks)
	bad := []struct {
		name, method, path, body string
		status                   int
	}{
		{"begin with no lease", http.MethodPost, "/v1/uploads", "", http.StatusBadRequest},
		{"begin with a lease over a day", http.MethodPost, "/v1/uploads?lease=25h", "", http.StatusBadRequest},
		{"begin with a lease under a microsecond", http.MethodPost, "/v1/uploads?lease=999ns", "", http.StatusBadRequest},
		{"zero set", http.MethodPut, "/v1/chunks/0/0?lease=1m", "x", http.StatusBadRequest},
		{"set not a number", http.MethodPut, "/v1/chunks/x/0?lease=1m", "x", http.StatusBadRequest},
		{"negative offset", http.MethodPut, "/v1/chunks/" + set + "/-1?lease=1m", "x", http.StatusBadRequest},
		{"offset past MaxBlobSize", http.MethodPut, "/v1/chunks/" + set + "/1048576?lease=1m", "x", http.StatusBadRequest},
		{"no lease", http.MethodPut, "/v1/chunks/" + set + "/0", "x", http.StatusBadRequest},
		{"negative lease", http.MethodPut, "/v1/chunks/" + set + "/0?lease=-1s", "x", http.StatusBadRequest},
		{"empty chunk", http.MethodPut, "/v1/chunks/" + set + "/0?lease=1m", "", http.StatusBadRequest},
		{"chunk over the wire limit", http.MethodPut, "/v1/chunks/" + set + "/0?lease=1m", strings.Repeat("x", 16<<20+1), http.StatusRequestEntityTooLarge},
		{"read of a negative offset", http.MethodGet, "/v1/chunks/" + set + "/-1", "", http.StatusBadRequest},
		{"publish of a zero set", http.MethodPost, "/v1/uploads/0/publish", `{"key":"` + blob.KeyOf([]byte("x")).String() + `","size":1}`, http.StatusBadRequest},
		{"publish of a bad key", http.MethodPost, "/v1/uploads/" + set + "/publish", `{"key":"sha256:nope","size":1}`, http.StatusBadRequest},
	}
	for _, c := range bad {
		if a := do(t, c.method, srv.URL+c.path, c.body, nil); a.status != c.status {
			t.Errorf("%s: %s %s = %d %q, want %d", c.name, c.method, c.path, a.status, a.body, c.status)
		}
	}
	if a := do(t, http.MethodGet, srv.URL+"/v1/chunks/"+set+"/0", "", nil); a.status != http.StatusNotFound {
		t.Fatalf("after refused writes, the upload holds a chunk: %d %q", a.status, a.body)
	}

	if a := do(t, http.MethodPut, fmt.Sprintf("%s/v1/chunks/%d/0?lease=1m", srv.URL, up.Chunks^1), "x", nil); a.status != http.StatusConflict || a.errCode(t) != "lost" {
		t.Fatalf("chunk write to a set never begun = %d %q, want 409 lost", a.status, a.body)
	}
	value := "hello, chunks"
	if a := do(t, http.MethodPut, srv.URL+"/v1/chunks/"+set+"/0?lease=1m", value, nil); a.status != http.StatusNoContent {
		t.Fatalf("chunk write = %d %q", a.status, a.body)
	}
	lie := blob.KeyOf([]byte("something else"))
	a = do(t, http.MethodPost, srv.URL+"/v1/uploads/"+set+"/publish?owner=tester&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, lie, len(value)), nil)
	if a.status != http.StatusBadRequest || a.errCode(t) != "digest_mismatch" {
		t.Fatalf("publish under a lie = %d %q, want 400 digest_mismatch", a.status, a.body)
	}
	if a := do(t, http.MethodGet, srv.URL+"/v1/blobs/"+lie.String(), "", nil); a.status != http.StatusNotFound {
		t.Fatalf("the lie was published: %d", a.status)
	}
	key := blob.KeyOf([]byte(value))
	a = do(t, http.MethodPost, srv.URL+"/v1/uploads/"+set+"/publish?owner=tester&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil)
	if a.status != http.StatusOK {
		t.Fatalf("publish = %d %q", a.status, a.body)
	}
	if a := do(t, http.MethodGet, srv.URL+"/v1/blobs/"+key.String(), "", nil); a.status != http.StatusOK || a.body != value {
		t.Fatalf("GET of the published blob = %d %q", a.status, a.body)
	}
	a = do(t, http.MethodGet, srv.URL+"/v1/chunks/"+set+"/5", "", nil)
	if a.status != http.StatusOK || a.body != value || a.header.Get("Stead-Chunk-Start") != "0" {
		t.Fatalf("chunk read = %d %q start %q", a.status, a.body, a.header.Get("Stead-Chunk-Start"))
	}
	if a := do(t, http.MethodPut, srv.URL+"/v1/chunks/"+set+"/13?lease=1m", "more", nil); a.status != http.StatusConflict {
		t.Fatalf("a chunk after the publish = %d %q, want 409 lost", a.status, a.body)
	}
	if a := do(t, http.MethodDelete, srv.URL+"/v1/uploads/"+set, "", nil); a.status != http.StatusNoContent {
		t.Fatalf("abort of a published upload = %d %q, want 204", a.status, a.body)
	}
}

// TestUploadChunkEndPastMaxBlobSize checks that a chunk whose end is past
// MaxBlobSize, or past the largest int64 (where offset plus length wraps
// around), is refused with 400 and stores nothing.
func TestUploadChunkEndPastMaxBlobSize(t *testing.T) {
	t.Parallel()
	for _, max := range []int64{1 << 20, math.MaxInt64} {
		srv := newServer(t, server.Options{MaxBlobSize: max})
		a := do(t, http.MethodPost, srv.URL+"/v1/uploads?lease=1m", "", nil)
		var up struct{ Chunks int64 }
		if err := json.Unmarshal([]byte(a.body), &up); a.status != http.StatusCreated || err != nil {
			t.Fatalf("POST /v1/uploads = %d %q", a.status, a.body)
		}
		for _, off := range []int64{max - 9, max - 5, max - 2} {
			path := fmt.Sprintf("%s/v1/chunks/%d/%d?lease=1m", srv.URL, up.Chunks, off)
			if a := do(t, http.MethodPut, path, "0123456789", nil); a.status != http.StatusBadRequest {
				t.Errorf("MaxBlobSize %d: chunk of 10 bytes at %d = %d %q, want 400", max, off, a.status, a.body)
			}
			if a := do(t, http.MethodGet, path, "", nil); a.status != http.StatusNotFound {
				t.Errorf("MaxBlobSize %d: after the refused chunk at %d, GET = %d, want 404", max, off, a.status)
			}
		}
		path := fmt.Sprintf("%s/v1/chunks/%d/%d?lease=1m", srv.URL, up.Chunks, max-10)
		if a := do(t, http.MethodPut, path, "0123456789", nil); a.status != http.StatusNoContent {
			t.Errorf("MaxBlobSize %d: chunk of 10 bytes ending at it = %d %q, want 204", max, a.status, a.body)
		}
	}
}
