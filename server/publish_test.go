package server_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/internal/testing/apicheck"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/server"
)

// slowServer serves a SQLite store (which heeds its context) whose calls
// of op each take delay, and counts its chunk reads.
func slowServer(t *testing.T, opts server.Options, op faultengine.Op, delay time.Duration) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var reads atomic.Int64
	inner, err := stead.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	eng := faultengine.New(inner.Engine(), faultengine.Func(func(o faultengine.Op) error {
		if o == faultengine.BlobReadChunk {
			reads.Add(1)
		}
		if o == op {
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

// beginUpload begins an upload with a minute's lease on the server at
// base, the query's parameters added, and returns its id.
func beginUpload(t *testing.T, base, query string) string {
	t.Helper()
	a := do(t, "POST", base+"/v1/uploads?lease=1m"+query, "", nil)
	var up struct {
		ID   string
		Size int64
	}
	if a.status != http.StatusCreated {
		t.Fatalf("begin = %d %s", a.status, a.body)
	}
	mustJSON(t, a.body, &up)
	if len(up.ID) != 16 || up.Size != 0 {
		t.Fatalf("begin = %s, want a 16-digit id and size 0", a.body)
	}
	return up.ID
}

// appendAt appends part at off to the upload id and fails t unless the
// answer is 200 with the size after it.
func appendAt(t *testing.T, base, id string, off int, part []byte, query string) {
	t.Helper()
	a := do(t, "PUT", fmt.Sprintf("%s/v1/uploads/%s/%d?lease=1m%s", base, id, off, query), string(part), nil)
	var up struct {
		ID   string
		Size int64
	}
	if a.status != http.StatusOK {
		t.Fatalf("append at %d = %d %s", off, a.status, a.body)
	}
	mustJSON(t, a.body, &up)
	if up.ID != id || up.Size != int64(off+len(part)) {
		t.Fatalf("append of %d bytes at %d = %s", len(part), off, a.body)
	}
}

// uploadChunks begins an upload and appends value in parts of n bytes,
// returning the upload's id.
func uploadChunks(t *testing.T, srv *httptest.Server, value []byte, n int) string {
	t.Helper()
	id := beginUpload(t, srv.URL, "")
	for off := 0; off < len(value); off += n {
		appendAt(t, srv.URL, id, off, value[off:min(off+n, len(value))], "")
	}
	return id
}

// TestSlowPublish: a publish whose work outlasts BodyGrace after its small
// JSON body (a slow database's put) still succeeds. (A read deadline left
// from the body used to end the request's context mid-publish: 503
// "request cancelled".)
func TestSlowPublish(t *testing.T) {
	t.Parallel()
	srv, _ := slowServer(t, server.Options{BodyGrace: 200 * time.Millisecond}, faultengine.BlobPut, time.Second)
	value := make([]byte, 10<<10)
	rand.Read(value)
	key := blob.KeyOf(value)
	id := uploadChunks(t, srv, value, 1<<10)
	a := do(t, "POST", srv.URL+"/v1/uploads/"+id+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil)
	if a.status != http.StatusCreated {
		t.Fatalf("publish = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs/"+key.String(), "", nil); a.status != http.StatusOK || a.body != string(value) {
		t.Fatalf("GET after publish = %d (%d bytes)", a.status, len(a.body))
	}
}

// TestPublishReadsNothing: a publish reads none of the upload's bytes
// back: the server hashed them as they arrived,
// and kept the hash in the store with each append; under a lie it is 400
// digest_mismatch, the upload kept.
func TestPublishReadsNothing(t *testing.T) {
	t.Parallel()
	srv, reads := slowServer(t, server.Options{}, "", 0)
	value := make([]byte, blob.InlineLimit+10<<10)
	rand.Read(value)
	key := blob.KeyOf(value)
	id := uploadChunks(t, srv, value, len(value)/3+1)
	lie := blob.KeyOf([]byte("a lie"))
	if a := do(t, "POST", srv.URL+"/v1/uploads/"+id+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, lie, len(value)), nil); a.status != http.StatusBadRequest || a.errCode(t) != "digest_mismatch" {
		t.Fatalf("publish under a lie = %d %s", a.status, a.body)
	}
	if a := do(t, "POST", srv.URL+"/v1/uploads/"+id+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil); a.status != http.StatusCreated {
		t.Fatalf("publish = %d %s", a.status, a.body)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("publish read %d chunks back; the server hashed them as they came", n)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs/"+key.String(), "", nil); a.status != http.StatusOK || a.body != string(value) {
		t.Fatalf("GET after publish = %d (%d bytes)", a.status, len(a.body))
	}
}
