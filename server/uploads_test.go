package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/internal/testing/apicheck"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

// status answers the upload's status, failing t unless it is 200 with
// the upload's id; it returns the size.
func status(t *testing.T, base, id, query string) int64 {
	t.Helper()
	a := do(t, "GET", base+"/v1/uploads/"+id+"?"+query, "", nil)
	var up struct {
		ID    string
		Size  int64
		State []byte
	}
	if a.status != http.StatusOK {
		t.Fatalf("status of %s = %d %s", id, a.status, a.body)
	}
	mustJSON(t, a.body, &up)
	if up.ID != id || len(up.State) == 0 {
		t.Fatalf("status of %s = %s, want its id and a hash state", id, a.body)
	}
	return up.Size
}

// TestUploadEndpoints drives the upload endpoints the remote engine uses
// with hostile input: each refusal is the documented answer and changes
// nothing; an id malformed, unknown or another owner's is answered as
// unknown; an append must start at the upload's size, however far off; a publish whose
// claimed key or size is wrong publishes nothing and keeps the upload.
func TestUploadEndpoints(t *testing.T) {
	t.Parallel()
	const maxSize = 1 << 20
	srv := newServer(t, server.Options{MaxBlobSize: maxSize})
	base := srv.URL
	id := beginUpload(t, base, "&upload_owner="+url.QueryEscape("repo/a"))
	own := "upload_owner=" + url.QueryEscape("repo/a")
	n, _ := strconv.ParseUint(id, 16, 64)
	unknown := fmt.Sprintf("%016x", n^1)

	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"begin with no lease", "POST", "/v1/uploads", "", 400, "bad_request"},
		{"begin with a lease over a day", "POST", "/v1/uploads?lease=25h", "", 400, "bad_request"},
		{"begin with a lease under a microsecond", "POST", "/v1/uploads?lease=999ns", "", 400, "bad_request"},
		{"begin with a zero lease", "POST", "/v1/uploads?lease=0s", "", 400, "bad_request"},
		{"begin for an owner not UTF-8", "POST", "/v1/uploads?lease=1m&upload_owner=%FF", "", 400, "invalid_argument"},
		{"append at a negative offset", "PUT", "/v1/uploads/" + id + "/-1?lease=1m&" + own, "x", 400, "invalid_argument"},
		{"append at MaxBlobSize", "PUT", "/v1/uploads/" + id + "/1048576?lease=1m&" + own, "x", 409, "conflict"},
		{"append at 2^62", "PUT", "/v1/uploads/" + id + "/4611686018427387904?lease=1m&" + own, "x", 409, "conflict"},
		{"append at MaxInt64", "PUT", "/v1/uploads/" + id + "/9223372036854775807?lease=1m&" + own, "x", 409, "conflict"},
		{"append at past MaxInt64", "PUT", "/v1/uploads/" + id + "/9223372036854775808?lease=1m&" + own, "x", 400, "bad_request"},
		{"append at no number", "PUT", "/v1/uploads/" + id + "/x?lease=1m&" + own, "x", 400, "bad_request"},
		{"append past the size", "PUT", "/v1/uploads/" + id + "/5?lease=1m&" + own, "x", 409, "conflict"},
		{"append with no lease", "PUT", "/v1/uploads/" + id + "/0?" + own, "x", 400, "bad_request"},
		{"append with a negative lease", "PUT", "/v1/uploads/" + id + "/0?lease=-1s&" + own, "x", 400, "bad_request"},
		{"append with a lease over a day", "PUT", "/v1/uploads/" + id + "/0?lease=25h&" + own, "x", 400, "bad_request"},
		{"empty append", "PUT", "/v1/uploads/" + id + "/0?lease=1m&" + own, "", 400, "bad_request"},
		{"append past MaxBlobSize", "PUT", "/v1/uploads/" + id + "/0?lease=1m&" + own, strings.Repeat("x", maxSize+1), 413, "too_large"},
		{"publish of no bytes", "POST", "/v1/uploads/" + id + "/publish?owner=o&ttl=1m&" + own, `{"key":"` + blob.KeyOf(nil).String() + `","size":0}`, 400, "invalid_argument"},
		{"publish of -1 bytes", "POST", "/v1/uploads/" + id + "/publish?owner=o&ttl=1m&" + own, `{"key":"` + blob.KeyOf(nil).String() + `","size":-1}`, 400, "invalid_argument"},
		{"publish of 2^62 bytes", "POST", "/v1/uploads/" + id + "/publish?owner=o&ttl=1m&" + own, `{"key":"` + blob.KeyOf(nil).String() + `","size":4611686018427387904}`, 409, "conflict"},
		{"publish of a bad key", "POST", "/v1/uploads/" + id + "/publish?owner=o&ttl=1m&" + own, `{"key":"sha256:nope","size":1}`, 400, "invalid_key"},
		{"publish of more bytes than it holds", "POST", "/v1/uploads/" + id + "/publish?owner=o&ttl=1m&" + own, `{"key":"` + blob.KeyOf([]byte("x")).String() + `","size":1}`, 409, "conflict"},
		{"read of a chunk at a negative offset", "GET", "/v1/chunks/" + strconv.FormatUint(n, 10) + "/-1", "", 400, "bad_request"},
		{"read of a chunk of no set", "GET", "/v1/chunks/0/0", "", 400, "bad_request"},
	} {
		if a := do(t, c.method, base+c.path, c.body, nil); a.status != c.status || a.errCode(t) != c.code {
			t.Errorf("%s: %s %s = %d %s, want %d %s", c.name, c.method, c.path, a.status, a.body, c.status, c.code)
		}
	}
	if a := do(t, "PUT", base+"/v1/uploads/"+id+"/5?lease=1m&"+own, "x", nil); !strings.Contains(a.body, "holds 0 bytes") {
		t.Errorf("an append past the size = %s, want the answer to name the size", a.body)
	}
	if size := status(t, base, id, own); size != 0 {
		t.Fatalf("after refused requests the upload holds %d bytes, want 0", size)
	}

	// An id malformed, never begun or another owner's is unknown, alike:
	// 409 lost, and an abort of it (204) leaves the upload alone.
	for name, c := range map[string]struct{ id, query string }{
		"malformed":          {"xyz", own},
		"zero":               {"0000000000000000", own},
		"17 digits":          {"0" + id, own},
		"signed":             {"+" + id[1:], own},
		"never begun":        {unknown, own},
		"another owner's":    {id, "upload_owner=repo%2Fb"},
		"without its owner":  {id, ""},
		"an owner's prefix":  {id, "upload_owner=repo"},
		"owner given twice?": {id, "upload_owner=repo%2Fb&" + own},
	} {
		lost := func(a answer, what string) {
			t.Helper()
			if a.status != http.StatusConflict || a.errCode(t) != "lost" || strings.Contains(a.body, "repo/a") {
				t.Errorf("%s id: %s = %d %s, want 409 lost naming no owner", name, what, a.status, a.body)
			}
		}
		lost(do(t, "GET", base+"/v1/uploads/"+c.id+"?"+c.query, "", nil), "status")
		lost(do(t, "PUT", base+"/v1/uploads/"+c.id+"/0?lease=1m&"+c.query, "x", nil), "append")
		lost(do(t, "POST", base+"/v1/uploads/"+c.id+"/publish?owner=o&ttl=1m&"+c.query, `{"key":"`+blob.KeyOf([]byte("x")).String()+`","size":1}`, nil), "publish")
		if a := do(t, "DELETE", base+"/v1/uploads/"+c.id+"?"+c.query, "", nil); a.status != http.StatusNoContent {
			t.Errorf("%s id: abort = %d %s, want 204", name, a.status, a.body)
		}
	}
	if size := status(t, base, id, own); size != 0 {
		t.Fatalf("after requests naming other ids the upload holds %d bytes, want 0", size)
	}

	// Appends in order; a stale one (another server's, a retry) is 409
	// conflict; a publish claiming a wrong key or size keeps the upload.
	value := "hello, uploads"
	appendAt(t, base, id, 0, []byte(value[:7]), "&"+own)
	appendAt(t, base, id, 7, []byte(value[7:]), "&"+own)
	if a := do(t, "PUT", base+"/v1/uploads/"+id+"/7?lease=1m&"+own, value[7:], nil); a.status != http.StatusConflict || a.errCode(t) != "conflict" || !strings.Contains(a.body, "holds 14 bytes") {
		t.Fatalf("a stale append = %d %s, want 409 conflict naming the size", a.status, a.body)
	}
	publish := func(key string, size int) answer {
		return do(t, "POST", base+"/v1/uploads/"+id+"/publish?owner=o&ttl=1m&"+own, fmt.Sprintf(`{"key":%q,"size":%d}`, key, size), nil)
	}
	key := blob.KeyOf([]byte(value)).String()
	lie := blob.KeyOf([]byte("something else")).String()
	if a := publish(lie, len(value)); a.status != http.StatusBadRequest || a.errCode(t) != "digest_mismatch" {
		t.Fatalf("publish under a lie = %d %s, want 400 digest_mismatch", a.status, a.body)
	}
	if a := publish(blob.KeyOf([]byte(value[:7])).String(), 7); a.status != http.StatusConflict || a.errCode(t) != "conflict" {
		t.Fatalf("publish of the size before the last append = %d %s, want 409 conflict", a.status, a.body)
	}
	for _, k := range []string{lie, key} {
		if a := do(t, "GET", base+"/v1/blobs/"+k, "", nil); a.status != http.StatusNotFound {
			t.Fatalf("after refused publishes, GET %s = %d", k, a.status)
		}
	}
	if size := status(t, base, id, own); size != int64(len(value)) {
		t.Fatalf("after refused publishes the upload holds %d bytes, want %d", size, len(value))
	}
	if a := publish(key, len(value)); a.status != http.StatusCreated {
		t.Fatalf("publish = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", base+"/v1/blobs/"+key, "", nil); a.status != http.StatusOK || a.body != value {
		t.Fatalf("GET of the published blob = %d %q", a.status, a.body)
	}
	if a := do(t, "GET", base+"/v1/uploads/"+id+"?"+own, "", nil); a.status != http.StatusConflict || a.errCode(t) != "lost" {
		t.Fatalf("status after the publish = %d %s, want 409 lost", a.status, a.body)
	}
	if a := do(t, "PUT", base+"/v1/uploads/"+id+"/14?lease=1m&"+own, "more", nil); a.status != http.StatusConflict || a.errCode(t) != "lost" {
		t.Fatalf("an append after the publish = %d %s, want 409 lost", a.status, a.body)
	}
	if a := publish(key, len(value)); a.status != http.StatusConflict || a.errCode(t) != "lost" {
		t.Fatalf("a publish again = %d %s, want 409 lost", a.status, a.body)
	}
	// Another upload of the same bytes publishes a key already stored: 200.
	twin := beginUpload(t, base, "")
	appendAt(t, base, twin, 0, []byte(value), "")
	if a := do(t, "POST", base+"/v1/uploads/"+twin+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil); a.status != http.StatusOK {
		t.Fatalf("publish of a stored key = %d %s, want 200", a.status, a.body)
	}

	// An abort by its owner ends the upload.
	other := beginUpload(t, base, "")
	appendAt(t, base, other, 0, []byte("aborted"), "")
	if a := do(t, "DELETE", base+"/v1/uploads/"+other, "", nil); a.status != http.StatusNoContent {
		t.Fatalf("abort = %d %s", a.status, a.body)
	}
	if a := do(t, "POST", base+"/v1/uploads/"+other+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":7}`, blob.KeyOf([]byte("aborted"))), nil); a.status != http.StatusConflict || a.errCode(t) != "lost" {
		t.Fatalf("publish after abort = %d %s, want 409 lost", a.status, a.body)
	}
}

// tieredStore opens a SQLite store whose bytes tier is a file:// bucket,
// and returns it with the bucket's directory.
func tieredStore(t *testing.T) (*stead.Store, string) {
	t.Helper()
	bucket := t.TempDir()
	st, err := stead.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "s.db")+"?bytes="+url.QueryEscape("file://"+filepath.ToSlash(bucket)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, bucket
}

// randomBytes returns n bytes drawn from seed.
func randomBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// TestUploadAppendCutShort: on a tiered store, an append whose client
// stops sending mid-body, or which sends more than the largest value
// without declaring its length, changes nothing: the upload keeps its
// size and continues from it.
func TestUploadAppendCutShort(t *testing.T) {
	t.Parallel()
	st, _ := tieredStore(t)
	const maxSize = 2 << 20
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet, MaxBlobSize: maxSize})))
	t.Cleanup(srv.Close)
	value := randomBytes(1, blob.InlineLimit+600<<10)
	id := beginUpload(t, srv.URL, "")
	appendAt(t, srv.URL, id, 0, value[:100], "")

	// A client that declares the rest and sends part of it, then goes.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT /v1/uploads/%s/100?lease=1m HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", id, len(value)-100)
	conn.Write(value[100 : len(value)/2])
	conn.Close()
	if size := status(t, srv.URL, id, ""); size != 100 {
		t.Fatalf("after an append cut short the upload holds %d bytes, want 100", size)
	}

	// A body of undeclared length running past the largest value.
	req, err := http.NewRequest("PUT", fmt.Sprintf("%s/v1/uploads/%s/100?lease=1m", srv.URL, id), struct{ io.Reader }{io.LimitReader(rand.NewChaCha8([32]byte{2}), maxSize)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("an undeclared append past the largest value = %d, want 413", resp.StatusCode)
	}
	if size := status(t, srv.URL, id, ""); size != 100 {
		t.Fatalf("after an append past the largest value the upload holds %d bytes, want 100", size)
	}

	appendAt(t, srv.URL, id, 100, value[100:], "")
	key := blob.KeyOf(value)
	if a := do(t, "POST", srv.URL+"/v1/uploads/"+id+"/publish?owner=o&ttl=1m", fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil); a.status != http.StatusCreated {
		t.Fatalf("publish = %d %s", a.status, a.body)
	}
	if a := do(t, "GET", srv.URL+"/v1/blobs/"+key.String(), "", nil); a.status != http.StatusOK || a.body != string(value) {
		t.Fatalf("GET = %d, %d bytes, want the value's %d", a.status, len(a.body), len(value))
	}
}

// TestUploadAcrossServers: two servers over one PostgreSQL database with
// a file:// tier continue one upload alternately, as behind a load
// balancer: begun on one, appended on the other and back, published on
// the other. Its bytes within the inline limit are rows, the rest one
// bucket object per append; the value reads byte for byte from either
// server, whole and in ranges across its parts, and through an http://
// store; a stale append is 409 conflict, wherever it lands.
func TestUploadAcrossServers(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	dsn := pgtest.Stead(t, false).StoreURL() + "&bytes=" + url.QueryEscape("file://"+filepath.ToSlash(bucket))
	var stores [2]*stead.Store
	var urls [2]string
	doc := apicheck.Load(t)
	for i := range stores {
		st, err := stead.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		srv := httptest.NewServer(doc.Wrap(t, server.New(st, server.Options{Logger: quiet})))
		t.Cleanup(srv.Close)
		stores[i], urls[i] = st, srv.URL
	}
	a, b := urls[0], urls[1]
	value := randomBytes(3, 100<<10+400<<10+300<<10)
	parts := []struct {
		base     string
		from, to int
	}{{b, 0, 100 << 10}, {a, 100 << 10, 500 << 10}, {b, 500 << 10, len(value)}}
	owner := "&upload_owner=" + url.QueryEscape("library/app")
	id := beginUpload(t, a, owner)
	for _, p := range parts {
		appendAt(t, p.base, id, p.from, value[p.from:p.to], owner)
	}
	if ans := do(t, "PUT", a+"/v1/uploads/"+id+"/"+strconv.Itoa(100<<10)+"?lease=1m"+owner, "stale", nil); ans.status != http.StatusConflict || ans.errCode(t) != "conflict" {
		t.Fatalf("a stale append = %d %s, want 409 conflict", ans.status, ans.body)
	}
	key := blob.KeyOf(value)
	if ans := do(t, "POST", b+"/v1/uploads/"+id+"/publish?owner=o&ttl=1m"+owner, fmt.Sprintf(`{"key":%q,"size":%d}`, key, len(value)), nil); ans.status != http.StatusCreated {
		t.Fatalf("publish = %d %s", ans.status, ans.body)
	}

	// A row chunk, then an object per append past the inline limit.
	eng := stores[0].Engine().Blobs()
	stored, err := eng.Get(t.Context(), key)
	if err != nil || stored.Chunks == 0 || stored.Object != "" {
		t.Fatalf("the value is stored as %+v (%v), want a chunk set", stored, err)
	}
	var objects []string
	for off := int64(0); off < stored.Size; {
		c, err := eng.ReadChunk(t.Context(), stored.Chunks, off)
		if err != nil {
			t.Fatal(err)
		}
		if (c.Object != "") != (off >= 100<<10) {
			t.Fatalf("the chunk at %d is %+v: want rows up to 100 KiB, objects after", off, c)
		}
		if c.Object != "" {
			if _, err := os.Stat(filepath.Join(bucket, filepath.FromSlash(c.Object))); err != nil {
				t.Fatalf("the bucket lacks chunk object %s: %v", c.Object, err)
			}
			objects = append(objects, c.Object)
		}
		off = c.Start + c.Size
	}
	if len(objects) != 2 {
		t.Fatalf("the value's objects are %v, want one per append past the inline limit", objects)
	}

	for _, base := range urls {
		if ans := do(t, "GET", base+"/v1/blobs/"+key.String(), "", nil); ans.status != http.StatusOK || ans.body != string(value) {
			t.Fatalf("GET from %s = %d, %d bytes, want the value's %d", base, ans.status, len(ans.body), len(value))
		}
		for _, r := range [][2]int{{100<<10 - 10, 100<<10 + 9}, {500<<10 - 10, 500<<10 + 9}, {0, len(value) - 1}, {len(value) - 5, len(value) - 1}} {
			ans := do(t, "GET", base+"/v1/blobs/"+key.String(), "", map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", r[0], r[1])})
			if ans.status != http.StatusPartialContent || ans.body != string(value[r[0]:r[1]+1]) {
				t.Fatalf("GET of bytes %d-%d from %s = %d, %d bytes", r[0], r[1], base, ans.status, len(ans.body))
			}
		}
	}
	rst := remoteStore(t, b)
	rd, err := rst.Blobs.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("a read through an http:// store = %d bytes (%v), want the value's %d", len(got), err, len(value))
	}
	part := make([]byte, 1000)
	if n, err := rd.ReadAt(part, 500<<10-500); err != nil || n != 1000 || !bytes.Equal(part, value[500<<10-500:500<<10+500]) {
		t.Fatalf("ReadAt across two objects through an http:// store = %d (%v)", n, err)
	}
	if err := rst.Blobs.Verify(t.Context(), key); err != nil {
		t.Fatalf("Verify through an http:// store: %v", err)
	}
}

// remoteStore opens a store over the server at base.
func remoteStore(t *testing.T, base string) *stead.Store {
	t.Helper()
	eng, err := remote.Open(context.Background(), remote.Config{URL: base})
	if err != nil {
		t.Fatal(err)
	}
	st, err := stead.New(context.Background(), eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestUploadAppendObject: on a tiered store an append with object=true is
// one bucket object however small (the remote engine's WriteValue), and
// one without is rows within the inline limit.
func TestUploadAppendObject(t *testing.T) {
	t.Parallel()
	st, bucket := tieredStore(t)
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet})))
	t.Cleanup(srv.Close)
	id := beginUpload(t, srv.URL, "")
	appendAt(t, srv.URL, id, 0, []byte("rows"), "")
	appendAt(t, srv.URL, id, 4, []byte("an object"), "&object=true")
	n, _ := strconv.ParseUint(id, 16, 64)
	eng := st.Engine().Blobs()
	for off, object := range map[int64]bool{0: false, 4: true} {
		c, err := eng.ReadChunk(t.Context(), blob.ChunkSet(n), off)
		if err != nil || (c.Object != "") != object {
			t.Fatalf("the chunk at %d is %+v (%v), want an object: %v", off, c, err, object)
		}
		if object {
			if _, err := os.Stat(filepath.Join(bucket, filepath.FromSlash(c.Object))); err != nil {
				t.Fatalf("the bucket lacks %s: %v", c.Object, err)
			}
		}
	}
}
