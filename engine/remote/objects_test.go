package remote_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/internal/testing/apicheck"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

// tieredStore is a store with a file:// bytes tier in bucket, and how to
// count the chunk rows its database holds.
type tieredStore struct {
	st        *stead.Store
	bucket    string
	chunkRows func(t *testing.T) int
}

func openTiered(t *testing.T, engine string) tieredStore {
	t.Helper()
	bucket := t.TempDir()
	bytesParam := "bytes=" + url.QueryEscape("file://"+filepath.ToSlash(bucket))
	var ts tieredStore
	var dsn string
	switch engine {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "s.db")
		dsn = "sqlite://" + path + "?" + bytesParam
		ts.chunkRows = func(t *testing.T) int {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var n int
			if err := db.QueryRow("SELECT count(*) FROM blob_chunks").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	case "postgres":
		dsn = pgtest.Stead(t, false).StoreURL() + "&" + bytesParam
	}
	st, err := stead.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("stead.Open(%s): %v", dsn, err)
	}
	t.Cleanup(func() { st.Close() })
	if pg, ok := st.Engine().(*postgres.Engine); ok {
		ts.chunkRows = func(t *testing.T) int {
			var n int
			if err := pg.Pool().QueryRow(t.Context(), fmt.Sprintf("SELECT count(*) FROM %q.blob_chunks", pg.Schema())).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	ts.st, ts.bucket = st, bucket
	return ts
}

// object returns the bucket object key's value is stored in, failing t
// when it is stored otherwise.
func (ts tieredStore) object(t *testing.T, key blob.Key) string {
	t.Helper()
	stored, err := ts.st.Engine().Blobs().Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Object == "" || stored.Chunks != 0 || stored.Value != nil {
		t.Fatalf("%s is stored as %d chunks set / %d inline bytes / object %q, want an object", key, stored.Chunks, len(stored.Value), stored.Object)
	}
	if _, err := os.Stat(filepath.Join(ts.bucket, filepath.FromSlash(stored.Object))); err != nil {
		t.Fatalf("the bucket lacks %s's object: %v", key, err)
	}
	return stored.Object
}

func randomValue(seed byte, size int) []byte {
	value := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{seed}).Read(value)
	return value
}

// TestObjectsThroughServer serves a store whose large values are bucket
// objects and reads them over /v1 and through a remote store, byte for
// byte; puts over HTTP land in the bucket, with no chunk row; a missing
// or short object is 500 corrupt before the first byte (ErrCorrupt through
// a remote store), not a short answer.
func TestObjectsThroughServer(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			ts := openTiered(t, engine)
			var logged testkit.Buffer
			srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(ts.st, server.Options{
				Token:  "objects",
				Logger: slog.New(slog.NewTextHandler(&logged, nil)),
			})))
			t.Cleanup(srv.Close)
			eng, err := remote.Open(t.Context(), remote.Config{URL: srv.URL, Token: "objects"})
			if err != nil {
				t.Fatal(err)
			}
			rst, err := stead.New(t.Context(), eng)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rst.Close() })
			get := func(t *testing.T, path string, header map[string]string) (*http.Response, []byte, error) {
				t.Helper()
				req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer objects")
				for k, v := range header {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				return resp, body, err
			}

			// A value the library put as an object (over 256 KiB, the
			// span an object read holds, and the inline limit).
			value := randomValue(1, 3*blob.InlineLimit+17)
			key, err := ts.st.Blobs.Put(t.Context(), bytes.NewReader(value))
			if err != nil {
				t.Fatal(err)
			}
			object := ts.object(t, key)

			t.Run("get over /v1", func(t *testing.T) {
				resp, body, err := get(t, "/v1/blobs/"+key.String(), nil)
				if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(body, value) {
					t.Fatalf("GET = %d, %d bytes (%v), want 200 and the %d bytes", resp.StatusCode, len(body), err, len(value))
				}
				resp, body, err = get(t, "/v1/blobs/"+key.String(), map[string]string{"Range": "bytes=300000-300099"})
				if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, value[300000:300100]) {
					t.Fatalf("GET of a range = %d, %d bytes (%v), want 206 and its 100 bytes", resp.StatusCode, len(body), err)
				}
				resp, body, err = get(t, "/v1/blobs/"+key.String(), map[string]string{"Range": "bytes=0-9,700000-700009"})
				if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Contains(body, value[700000:700010]) {
					t.Fatalf("GET of two ranges = %d, %d bytes (%v), want 206 with both", resp.StatusCode, len(body), err)
				}
			})

			t.Run("remote store", func(t *testing.T) {
				rd, err := rst.Blobs.Get(t.Context(), key)
				if err != nil {
					t.Fatalf("remote Get: %v", err)
				}
				defer rd.Close()
				got, err := io.ReadAll(rd)
				if err != nil || !bytes.Equal(got, value) {
					t.Fatalf("remote read = %d bytes (%v), want the %d bytes", len(got), err, len(value))
				}
				part := make([]byte, 1000)
				if n, err := rd.ReadAt(part, int64(len(value))-1000); err != nil || n != 1000 || !bytes.Equal(part, value[len(value)-1000:]) {
					t.Fatalf("remote ReadAt of the last 1000 bytes = %d (%v)", n, err)
				}
				if err := rst.Blobs.Verify(t.Context(), key); err != nil {
					t.Fatalf("remote Verify: %v", err)
				}
				x, err := rst.GC.Explain(t.Context(), key)
				if err != nil || x.Object != object {
					t.Fatalf("remote Explain = object %q (%v), want %q", x.Object, err, object)
				}
			})

			t.Run("put over /v1 streams into the bucket", func(t *testing.T) {
				rows := ts.chunkRows(t)
				big := randomValue(2, 1<<20)
				bigKey := blob.KeyOf(big)
				req, err := http.NewRequest(http.MethodPut, srv.URL+"/v1/blobs/"+bigKey.String(), bytes.NewReader(big))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer objects")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					t.Fatalf("PUT = %d, want 201", resp.StatusCode)
				}
				ts.object(t, bigKey)
				if n := ts.chunkRows(t); n != rows {
					t.Fatalf("the database holds %d chunk rows after a put into the bucket, want the %d before", n, rows)
				}
				rd, err := rst.Blobs.Get(t.Context(), bigKey)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(rd)
				rd.Close()
				if err != nil || !bytes.Equal(got, big) {
					t.Fatalf("remote read of the put = %d bytes (%v)", len(got), err)
				}
			})

			t.Run("a remote store's large put lands in the bucket", func(t *testing.T) {
				rows := ts.chunkRows(t)
				big := randomValue(5, 3<<20+11)
				bigKey, err := rst.Blobs.Put(t.Context(), bytes.NewReader(big))
				if err != nil {
					t.Fatal(err)
				}
				ts.object(t, bigKey)
				if n := ts.chunkRows(t); n != rows {
					t.Fatalf("the database holds %d chunk rows after a remote put into the bucket, want the %d before", n, rows)
				}
				rd, err := rst.Blobs.Get(t.Context(), bigKey)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(rd)
				rd.Close()
				if err != nil || !bytes.Equal(got, big) {
					t.Fatalf("remote read of the remote put = %d bytes (%v)", len(got), err)
				}
			})

			t.Run("missing chunk object", func(t *testing.T) {
				// A chunk set of rows and two objects, appended through
				// the library; then one object goes.
				value := randomValue(6, 100<<10+600<<10)
				u, err := ts.st.Blobs.BeginUpload(t.Context(), blob.UploadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, part := range [][]byte{value[:100<<10], value[100<<10 : 400<<10], value[400<<10:]} {
					if _, err := u.Append(t.Context(), bytes.NewReader(part)); err != nil {
						t.Fatal(err)
					}
				}
				key, err := u.Commit(t.Context(), blob.CommitOptions{})
				if err != nil {
					t.Fatal(err)
				}
				stored, err := ts.st.Engine().Blobs().Get(t.Context(), key)
				if err != nil || stored.Chunks == 0 {
					t.Fatalf("stored as %+v (%v), want a chunk set", stored, err)
				}
				c, err := ts.st.Engine().Blobs().ReadChunk(t.Context(), stored.Chunks, 500<<10)
				if err != nil || c.Object == "" {
					t.Fatalf("the chunk at 500 KiB is %+v (%v), want an object", c, err)
				}
				for name, st := range map[string]*stead.Store{"direct": ts.st, "remote": rst} {
					if err := st.Blobs.Verify(t.Context(), key); err != nil {
						t.Fatalf("%s Verify of a chunk set with objects: %v", name, err)
					}
				}
				resp, body, err := get(t, "/v1/blobs/"+key.String(), map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", 100<<10-5, 400<<10+4)})
				if err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, value[100<<10-5:400<<10+5]) {
					t.Fatalf("GET of a range across rows and objects = %d, %d bytes (%v)", resp.StatusCode, len(body), err)
				}
				if err := os.Remove(filepath.Join(ts.bucket, filepath.FromSlash(c.Object))); err != nil {
					t.Fatal(err)
				}
				for name, st := range map[string]*stead.Store{"direct": ts.st, "remote": rst} {
					if err := st.Blobs.Verify(t.Context(), key); !errors.Is(err, stead.ErrCorrupt) || !strings.Contains(err.Error(), "missing") {
						t.Errorf("%s Verify of a chunk set whose object is gone = %v, want ErrCorrupt saying it is missing", name, err)
					}
				}
			})

			t.Run("short object", func(t *testing.T) {
				short := randomValue(3, 3*blob.InlineLimit+1)
				shortKey, err := ts.st.Blobs.Put(t.Context(), bytes.NewReader(short))
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(ts.bucket, filepath.FromSlash(ts.object(t, shortKey)))
				if err := os.Truncate(path, int64(len(short))-blob.InlineLimit); err != nil {
					t.Fatal(err)
				}
				// The object's size is checked before the first byte: the
				// answer is an error, not a 200 that breaks off.
				resp, body, _ := get(t, "/v1/blobs/"+shortKey.String(), nil)
				if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Stead-Error-Code") != "corrupt" {
					t.Fatalf("GET of a short object = %d %q with %d bytes, want 500 corrupt", resp.StatusCode, resp.Header.Get("Stead-Error-Code"), len(body))
				}
				resp, _, _ = get(t, "/v1/blobs/"+shortKey.String(), map[string]string{"Range": "bytes=10-19"})
				if resp.StatusCode != http.StatusInternalServerError {
					t.Fatalf("GET of a range of a short object = %d, want 500", resp.StatusCode)
				}
				for name, st := range map[string]*stead.Store{"direct": ts.st, "remote": rst} {
					err := st.Blobs.Verify(t.Context(), shortKey)
					if !errors.Is(err, stead.ErrCorrupt) || !errors.Is(err, stead.ErrDigestMismatch) || errors.Is(err, stead.ErrUnavailable) || !strings.Contains(err.Error(), "bytes") {
						t.Errorf("%s Verify of a short object = %v, want ErrCorrupt (an ErrDigestMismatch) naming its size", name, err)
					}
				}
			})

			t.Run("missing object", func(t *testing.T) {
				gone := randomValue(4, blob.InlineLimit+1)
				goneKey, err := ts.st.Blobs.Put(t.Context(), bytes.NewReader(gone))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(filepath.Join(ts.bucket, filepath.FromSlash(ts.object(t, goneKey)))); err != nil {
					t.Fatal(err)
				}
				// The store lost bytes: a server error, not the client's.
				resp, body, _ := get(t, "/v1/blobs/"+goneKey.String(), nil)
				if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Stead-Error-Code") != "corrupt" {
					t.Fatalf("GET of a blob whose object is gone = %d %q with %d bytes, want 500 corrupt", resp.StatusCode, resp.Header.Get("Stead-Error-Code"), len(body))
				}
				for name, st := range map[string]*stead.Store{"direct": ts.st, "remote": rst} {
					if err := st.Blobs.Verify(t.Context(), goneKey); !errors.Is(err, stead.ErrCorrupt) || !errors.Is(err, stead.ErrDigestMismatch) || !strings.Contains(err.Error(), "missing") {
						t.Errorf("%s Verify of a blob whose object is gone = %v, want ErrCorrupt saying it is missing", name, err)
					}
				}
			})
		})
	}
}
