package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// openTiered opens (without a fresh database) the engine over path with
// the bytes tier in dir, migrated.
func openTiered(t *testing.T, path, dir string) *sqlite.Engine {
	t.Helper()
	e := openConfig(t, sqlite.Config{Path: path, Bytes: "file://" + filepath.ToSlash(dir)})
	mustMigrate(t, e)
	return e
}

// chunkRow is one blob_chunks row of a set, read behind the engine's back.
type chunkRow struct {
	off    int64
	object sql.NullString
	len    sql.NullInt64
}

func chunkRows(t *testing.T, db *sql.DB, set blob.ChunkSet) []chunkRow {
	t.Helper()
	rows, err := db.Query(`SELECT off, object, len FROM blob_chunks WHERE chunks = ? ORDER BY off`, int64(set))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []chunkRow
	for rows.Next() {
		var r chunkRow
		if err := rows.Scan(&r.off, &r.object, &r.len); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// plantObject writes value as the object name in the file:// bucket dir,
// as a writer that died after its write finished leaves it.
func plantObject(t *testing.T, dir, name string, value []byte) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, value, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sweepAll runs the orphan step with no grace until its listing wraps.
func sweepAll(t *testing.T, e *sqlite.Engine) {
	t.Helper()
	for range 100 {
		got, err := e.GC().(gc.OrphanSweeper).SweepOrphans(context.WithoutCancel(t.Context()), gc.OrphanParams{Limit: 100})
		if err != nil {
			t.Fatalf("SweepOrphans: %v", err)
		}
		if got.Wrapped {
			return
		}
	}
	t.Fatal("the orphan sweep never wrapped")
}

func wantStatus(t *testing.T, e *sqlite.Engine, set blob.ChunkSet, owner string, size int64, state string) {
	t.Helper()
	st, err := e.Blobs().UploadStatus(t.Context(), set)
	if err != nil || st.Owner != owner || st.Size != size || string(st.State) != state {
		t.Fatalf("UploadStatus = %+v (state %q), %v; want owner %q, size %d, state %q", st, st.State, err, owner, size, state)
	}
}

func stateFunc(s string) func() []byte { return func() []byte { return []byte(s) } }

// failingReader yields its bytes, then fails.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// TestUploadCrashMidObject: a writer that named its object chunk and died
// before committing it (here: its source failed, and the process closed)
// leaves an unfinished chunk row: the upload's status is unchanged, the
// orphan sweep keeps its object, and the next append at that offset,
// an object or a data chunk, replaces the row and deletes the object.
func TestUploadCrashMidObject(t *testing.T) {
	t.Parallel()
	for _, next := range []string{"WriteValue", "WriteChunk"} {
		t.Run(next, func(t *testing.T) {
			t.Parallel()
			path, dir := tempPath(t), t.TempDir()
			e := openTiered(t, path, dir)
			ctx := t.Context()
			head := randomValue(100)
			set, err := e.Blobs().BeginUpload(ctx, blob.BeginUploadParams{Owner: "team/app", State: []byte("s0"), Lease: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Blobs().WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: 0, Data: head, State: []byte("s100"), Lease: time.Hour}); err != nil {
				t.Fatal(err)
			}
			boom := errors.New("the writer died")
			_, err = e.Blobs().WriteValue(ctx, blob.WriteValueParams{Set: set, Off: 100, Value: &failingReader{bytes.NewReader(randomValue(5000)), boom}, Lease: time.Hour, State: stateFunc("never")})
			if !errors.Is(err, boom) {
				t.Fatalf("WriteValue of a failing source = %v, want its error", err)
			}
			rows := chunkRows(t, rawDB(t, path), set)
			if len(rows) != 2 || rows[1].off != 100 || !rows[1].object.Valid || rows[1].len.Valid {
				t.Fatalf("chunk rows = %+v, want the data chunk and an unfinished object chunk at 100", rows)
			}
			dead := rows[1].object.String
			// The dying writer had finished its object; the process is gone.
			plantObject(t, dir, dead, randomValue(5000))
			e.Close()
			e = openTiered(t, path, dir)
			wantStatus(t, e, set, "team/app", 100, "s100")
			if c, err := e.Blobs().ReadChunk(ctx, set, 100); err != nil || c.Start != 0 || c.Size != 100 || c.Object != "" {
				t.Fatalf("ReadChunk(100) = %+v, %v; want the committed chunk at 0 only", c, err)
			}
			sweepAll(t, e)
			if files := objectFiles(t, dir); !slices.Equal(files, []string{dead}) {
				t.Fatalf("after the orphan sweep the bucket holds %q, want the unfinished chunk's object %s", files, dead)
			}

			tail := randomValue(3000)
			if next == "WriteValue" {
				n, err := e.Blobs().WriteValue(ctx, blob.WriteValueParams{Set: set, Off: 100, Value: bytes.NewReader(tail), Lease: time.Hour, State: stateFunc("s3100")})
				if err != nil || n != int64(len(tail)) {
					t.Fatalf("WriteValue at 100 after the crash = %d, %v", n, err)
				}
			} else if err := e.Blobs().WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: 100, Data: tail, State: []byte("s3100"), Lease: time.Hour}); err != nil {
				t.Fatalf("WriteChunk at 100 after the crash: %v", err)
			}
			wantStatus(t, e, set, "team/app", 3100, "s3100")
			files := objectFiles(t, dir)
			if slices.Contains(files, dead) || next == "WriteValue" && len(files) != 1 || next == "WriteChunk" && len(files) != 0 {
				t.Fatalf("after the append the bucket holds %q: want the replaced object %s gone, and the new one's only", files, dead)
			}
			value := append(bytes.Clone(head), tail...)
			key := blob.KeyOf(value)
			if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "test", TTL: time.Minute}); err != nil {
				t.Fatalf("publish: %v", err)
			}
			wantRead(t, blob.NewStore(e.Blobs(), blob.Options{}), key, value)
		})
	}
}

// wantRead reads key through s and checks its bytes.
func wantRead(t *testing.T, s *blob.Store, key blob.Key, want []byte) {
	t.Helper()
	rd, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rd.Close()
	got, err := io.ReadAll(rd)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get(%s) read %d bytes, %v; want the %d stored", key, len(got), err, len(want))
	}
}

// TestWriteValueRace: two object appends at one offset. The last to name
// its object wins; the other, replaced, fails with ErrConflict and its
// object is deleted. Racing freely, exactly one of two commits. Once the
// upload is aborted and the orphans swept, the bucket holds nothing.
func TestWriteValueRace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := openTiered(t, tempPath(t), dir)
	ctx := t.Context()
	begin := func() blob.ChunkSet {
		t.Helper()
		set, err := e.Blobs().BeginUpload(ctx, blob.BeginUploadParams{State: []byte("s0"), Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	wv := func(set blob.ChunkSet, r io.Reader, state string) (int64, error) {
		return e.Blobs().WriteValue(ctx, blob.WriteValueParams{Set: set, Value: r, Lease: time.Hour, State: stateFunc(state)})
	}

	t.Run("LastNamedWins", func(t *testing.T) {
		set := begin()
		first, second := randomValue(2000), randomValue(3000)
		type result struct {
			n   int64
			err error
		}
		pipe := func(state string) (*io.PipeWriter, chan result) {
			pr, pw := io.Pipe()
			done := make(chan result, 1)
			go func() {
				n, err := wv(set, pr, state)
				pr.CloseWithError(err)
				done <- result{n, err}
			}()
			return pw, done
		}
		pwA, doneA := pipe("A")
		if _, err := pwA.Write(first[:1000]); err != nil { // A's name is committed once it reads
			t.Fatal(err)
		}
		pwB, doneB := pipe("B")
		if _, err := pwB.Write(second[:1000]); err != nil { // B's replaces it
			t.Fatal(err)
		}
		pwA.Write(first[1000:])
		pwA.Close()
		if r := <-doneA; !errors.Is(r.err, steaderr.ErrConflict) {
			t.Fatalf("the replaced WriteValue = %d, %v; want ErrConflict", r.n, r.err)
		}
		pwB.Write(second[1000:])
		pwB.Close()
		if r := <-doneB; r.err != nil || r.n != int64(len(second)) {
			t.Fatalf("the last WriteValue = %d, %v; want %d bytes", r.n, r.err, len(second))
		}
		wantStatus(t, e, set, "", int64(len(second)), "B")
		if files := objectFiles(t, dir); len(files) != 1 {
			t.Fatalf("bucket holds %q, want the winner's object only", files)
		}
		c, err := e.Blobs().ReadChunk(ctx, set, 0)
		if err != nil || c.Object == "" || c.Size != int64(len(second)) {
			t.Fatalf("ReadChunk(0) = %+v, %v; want the winner's object chunk", c, err)
		}
		if err := e.Blobs().AbortUpload(ctx, set); err != nil {
			t.Fatal(err)
		}
		sweepAll(t, e)
		if files := objectFiles(t, dir); len(files) != 0 {
			t.Fatalf("after the abort and the orphan sweep the bucket holds %q, want nothing", files)
		}
	})

	t.Run("Free", func(t *testing.T) {
		for round := range 10 {
			set := begin()
			values := [2][]byte{randomValue(200_000 + round), randomValue(300_000 + round)}
			var errs [2]error
			var ns [2]int64
			var wg sync.WaitGroup
			for i := range values {
				wg.Go(func() { ns[i], errs[i] = wv(set, bytes.NewReader(values[i]), string(rune('A'+i))) })
			}
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Fatalf("round %d: both appends committed", round)
				case err == nil:
					winner = i
				case !errors.Is(err, steaderr.ErrConflict):
					t.Fatalf("round %d: append %d = %v, want nil or ErrConflict", round, i, err)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: neither append committed: %v", round, errs)
			}
			wantStatus(t, e, set, "", ns[winner], string(rune('A'+winner)))
			if err := e.Blobs().AbortUpload(ctx, set); err != nil {
				t.Fatal(err)
			}
		}
		sweepAll(t, e)
		if files := objectFiles(t, dir); len(files) != 0 {
			t.Fatalf("after the aborts and the orphan sweep the bucket holds %q, want nothing", files)
		}
	})
}

// setRowBytes sums the lengths of what the database holds for set: its
// chunk rows, its upload row, and the blob row naming it, column by
// column (an integer as 8 bytes).
func setRowBytes(t *testing.T, db *sql.DB, set blob.ChunkSet) (chunks, total int64) {
	t.Helper()
	var chunkBytes, uploadBytes, blobBytes int64
	err := db.QueryRow(`SELECT count(*), coalesce(sum(16 + length(data) + coalesce(length(object), 0) + 8), 0) FROM blob_chunks WHERE chunks = ?1`, int64(set)).Scan(&chunks, &chunkBytes)
	if err == nil {
		err = db.QueryRow(`SELECT coalesce(sum(24 + length(owner) + coalesce(length(state), 0)), 0) FROM blob_uploads WHERE id = ?1`, int64(set)).Scan(&uploadBytes)
	}
	if err == nil {
		err = db.QueryRow(`SELECT coalesce(sum(length(key) + 16 + length(value)), 0) FROM blobs WHERE chunks = ?1`, int64(set)).Scan(&blobBytes)
	}
	if err != nil {
		t.Fatal(err)
	}
	return chunks, chunkBytes + uploadBytes + blobBytes
}

// TestUploadObjectChunks appends an upload in parts on a file:// tier, a
// part at a time through stores that resume it by id: each part is one
// object, the database holds at most 1 KiB a chunk, staged and published,
// the value reads back whole, and deleting it deletes every object.
func TestUploadObjectChunks(t *testing.T) {
	t.Parallel()
	path, dir := tempPath(t), t.TempDir()
	e := openTiered(t, path, dir)
	db := rawDB(t, path)
	ctx := t.Context()
	opts := blob.Options{InlineLimit: 64, PinTTL: time.Millisecond}
	parts := [][]byte{randomValue(300_000), randomValue(1), randomValue(70_001), randomValue(2 << 20)}
	u, err := blob.NewStore(e.Blobs(), opts).BeginUpload(ctx, blob.UploadOptions{Owner: "team/app"})
	if err != nil {
		t.Fatal(err)
	}
	id := u.ID()
	var value []byte
	for i, part := range parts {
		// Each part through another store, as another server's.
		u, err := blob.NewStore(e.Blobs(), opts).ResumeUpload(ctx, id, blob.UploadOptions{Owner: "team/app"})
		if err != nil {
			t.Fatalf("ResumeUpload before part %d: %v", i, err)
		}
		if u.Size() != int64(len(value)) {
			t.Fatalf("resumed upload holds %d bytes, want %d", u.Size(), len(value))
		}
		if n, err := u.Append(ctx, bytes.NewReader(part)); err != nil || n != int64(len(part)) {
			t.Fatalf("Append of part %d = %d, %v", i, n, err)
		}
		value = append(value, part...)
	}
	if files := objectFiles(t, dir); len(files) != len(parts) {
		t.Fatalf("bucket holds %d objects, want one per part (%d)", len(files), len(parts))
	}
	var set blob.ChunkSet
	if err := db.QueryRow(`SELECT id FROM blob_uploads`).Scan(&set); err != nil {
		t.Fatal(err)
	}
	n, total := setRowBytes(t, db, set)
	if n != int64(len(parts)) || total > n<<10 {
		t.Fatalf("the staged upload holds %d chunk rows, %d bytes of rows; want %d rows of at most 1 KiB each", n, total, len(parts))
	}
	s := blob.NewStore(e.Blobs(), opts)
	u, err = s.ResumeUpload(ctx, id, blob.UploadOptions{Owner: "team/app"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := u.Commit(ctx, blob.CommitOptions{Expect: blob.KeyOf(value)})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	st, err := e.Blobs().Get(ctx, key)
	if err != nil || st.Chunks != set || st.Object != "" || st.Size != int64(len(value)) {
		t.Fatalf("Get = %+v, %v; want chunk set %d of %d bytes", st, err, set, len(value))
	}
	n, total = setRowBytes(t, db, set)
	if n != int64(len(parts)) || total > n<<10 {
		t.Fatalf("the published value holds %d chunk rows, %d bytes of rows; want %d rows of at most 1 KiB each", n, total, len(parts))
	}
	wantRead(t, s, key, value)
	rd, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// A read spanning every part's boundary.
	got := make([]byte, 100_000)
	if n, err := rd.ReadAt(got, 299_990); err != nil || n != len(got) || !bytes.Equal(got, value[299_990:399_990]) {
		t.Fatalf("ReadAt across parts = %d, %v", n, err)
	}
	time.Sleep(2 * time.Millisecond) // the commit's pin lapses
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if files := objectFiles(t, dir); len(files) != 0 {
		t.Fatalf("after Delete the bucket holds %q, want nothing", files)
	}
	if n, _ := setRowBytes(t, db, set); n != 0 {
		t.Fatalf("after Delete %d chunk rows are left", n)
	}
}

// TestUploadMissingChunkObject: a chunk object removed behind the store's
// back fails the read of its value with ErrCorrupt, not ErrNotFound.
func TestUploadMissingChunkObject(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := openTiered(t, tempPath(t), dir)
	ctx := t.Context()
	s := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64})
	u, err := s.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, second := randomValue(5000), randomValue(6000)
	for _, part := range [][]byte{first, second} {
		if _, err := u.Append(ctx, bytes.NewReader(part)); err != nil {
			t.Fatal(err)
		}
	}
	key, err := u.Commit(ctx, blob.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.Blobs().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.Blobs().ReadChunk(ctx, st.Chunks, 5000)
	if err != nil || c.Object == "" || c.Start != 5000 || c.Size != 6000 {
		t.Fatalf("ReadChunk(5000) = %+v, %v; want the second part's object", c, err)
	}
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(c.Object))); err != nil {
		t.Fatal(err)
	}
	rd, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := io.ReadAll(rd); !errors.Is(err, steaderr.ErrCorrupt) {
		t.Fatalf("read of a value whose chunk object is missing = %v, want ErrCorrupt", err)
	}
	if err := s.Verify(ctx, key); !errors.Is(err, steaderr.ErrCorrupt) {
		t.Fatalf("Verify = %v, want ErrCorrupt", err)
	}
}

// TestMigrateUploadObjects seeds a store as release 12 of the schema left
// it, with uploads in flight over a bytes tier: one whose object was
// written whole, one still writing its object, one of data chunks. The
// migration keeps each: the objects become object chunks at offset 0 (the
// unfinished one without a size), the sizes are what the committed chunks
// hold, the orphan sweep keeps the objects, the written one publishes as
// its object, and an abort deletes the other's.
func TestMigrateUploadObjects(t *testing.T) {
	t.Parallel()
	path, dir := tempPath(t), t.TempDir()
	e := openConfig(t, sqlite.Config{Path: path, Bytes: "file://" + filepath.ToSlash(dir)})
	sqlite.MigrateTo(t, e, 12)
	db := rawDB(t, path)
	const whole, writing, chunked = 101, 202, 303
	wholeValue, chunks := randomValue(5000), randomValue(300)
	wholeName, writingName := "o/aa/00000000000000000000000000000a", "o/bb/00000000000000000000000000000b"
	expires := time.Now().Add(time.Hour).UnixNano()
	for _, q := range []struct {
		query string
		args  []any
	}{
		{`INSERT INTO blob_uploads (id, expires_at, object, object_size) VALUES (?, ?, ?, ?)`, []any{whole, expires, wholeName, len(wholeValue)}},
		{`INSERT INTO blob_uploads (id, expires_at, object) VALUES (?, ?, ?)`, []any{writing, expires, writingName}},
		{`INSERT INTO blob_uploads (id, expires_at) VALUES (?, ?)`, []any{chunked, expires}},
		{`INSERT INTO blob_chunks (chunks, off, data) VALUES (?, 0, ?), (?, 100, ?)`, []any{chunked, chunks[:100], chunked, chunks[100:]}},
	} {
		if _, err := db.Exec(q.query, q.args...); err != nil {
			t.Fatal(err)
		}
	}
	plantObject(t, dir, wholeName, wholeValue)
	plantObject(t, dir, writingName, randomValue(10)) // a writer's file, whole or not
	mustMigrate(t, e)

	for _, w := range []struct {
		set    blob.ChunkSet
		size   int64
		chunks []chunkRow
	}{
		{whole, 5000, []chunkRow{{0, sql.NullString{String: wholeName, Valid: true}, sql.NullInt64{Int64: 5000, Valid: true}}}},
		{writing, 0, []chunkRow{{0, sql.NullString{String: writingName, Valid: true}, sql.NullInt64{}}}},
		{chunked, 300, []chunkRow{{off: 0}, {off: 100}}},
	} {
		wantStatus(t, e, w.set, "", w.size, "")
		if got := chunkRows(t, db, w.set); !slices.Equal(got, w.chunks) {
			t.Errorf("upload %d's chunk rows = %+v, want %+v", w.set, got, w.chunks)
		}
	}
	if _, err := db.Exec(`SELECT object FROM blob_uploads`); err == nil {
		t.Error("blob_uploads.object is still there")
	}
	sweepAll(t, e)
	if files := objectFiles(t, dir); len(files) != 2 {
		t.Fatalf("after the orphan sweep the bucket holds %q, want both uploads' objects", files)
	}
	key := blob.KeyOf(wholeValue)
	if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: key, Chunks: whole, Size: 5000, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatalf("publish of the migrated upload: %v", err)
	}
	if st, err := e.Blobs().Get(t.Context(), key); err != nil || st.Object != wholeName || st.Chunks != 0 {
		t.Fatalf("Get = %+v, %v; want the object %s", st, err, wholeName)
	}
	if rows := chunkRows(t, db, whole); len(rows) != 0 {
		t.Fatalf("the published object's chunk row is left: %+v", rows)
	}
	wantRead(t, blob.NewStore(e.Blobs(), blob.Options{}), key, wholeValue)
	if err := e.Blobs().AbortUpload(t.Context(), writing); err != nil {
		t.Fatal(err)
	}
	if files := objectFiles(t, dir); !slices.Equal(files, []string{wholeName}) {
		t.Fatalf("after the abort the bucket holds %q, want the published object only", files)
	}
	chunkedValue := chunks
	if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: blob.KeyOf(chunkedValue), Chunks: chunked, Size: 300, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatalf("publish of the migrated chunked upload: %v", err)
	}
	wantRead(t, blob.NewStore(e.Blobs(), blob.Options{}), blob.KeyOf(chunkedValue), chunkedValue)
}

// TestPublishDiscardsUnfinished: a publish takes the committed chunks
// only. An unfinished chunk a dead writer left past them goes, its object
// deleted; an upload whose one committed chunk is an object publishes as
// that object; a publish of a key stored already deletes every object of
// the upload.
func TestPublishDiscardsUnfinished(t *testing.T) {
	t.Parallel()
	path, dir := tempPath(t), t.TempDir()
	e := openTiered(t, path, dir)
	db := rawDB(t, path)
	ctx := t.Context()
	value := randomValue(4000)
	key := blob.KeyOf(value)
	stage := func() (blob.ChunkSet, string) {
		t.Helper()
		set, err := e.Blobs().BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Blobs().WriteValue(ctx, blob.WriteValueParams{Set: set, Value: bytes.NewReader(value), Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("the writer died")
		_, err = e.Blobs().WriteValue(ctx, blob.WriteValueParams{Set: set, Off: 4000, Value: &failingReader{bytes.NewReader(randomValue(10)), boom}, Lease: time.Hour})
		if !errors.Is(err, boom) {
			t.Fatalf("WriteValue of a failing source = %v, want its error", err)
		}
		rows := chunkRows(t, db, set)
		if len(rows) != 2 || rows[1].len.Valid {
			t.Fatalf("chunk rows = %+v, want an object chunk and an unfinished one", rows)
		}
		plantObject(t, dir, rows[1].object.String, randomValue(10))
		return set, rows[0].object.String
	}
	publish := func(set blob.ChunkSet) {
		t.Helper()
		if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: 4000, Owner: "test", TTL: time.Minute}); err != nil {
			t.Fatalf("publish: %v", err)
		}
		if rows := chunkRows(t, db, set); len(rows) != 0 {
			t.Fatalf("after the publish the set keeps chunk rows %+v", rows)
		}
	}
	set, object := stage()
	publish(set)
	if st, err := e.Blobs().Get(ctx, key); err != nil || st.Object != object || st.Chunks != 0 {
		t.Fatalf("Get = %+v, %v; want the object %s", st, err, object)
	}
	if files := objectFiles(t, dir); !slices.Equal(files, []string{object}) {
		t.Fatalf("bucket holds %q, want the published object %s only", files, object)
	}
	again, _ := stage()
	publish(again)
	if files := objectFiles(t, dir); !slices.Equal(files, []string{object}) {
		t.Fatalf("after a publish of a stored key the bucket holds %q, want the first object %s only", files, object)
	}
	wantRead(t, blob.NewStore(e.Blobs(), blob.Options{}), key, value)
}
