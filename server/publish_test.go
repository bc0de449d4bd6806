package server_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/internal/testing/apicheck"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/server"
)

// slowServer serves a SQLite store (which heeds its context) whose chunk
// reads each take delay, and counts them.
func slowServer(t *testing.T, opts server.Options, delay time.Duration) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var reads atomic.Int64
	inner, err := stead.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	eng := faultengine.New(inner.Engine(), faultengine.Func(func(op faultengine.Op) error {
		if op == faultengine.BlobReadChunk {
			reads.Add(1)
			time.Sleep(delay) // a loaded database: the thing tested is real time
		}
		return nil
	}))
	st, err := stead.New(context.Background(), eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, opts)))
	t.Cleanup(srv.Close)
	return srv, &reads
}

// uploadChunks begins an upload and writes value in chunks of n bytes,
// returning the chunk set.
func uploadChunks(t *testing.T, srv *httptest.Server, value []byte, n int) string {
	t.Helper()
	a := do(t, "POST", srv.URL+"/v1/uploads?lease=1m", "", nil)
	var up struct{ Chunks int64 }
	mustJSON(t, a.body, &up)
	set := fmt.Sprint(up.Chunks)
	for off := 0; off < len(value); off += n {
		end := min(off+n, len(value))
		if a := do(t, "PUT", fmt.Sprintf("%s/v1/chunks/%s/%d?lease=1m", srv.URL, set, off), string(value[off:end]), nil); a.status != http.StatusNoContent {
			t.Fatalf("chunk at %d = %d %s", off, a.status, a.body)
		}
	}
	return set
}

// TestSlowPublish: a publish whose work outlasts BodyGrace after its small
// JSON body still succeeds, and reads no chunk back: the server hashed
// the chunks as they arrived. (A read deadline left from the body used to
// end the request's context mid-publish: 503 "request cancelled".)
func TestSlowPublish(t *testing.T) {
	t.Parallel()
	srv, reads := slowServer(t, server.Options{BodyGrace: 200 * time.Millisecond}, 100*time.Millisecond)
	value := make([]byte, 10<<10)
	rand.Read(value)
	key := blob.KeyOf(value)
	set := uploadChunks(t, srv, value, 1<<10)
	a := do(t, "POST", srv.URL+"/v1/uploads/"+set+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil)
	if a.status != http.StatusOK {
		t.Fatalf("publish = %d %s", a.status, a.body)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("publish read %d chunks back; the server hashed them as they came", n)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs/"+key.String(), "", nil); a.status != http.StatusOK || a.body != string(value) {
		t.Fatalf("GET after publish = %d (%d bytes)", a.status, len(a.body))
	}
}

// TestSlowPublishRereads: a publish the server cannot vouch for (its
// chunks came out of order) re-reads them, for longer than BodyGrace
// after its body, and succeeds; under a lie it is 400 digest_mismatch.
func TestSlowPublishRereads(t *testing.T) {
	t.Parallel()
	srv, reads := slowServer(t, server.Options{BodyGrace: 200 * time.Millisecond}, 100*time.Millisecond)
	value := []byte(strings.Repeat("out of order ", 400))
	key := blob.KeyOf(value)
	a := do(t, "POST", srv.URL+"/v1/uploads?lease=1m", "", nil)
	var up struct{ Chunks int64 }
	mustJSON(t, a.body, &up)
	set := fmt.Sprint(up.Chunks)
	half := len(value) / 2
	for _, off := range []int{half, 0} {
		end := len(value)
		if off == 0 {
			end = half
		}
		if a := do(t, "PUT", fmt.Sprintf("%s/v1/chunks/%s/%d?lease=1m", srv.URL, set, off), string(value[off:end]), nil); a.status != http.StatusNoContent {
			t.Fatalf("chunk at %d = %d %s", off, a.status, a.body)
		}
	}
	lie := blob.KeyOf([]byte("a lie"))
	if a := do(t, "POST", srv.URL+"/v1/uploads/"+set+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, lie, len(value)), nil); a.status != http.StatusBadRequest || a.errCode(t) != "digest_mismatch" {
		t.Fatalf("publish under a lie = %d %s", a.status, a.body)
	}
	// Padding the reads past BodyGrace: the first publish read two chunks.
	if a := do(t, "POST", srv.URL+"/v1/uploads/"+set+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil); a.status != http.StatusOK {
		t.Fatalf("publish = %d %s", a.status, a.body)
	}
	if reads.Load() == 0 {
		t.Fatal("an out-of-order upload was published without re-reading it")
	}
}
