package cli

import (
	"bytes"
	"database/sql"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// TestScrub stores inline and chunked values, corrupts one of each directly
// in the database, and checks that stead scrub lists exactly those, exits
// 3, and resumes from a key.
func TestScrub(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "stead.db")
	url := "sqlite://" + path
	st := openStore(t, url)
	var keys []blob.Key
	for i, size := range []int{10, 1000, blob.InlineLimit + 1, 3*blob.DefaultChunkSize + 17} {
		value := make([]byte, size)
		_, _ = rand.NewChaCha8([32]byte{byte(i)}).Read(value)
		key, err := st.Blobs.Put(t.Context(), bytes.NewReader(value))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	slices.SortFunc(keys, blob.Key.Compare)

	r := runCLI(t, "--db", url, "scrub")
	if r.code != 0 || r.stdout.String() != "" || !strings.Contains(r.stderr.String(), "scrubbed 4 blobs") {
		t.Fatalf("scrub of intact blobs = exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var inline, chunked blob.Key
	for _, key := range keys {
		info, err := st.Blobs.Stat(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case info.Size == 1000:
			inline = key
			_, err = db.Exec("UPDATE blobs SET value = CAST(zeroblob(1000) AS BLOB) WHERE key = ?", key.String())
		case info.Size > 3*blob.DefaultChunkSize:
			chunked = key
			_, err = db.Exec("UPDATE blob_chunks SET data = zeroblob(length(data)) WHERE off = ? AND chunks = (SELECT chunks FROM blobs WHERE key = ?)", 2*blob.DefaultChunkSize, key.String())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	want := []string{inline.String(), chunked.String()}
	slices.Sort(want)
	r = runCLI(t, "--db", url, "scrub")
	if got := strings.Fields(r.stdout.String()); r.code != exitCorrupt || !slices.Equal(got, want) {
		t.Fatalf("scrub = exit %d, stdout %q, stderr %q; want exit %d listing %v", r.code, r.stdout, r.stderr, exitCorrupt, want)
	}

	// Resuming from a key checks it and every later one.
	from := keys[2]
	var wantFrom []string
	for _, k := range want {
		if k >= from.String() {
			wantFrom = append(wantFrom, k)
		}
	}
	r = runCLI(t, "--db", url, "scrub", "--from", from.String())
	if got := strings.Fields(r.stdout.String()); !slices.Equal(got, wantFrom) || !strings.Contains(r.stderr.String(), "scrubbed 2 blobs") {
		t.Fatalf("scrub -from %s = exit %d, stdout %q, stderr %q; want %v", from, r.code, r.stdout, r.stderr, wantFrom)
	}

	for _, args := range [][]string{{"scrub", "--from", "sha256:nope"}, {"scrub", "extra"}} {
		if r := runCLI(t, append([]string{"--db", url}, args...)...); r.code != 2 {
			t.Fatalf("stead %v = exit %d, stderr %q; want 2", args, r.code, r.stderr)
		}
	}
}

// TestScrubMissingObject removes the bucket object of a value stored in a
// bytes tier, and cuts another's short, and checks that stead scrub
// reports both, directly and through a server, and exits 5.
func TestScrubMissingObject(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	url := "sqlite://" + filepath.Join(t.TempDir(), "stead.db") + "?bytes=" + neturl.QueryEscape("file://"+filepath.ToSlash(bucket))
	st := openStore(t, url)
	value := make([]byte, blob.InlineLimit+1)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(value)
	key, err := st.Blobs.Put(t.Context(), bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Blobs.Put(t.Context(), strings.NewReader("intact")); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Engine().Blobs().Get(t.Context(), key)
	if err != nil || stored.Object == "" {
		t.Fatalf("the large value is stored as %+v (%v), want an object", stored, err)
	}
	if err := os.Remove(filepath.Join(bucket, filepath.FromSlash(stored.Object))); err != nil {
		t.Fatal(err)
	}
	_, _ = rand.NewChaCha8([32]byte{8}).Read(value)
	shortKey, err := st.Blobs.Put(t.Context(), bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	if stored, err = st.Engine().Blobs().Get(t.Context(), shortKey); err != nil || stored.Object == "" {
		t.Fatalf("the large value is stored as %+v (%v), want an object", stored, err)
	}
	if err := os.Truncate(filepath.Join(bucket, filepath.FromSlash(stored.Object)), 1000); err != nil {
		t.Fatal(err)
	}
	want := []string{key.String(), shortKey.String()}
	slices.Sort(want)
	srv := httptest.NewServer(server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	for _, db := range []string{url, srv.URL} {
		r := runCLI(t, "--db", db, "scrub")
		if r.code != exitCorrupt || strings.Join(strings.Fields(r.stdout.String()), " ") != strings.Join(want, " ") ||
			!strings.Contains(r.stderr.String(), "missing") || !strings.Contains(r.stderr.String(), "holds 1000 bytes") ||
			!strings.Contains(r.stderr.String(), "2 corrupt") {
			t.Errorf("scrub --db %s of a value whose object is gone and one cut short = exit %d, stdout %q, stderr %q; want exit %d listing %s", db, r.code, r.stdout, r.stderr, exitCorrupt, want)
		}
	}
}

// TestScrubMissingChunkObject removes one object of a value stored as a
// chunk set of rows and bucket objects (appended in parts), and checks
// that stead scrub reports it, directly and through a server, and exits
// 5, and that gc explain and get see the value the same both ways.
func TestScrubMissingChunkObject(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	url := "sqlite://" + filepath.Join(t.TempDir(), "stead.db") + "?bytes=" + neturl.QueryEscape("file://"+filepath.ToSlash(bucket))
	st := openStore(t, url)
	value := make([]byte, 100<<10+700<<10)
	_, _ = rand.NewChaCha8([32]byte{9}).Read(value)
	u, err := st.Blobs.BeginUpload(t.Context(), blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range [][]byte{value[:100<<10], value[100<<10 : 450<<10], value[450<<10:]} {
		if _, err := u.Append(t.Context(), bytes.NewReader(part)); err != nil {
			t.Fatal(err)
		}
	}
	key, err := u.Commit(t.Context(), blob.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Blobs.Put(t.Context(), strings.NewReader("intact")); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Engine().Blobs().Get(t.Context(), key)
	if err != nil || stored.Chunks == 0 {
		t.Fatalf("the value is stored as %+v (%v), want a chunk set", stored, err)
	}
	c, err := st.Engine().Blobs().ReadChunk(t.Context(), stored.Chunks, 600<<10)
	if err != nil || c.Object == "" {
		t.Fatalf("the chunk at 600 KiB is %+v (%v), want an object", c, err)
	}
	srv := httptest.NewServer(server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	for _, db := range []string{url, srv.URL} {
		out := filepath.Join(t.TempDir(), "value")
		if r := runCLI(t, "--db", db, "get", key.String(), "-o", out); r.code != 0 {
			t.Errorf("get --db %s = exit %d, %q", db, r.code, r.stderr)
		} else if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, value) {
			t.Errorf("get --db %s wrote %d bytes (%v), want the value's %d", db, len(got), err, len(value))
		}
		if r := runCLI(t, "--db", db, "scrub"); r.code != 0 {
			t.Errorf("scrub --db %s of intact blobs = exit %d, %q", db, r.code, r.stderr)
		}
	}
	if err := os.Remove(filepath.Join(bucket, filepath.FromSlash(c.Object))); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{url, srv.URL} {
		r := runCLI(t, "--db", db, "scrub")
		if r.code != exitCorrupt || strings.TrimSpace(r.stdout.String()) != key.String() ||
			!strings.Contains(r.stderr.String(), "missing") || !strings.Contains(r.stderr.String(), "1 corrupt") {
			t.Errorf("scrub --db %s of a value whose chunk object is gone = exit %d, stdout %q, stderr %q; want exit %d listing %s", db, r.code, r.stdout, r.stderr, exitCorrupt, key)
		}
	}
}
