package registry_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
)

// randomBytes returns n bytes drawn from seed.
func randomBytes(seed byte, n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// openServed opens a store at url and serves a registry over it, as one
// server of a fleet, returning a client of it.
func openServed(t *testing.T, url string, opts registry.Options) *client {
	t.Helper()
	st, err := stead.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := registry.New(st, opts)
	addr := fronttest.Serve(t, st, server.Options{Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	return &client{t: t, base: "http://" + addr, st: st}
}

// wantRange fails unless resp is status with the upload's Range 0-end.
func wantRange(t *testing.T, what string, resp *http.Response, body []byte, status int, end int64) {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("Range") != fmt.Sprintf("0-%d", end) {
		t.Fatalf("%s = %d %s, Range %q; want %d with Range 0-%d", what, resp.StatusCode, body, resp.Header.Get("Range"), status, end)
	}
}

// TestUploadAcrossRegistries: an upload begun through one server is
// continued, checked, refused a stale chunk and finished through another
// server over the same database, in any order, on SQLite and PostgreSQL;
// one cancelled through one is gone through the other.
func TestUploadAcrossRegistries(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			url := e.url(t)
			a := openServed(t, url, registry.Options{})
			b := openServed(t, url, registry.Options{})
			const part = 100 << 10 // three parts: past the inline limit
			value := randomBytes(1, 3*part+5)
			d := digestOf(value)

			resp, body := a.do("POST", "/v2/team/app/blobs/uploads/", nil, nil)
			wantRange(t, "POST through a", resp, body, http.StatusAccepted, 0)
			loc := resp.Header.Get("Location")
			id := resp.Header.Get("Docker-Upload-UUID")
			if !strings.HasSuffix(loc, "/"+id) || len(id) != 16 {
				t.Fatalf("Location %q, Docker-Upload-UUID %q; want the 16-digit id at the end of the location", loc, id)
			}
			resp, body = b.do("PATCH", loc, map[string]string{"Content-Range": fmt.Sprintf("0-%d", part-1)}, value[:part])
			wantRange(t, "first chunk through b", resp, body, http.StatusAccepted, part-1)
			resp, body = a.do("GET", loc, nil, nil)
			wantRange(t, "status through a", resp, body, http.StatusNoContent, part-1)
			resp, body = a.do("PATCH", loc, nil, value[part:2*part])
			wantRange(t, "second chunk through a, no Content-Range", resp, body, http.StatusAccepted, 2*part-1)
			resp, body = b.do("PATCH", loc, map[string]string{"Content-Range": fmt.Sprintf("%d-%d", part, 2*part-1)}, value[part:2*part])
			wantError(t, "the second chunk again through b", resp, body, http.StatusRequestedRangeNotSatisfiable, "BLOB_UPLOAD_INVALID")
			wantRange(t, "the second chunk again through b", resp, body, http.StatusRequestedRangeNotSatisfiable, 2*part-1)
			resp, body = b.do("GET", strings.Replace(loc, "/team/app/", "/team/other/", 1), nil, nil)
			wantError(t, "the upload through another repository", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
			resp, body = a.do("PATCH", loc, nil, value[2*part:3*part])
			wantRange(t, "third chunk through a", resp, body, http.StatusAccepted, 3*part-1)
			resp, body = b.do("PUT", loc+"?digest="+d, nil, nil) // the upload holds three parts of four
			wantError(t, "finish with the wrong digest through b", resp, body, http.StatusBadRequest, "DIGEST_INVALID")
			resp, body = a.do("PUT", loc+"?digest="+d, nil, value[3*part:])
			if resp.StatusCode != http.StatusCreated || resp.Header.Get("Docker-Content-Digest") != d {
				t.Fatalf("finish through a = %d %s %v", resp.StatusCode, body, resp.Header)
			}
			for _, c := range []*client{a, b} {
				resp, body = c.do("GET", loc, nil, nil)
				wantError(t, "status of the finished upload", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
				resp, body = c.do("GET", "/v2/team/app/blobs/"+d, nil, nil)
				if resp.StatusCode != http.StatusOK || !bytes.Equal(body, value) {
					t.Fatalf("pull = %d, %d bytes; want the %d pushed", resp.StatusCode, len(body), len(value))
				}
			}

			resp, _ = b.do("POST", "/v2/team/app/blobs/uploads/", nil, nil)
			loc = resp.Header.Get("Location")
			resp, body = b.do("PATCH", loc, nil, []byte("abandoned"))
			wantRange(t, "chunk of the upload to cancel", resp, body, http.StatusAccepted, 8)
			resp, body = a.do("DELETE", loc, nil, nil)
			if resp.StatusCode != http.StatusNoContent {
				t.Fatalf("cancel through a = %d %s", resp.StatusCode, body)
			}
			for _, method := range []string{"GET", "PATCH", "DELETE"} {
				resp, body = b.do(method, loc, nil, []byte("more"))
				wantError(t, method+" of the cancelled upload through b", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
			}
		})
	}
}

// TestHostileUploadIDs: an upload id that is malformed, never begun, or
// another repository's is BLOB_UPLOAD_UNKNOWN for every method, and
// nothing is stored.
func TestHostileUploadIDs(t *testing.T) {
	t.Parallel()
	c := newClient(t, "")
	resp, _ := c.do("POST", "/v2/s/blobs/uploads/", nil, nil)
	others := resp.Header.Get("Docker-Upload-UUID")
	ids := []string{"x1", "0", "0000000000000000", "ffffffffffffffff", "123456789abcdef", "0123456789abcdef0", "0123456789abcdeg",
		"+123456789abcdef", "0x23456789abcdef", "%00", "%20", strings.Repeat("a", 300), "0123456789abcdef", others}
	for _, id := range ids {
		for _, method := range []string{"GET", "PATCH", "PUT", "DELETE"} {
			path := "/v2/r/blobs/uploads/" + id
			if method == "PUT" {
				path += "?digest=" + digestOf([]byte("x"))
			}
			resp, body := c.do(method, path, nil, []byte("x"))
			wantError(t, method+" upload "+id, resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
		}
	}
	if n := c.refCount(); n != 0 {
		t.Fatalf("%d refs after requests to unknown uploads", n)
	}
	resp, body := c.do("GET", "/v2/s/blobs/uploads/"+others, nil, nil)
	wantRange(t, "the other repository's upload", resp, body, http.StatusNoContent, 0)
}

// tieredClient serves a registry over SQLite with a file:// bytes tier,
// returning its client, the database's path and the bucket directory.
func tieredClient(t *testing.T) (c *client, dbPath, bucket string) {
	t.Helper()
	bucket = t.TempDir()
	dbPath = filepath.Join(t.TempDir(), "s.db")
	c = openServed(t, "sqlite://"+dbPath+"?bytes="+url.QueryEscape("file://"+filepath.ToSlash(bucket)), registry.Options{})
	return c, dbPath, bucket
}

// dbBytes returns how many chunk rows the SQLite database at path holds
// and how many bytes of values its chunks and blobs over the inline limit
// hold in the database.
func dbBytes(t *testing.T, path string) (chunks int, held int64) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var inChunks, inBlobs int64
	if err := db.QueryRow("SELECT count(*), coalesce(sum(length(data)), 0) FROM blob_chunks").Scan(&chunks, &inChunks); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT coalesce(sum(length(value)), 0) FROM blobs WHERE size > ?", blob.InlineLimit).Scan(&inBlobs); err != nil {
		t.Fatal(err)
	}
	return chunks, inChunks + inBlobs
}

// bucketBytes returns the bytes of the files under dir.
func bucketBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		n += info.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestChunkedPushTiered: on a store with a bytes tier, a layer pushed in
// chunks past the inline limit (crane's push), in one PATCH with no
// Content-Range (skopeo's, podman's) or in the PUT that ends an empty
// upload (oras's) leaves at most 1 KiB in the database per chunk: its
// bytes are in the bucket, and pulled back byte for byte.
func TestChunkedPushTiered(t *testing.T) {
	t.Parallel()
	c, dbPath, bucket := tieredClient(t)
	const part = blob.InlineLimit + 1000
	layers := [][]byte{randomBytes(2, 4*part), randomBytes(3, 3<<20), randomBytes(4, 2<<20+7)}
	requests := 0

	// Four chunks with Content-Range, an empty PUT.
	resp, _ := c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	loc := resp.Header.Get("Location")
	for i := range 4 {
		resp, body := c.do("PATCH", loc, map[string]string{"Content-Range": fmt.Sprintf("%d-%d", i*part, (i+1)*part-1)}, layers[0][i*part:(i+1)*part])
		wantRange(t, fmt.Sprintf("chunk %d", i), resp, body, http.StatusAccepted, int64((i+1)*part-1))
		requests++
	}
	if resp, body := c.do("PUT", loc+"?digest="+digestOf(layers[0]), nil, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("finish the chunked layer = %d %s", resp.StatusCode, body)
	}
	// The whole layer in one PATCH, an empty PUT.
	resp, _ = c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	loc = resp.Header.Get("Location")
	resp, body := c.do("PATCH", loc, nil, layers[1])
	wantRange(t, "the whole layer in one PATCH", resp, body, http.StatusAccepted, int64(len(layers[1])-1))
	requests++
	if resp, body := c.do("PUT", loc+"?digest="+digestOf(layers[1]), nil, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("finish the one-PATCH layer = %d %s", resp.StatusCode, body)
	}
	// The whole layer in the PUT: the empty upload goes.
	resp, _ = c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	loc = resp.Header.Get("Location")
	if resp, body := c.do("PUT", loc+"?digest="+digestOf(layers[2]), nil, layers[2]); resp.StatusCode != http.StatusCreated {
		t.Fatalf("monolithic PUT = %d %s", resp.StatusCode, body)
	}
	requests++
	resp, body = c.do("GET", loc, nil, nil)
	wantError(t, "status of the upload a monolithic PUT ended", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")

	var total int64
	for i, layer := range layers {
		total += int64(len(layer))
		resp, body := c.do("GET", "/v2/r/blobs/"+digestOf(layer), nil, nil)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, layer) {
			t.Fatalf("pull of layer %d = %d, %d bytes; want its %d", i, resp.StatusCode, len(body), len(layer))
		}
		key, err := blob.ParseKey(digestOf(layer))
		if err != nil {
			t.Fatal(err)
		}
		stored, err := c.st.Engine().Blobs().Get(t.Context(), key)
		if err != nil || stored.Inline() || (i > 0 && stored.Object == "") {
			t.Fatalf("layer %d is stored as %+v (%v); want bucket objects (one object for a one-request layer)", i, stored, err)
		}
	}
	chunks, held := dbBytes(t, dbPath)
	if held > int64(requests)<<10 {
		t.Fatalf("the database holds %d bytes of values in %d chunk rows after %d chunk requests; want at most 1 KiB each", held, chunks, requests)
	}
	if n := bucketBytes(t, bucket); n < total {
		t.Fatalf("the bucket holds %d bytes; want the layers' %d", n, total)
	}
}

// TestUploadIdleReaped: an upload's lease is UploadIdle from its last
// chunk: a reap before it lapses keeps the upload, which a chunk renews;
// once UploadIdle passes without one, the store reaps it and every
// server answers BLOB_UPLOAD_UNKNOWN.
func TestUploadIdleReaped(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	const idle = time.Minute
	st, addr := serveRegistry(t, "mem://", registry.Options{UploadIdle: idle}, stead.WithClock(clk.Now))
	c := &client{t: t, base: "http://" + addr, st: st}
	reap := func(want int) {
		t.Helper()
		if n, err := st.Blobs.ReapUploads(t.Context()); err != nil || n != want {
			t.Fatalf("ReapUploads = %d, %v; want %d", n, err, want)
		}
	}
	resp, _ := c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	loc := resp.Header.Get("Location")
	clk.Advance(idle / 2)
	resp, body := c.do("PATCH", loc, nil, []byte("part"))
	wantRange(t, "a chunk within the lease", resp, body, http.StatusAccepted, 3)
	clk.Advance(idle * 3 / 4)
	reap(0) // renewed by the chunk
	resp, body = c.do("GET", loc, nil, nil)
	wantRange(t, "status within the renewed lease", resp, body, http.StatusNoContent, 3)
	clk.Advance(idle / 2)
	reap(1)
	for _, method := range []string{"GET", "PATCH", "PUT", "DELETE"} {
		path := loc
		if method == "PUT" {
			path += "?digest=" + digestOf([]byte("part"))
		}
		resp, body := c.do(method, path, nil, nil)
		wantError(t, method+" of a reaped upload", resp, body, http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
	}
}
