package sqlite_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/steaderr"
)

// TestMigrateUploadWithGap checks the migration of an earlier release's
// upload whose chunks were written out of order ([0,100) and [200,300),
// [100,200) not yet): its size is where its chunks stop tiling, the chunk
// past the gap goes, the Store does not resume it (it has no hash state)
// and the engine appends to it at its size.
func TestMigrateUploadWithGap(t *testing.T) {
	path, dir := tempPath(t), t.TempDir()
	e := openConfig(t, sqlite.Config{Path: path, Bytes: "file://" + filepath.ToSlash(dir)})
	sqlite.MigrateTo(t, e, 12)
	db := rawDB(t, path)
	const gap = 404
	v := randomValue(300)
	expires := time.Now().Add(time.Hour).UnixNano()
	if _, err := db.Exec(`INSERT INTO blob_uploads (id, expires_at) VALUES (?, ?)`, gap, expires); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO blob_chunks (chunks, off, data) VALUES (?, 0, ?), (?, 200, ?)`, gap, v[:100], gap, v[200:]); err != nil {
		t.Fatal(err)
	}
	mustMigrate(t, e)
	st, err := e.Blobs().UploadStatus(t.Context(), gap)
	if err != nil || st.Size != 100 {
		t.Fatalf("UploadStatus of the migrated upload = size %d, %v; want 100, where its chunks stop tiling", st.Size, err)
	}
	s := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64})
	id := "0000000000000194"
	_, err = s.ResumeUpload(t.Context(), id, blob.UploadOptions{})
	if !errors.Is(err, steaderr.ErrLost) {
		t.Errorf("ResumeUpload of a pre-migration upload (no state) = %v; want ErrLost (unknown upload, to be restarted)", err)
	}
	err = e.Blobs().WriteChunk(t.Context(), blob.WriteChunkParams{Set: gap, Off: st.Size, Data: bytes.Repeat([]byte{1}, 10), State: []byte("x"), Lease: time.Minute})
	if err != nil {
		t.Fatalf("WriteChunk at the migrated upload's size %d = %v", st.Size, err)
	}
}
