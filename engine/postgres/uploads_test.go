package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// tiered is a store on one schema and one file:// bucket, opened as many
// times as a test needs engines (servers of one fleet).
type tiered struct {
	db     *pgtest.DB
	dir    string
	params string
}

func newTiered(t *testing.T) *tiered {
	t.Helper()
	dir := t.TempDir()
	return &tiered{db: pgtest.New(t), dir: dir, params: "&bytes=" + url.QueryEscape("file://"+filepath.ToSlash(dir))}
}

// open opens an engine on the store, with more URL parameters.
func (s *tiered) open(t *testing.T, params string) *postgres.Engine {
	t.Helper()
	return open(t, s.db, s.params+params)
}

// table returns the schema-qualified, quoted name of table.
func (s *tiered) table(name string) string { return pgx.Identifier{s.db.Schema, name}.Sanitize() }

// objects lists the objects in the bucket, sorted.
func (s *tiered) objects(t *testing.T) []string {
	t.Helper()
	var names []string
	root := filepath.Join(s.dir, "o")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == root {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(s.dir, p)
		names = append(names, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// named lists the objects the store's rows name, sorted: blobs' and
// chunks', finished or not.
func (s *tiered) named(t *testing.T) []string {
	t.Helper()
	rows, err := s.db.Admin.Query(t.Context(), "SELECT object FROM "+s.table("blobs")+" WHERE object IS NOT NULL UNION ALL SELECT object FROM "+s.table("blob_chunks")+" WHERE object IS NOT NULL ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// wantBucketIsRows checks that the bucket holds exactly the objects the
// rows name: none leaked, none missing.
func (s *tiered) wantBucketIsRows(t *testing.T, what string) {
	t.Helper()
	if got, want := s.objects(t), s.named(t); !slices.Equal(got, want) {
		t.Fatalf("%s: the bucket holds %q, the rows name %q", what, got, want)
	}
}

// unfinished counts the set's unfinished chunks.
func (s *tiered) unfinished(t *testing.T, set blob.ChunkSet) int {
	t.Helper()
	var n int
	if err := s.db.Admin.QueryRow(t.Context(), "SELECT count(*) FROM "+s.table("blob_chunks")+" WHERE chunks = $1 AND len IS NULL", int64(set)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// value returns n bytes that depend on label.
func value(label string, n int) []byte {
	v := make([]byte, n)
	var seed [32]byte
	copy(seed[:], label)
	_, _ = rand.NewChaCha8(seed).Read(v)
	return v
}

// state is the state the seam-level tests record with an upload of size
// bytes.
func state(size int64) []byte { return fmt.Appendf(nil, "after %d", size) }

// slowReader hands out its bytes a few at a time, pausing once in the
// middle, so that racing writers' streams overlap.
type slowReader struct {
	data   []byte
	paused bool
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	if !r.paused && len(r.data) < 512 {
		r.paused = true
		time.Sleep(time.Millisecond)
	}
	n := copy(p[:min(len(p), 97)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestUploadAppendRaces races appends at one offset, chunk rows and
// object chunks, from two engines on one store (two servers), round after
// round: in each, exactly one commits and the others fail with
// ErrConflict; the upload's size, state and chunk are the winner's; no
// unfinished chunk is left and the bucket holds exactly the objects the
// rows name. The value published at the end reads back as the winners'
// bytes.
func TestUploadAppendRaces(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTiered(t)
	engs := [2]blob.Backend{s.open(t, "").Blobs(), s.open(t, "").Blobs()}
	set, err := engs[0].BeginUpload(ctx, blob.BeginUploadParams{Owner: "racers", State: state(0), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const writers = 4
	var model []byte
	for round := range 24 {
		off := int64(len(model))
		var contents [writers][]byte
		var objects [writers]bool // a WriteValue, not a WriteChunk
		for i := range writers {
			contents[i] = value(fmt.Sprintf("round %d writer %d", round, i), 700+97*i+round)
			// Every third round only objects; otherwise one or two chunk rows.
			objects[i] = round%3 == 0 || i >= 1+round%3
		}
		var errs [writers]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range writers {
			eng := engs[i%2]
			wg.Go(func() {
				<-start
				end := off + int64(len(contents[i]))
				if !objects[i] {
					errs[i] = eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: contents[i], State: state(end), Lease: time.Minute})
					return
				}
				n, err := eng.WriteValue(ctx, blob.WriteValueParams{Set: set, Off: off, Value: &slowReader{data: contents[i]}, Lease: time.Minute, State: func() []byte { return state(end) }})
				if err == nil && n != int64(len(contents[i])) {
					err = fmt.Errorf("WriteValue wrote %d bytes of %d", n, len(contents[i]))
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: appends %d and %d at %d both committed", round, winner, i, off)
			case err == nil:
				winner = i
			case !errors.Is(err, steaderr.ErrConflict):
				t.Fatalf("round %d: append %d (object %v): %v, want nil or ErrConflict", round, i, objects[i], err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no append at %d committed: %v", round, off, errs)
		}
		model = append(model, contents[winner]...)
		st, err := engs[round%2].UploadStatus(ctx, set)
		if err != nil || st.Owner != "racers" || st.Size != int64(len(model)) || !bytes.Equal(st.State, state(int64(len(model)))) {
			t.Fatalf("round %d: UploadStatus = %+v, %v; want owner racers, size %d, state %q", round, st, err, len(model), state(int64(len(model))))
		}
		c, err := engs[(round+1)%2].ReadChunk(ctx, set, off)
		if err != nil || c.Start != off || c.Size != int64(len(contents[winner])) || (c.Object != "") != objects[winner] || !objects[winner] && !bytes.Equal(c.Data, contents[winner]) {
			t.Fatalf("round %d: ReadChunk(%d) = chunk at %d of %d bytes, object %q, %v; want the winner's (object %v, %d bytes)", round, off, c.Start, c.Size, c.Object, err, objects[winner], len(contents[winner]))
		}
		if n := s.unfinished(t, set); n != 0 {
			t.Fatalf("round %d: %d unfinished chunks left", round, n)
		}
		s.wantBucketIsRows(t, fmt.Sprintf("round %d", round))
	}
	key := blob.KeyOf(model)
	if _, err := engs[1].Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(model)), Owner: "racers", TTL: time.Hour}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	rd, err := blob.NewStore(engs[0], blob.Options{}).Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("the published value reads %d bytes (%v), want the %d the winners appended", len(got), err, len(model))
	}
	s.wantBucketIsRows(t, "after the publish")
}

// blockingReader hands out head, then blocks until its context ends and
// fails with the context's error: a client that stalls mid-stream.
type blockingReader struct {
	ctx  context.Context
	head []byte
}

func (r *blockingReader) Read(p []byte) (int, error) {
	if len(r.head) > 0 {
		n := copy(p, r.head)
		r.head = r.head[n:]
		return n, nil
	}
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

// TestUploadKilledMidAppend kills the engine (server) appending an object
// chunk after the chunk's name committed and before its size did (its
// context cancelled while it streams or once the object is written whole,
// or its pool closed), and continues the upload from another engine: the
// upload's size is as before the append, the append is made again there,
// the value commits and reads back whole, and the killed append's object
// goes with the chunk that replaced it. An upload reaped meanwhile fails
// the append with ErrLost and leaves no object.
func TestUploadKilledMidAppend(t *testing.T) {
	t.Parallel()
	for _, kill := range []string{"cancel mid-stream", "cancel once written", "close once written", "reaped once written"} {
		t.Run(strings.ReplaceAll(kill, " ", "-"), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := newTiered(t)
			killed, other := s.open(t, ""), s.open(t, "")
			opts := blob.Options{InlineLimit: 16}
			storeA, storeB := blob.NewStore(killed.Blobs(), opts), blob.NewStore(other.Blobs(), opts)
			first, second := value("first part "+kill, 3000), value("second part "+kill, 5000)
			u, err := storeA.BeginUpload(ctx, blob.UploadOptions{Owner: "team/app"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := u.Append(ctx, bytes.NewReader(first)); err != nil {
				t.Fatalf("first Append: %v", err)
			}
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			var r io.Reader = bytes.NewReader(second)
			switch kill {
			case "cancel mid-stream":
				r = &blockingReader{ctx: actx, head: second[:1000]}
				go func() {
					// Cancel once the chunk is named and the stream stalls.
					waitUnfinished(t, s, 1)
					cancel()
				}()
			case "cancel once written":
				postgres.SetBeforeFinish(killed, cancel)
			case "close once written":
				postgres.SetBeforeFinish(killed, func() { killed.Close() })
			case "reaped once written":
				postgres.SetBeforeFinish(killed, func() {
					if n, err := other.Blobs().ReapUploads(ctx, blob.ReapUploadsParams{Now: time.Now().Add(time.Hour)}); err != nil || n != 1 {
						t.Errorf("ReapUploads = %d, %v; want the upload reaped", n, err)
					}
				})
			}
			_, err = u.Append(actx, r)
			if kill == "reaped once written" {
				if !errors.Is(err, steaderr.ErrLost) {
					t.Fatalf("Append to an upload reaped before its chunk finished: %v, want ErrLost", err)
				}
				s.wantBucketIsRows(t, "after the reap")
				if got := s.objects(t); len(got) != 0 {
					t.Fatalf("after the reap the bucket holds %q, want nothing", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("the killed Append committed")
			}
			t.Logf("killed Append: %v", err)
			if kill != "cancel mid-stream" {
				// The object is whole, named by an unfinished chunk only.
				if got, named := s.objects(t), s.named(t); len(got) != 2 || !slices.Equal(got, named) || s.unfinished(t, blob.ChunkSet(mustParseID(t, u.ID()))) != 1 {
					t.Fatalf("after the kill the bucket holds %q, the rows name %q; want the first part's object and the killed one's, an unfinished chunk naming it", got, named)
				}
			}
			resumed, err := storeB.ResumeUpload(ctx, u.ID(), blob.UploadOptions{Owner: "team/app"})
			if err != nil {
				t.Fatalf("ResumeUpload on the other engine: %v", err)
			}
			if resumed.Size() != int64(len(first)) {
				t.Fatalf("resumed upload holds %d bytes, want the first part's %d", resumed.Size(), len(first))
			}
			if n, err := resumed.Append(ctx, bytes.NewReader(second)); err != nil || n != int64(len(second)) {
				t.Fatalf("Append on the other engine = %d, %v", n, err)
			}
			whole := append(bytes.Clone(first), second...)
			key, err := resumed.Commit(ctx, blob.CommitOptions{Expect: blob.KeyOf(whole)})
			if err != nil {
				t.Fatalf("Commit on the other engine: %v", err)
			}
			rd, err := storeB.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, whole) {
				t.Fatalf("the committed value reads %d bytes (%v), want %d", len(got), err, len(whole))
			}
			s.wantBucketIsRows(t, "after the commit")
		})
	}
}

// waitUnfinished waits until the store holds n unfinished chunks, or the
// test ends. It may run on a goroutine of its own.
func waitUnfinished(t *testing.T, s *tiered, n int) {
	for {
		var got int
		err := s.db.Admin.QueryRow(t.Context(), "SELECT count(*) FROM "+s.table("blob_chunks")+" WHERE len IS NULL").Scan(&got)
		if err != nil || got >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func mustParseID(t *testing.T, id string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscanf(id, "%016x", &n); err != nil {
		t.Fatalf("upload ID %q: %v", id, err)
	}
	return n
}

// pacedReader hands out its bytes in pieces, pausing between them, so
// that an append streams for a while.
type pacedReader struct {
	data  []byte
	piece int
	pause time.Duration
}

func (r *pacedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.pause)
	n := copy(p[:min(len(p), r.piece)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestUploadPoolOfOne runs a tiered upload of several object chunks on an
// engine with one connection, each append streaming for longer than the
// upload's lease while a reaper runs on the same connection: the lease's
// renewals, the reaper and each chunk's finishing transaction take the
// connection in turn (none waits on another holding it), the upload is
// never reaped, and the value commits and reads back whole.
func TestUploadPoolOfOne(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := newTiered(t)
	eng := s.open(t, "&pool_max_conns=1")
	const lease = 1500 * time.Millisecond
	store := blob.NewStore(eng.Blobs(), blob.Options{InlineLimit: 16, UploadLease: lease})
	u, err := store.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var reaper sync.WaitGroup
	reaper.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := eng.Blobs().ReapUploads(ctx, blob.ReapUploadsParams{}); err != nil {
				t.Errorf("ReapUploads: %v", err)
				return
			}
		}
	})
	var whole []byte
	for i := range 3 {
		part := value(fmt.Sprintf("part %d", i), 40<<10)
		// 40 pieces of 1 KiB, 50 ms apart: 2 s, longer than the lease.
		if n, err := u.Append(ctx, &pacedReader{data: part, piece: 1 << 10, pause: 50 * time.Millisecond}); err != nil || n != int64(len(part)) {
			close(stop)
			reaper.Wait()
			t.Fatalf("Append %d = %d, %v", i, n, err)
		}
		whole = append(whole, part...)
	}
	close(stop)
	reaper.Wait()
	key, err := u.Commit(ctx, blob.CommitOptions{Expect: blob.KeyOf(whole)})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	rd, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, whole) {
		t.Fatalf("the value reads %d bytes (%v), want %d", len(got), err, len(whole))
	}
	s.wantBucketIsRows(t, "after the commit")
}

// TestUploadDatabaseBytes appends a value of many parts to a tiered
// store, each part an object chunk, and checks that the database holds at
// most 1 KiB per chunk (the rows' own sizes, pg_column_size) while the
// upload is in flight and once it is committed, the bytes being in the
// bucket.
func TestUploadDatabaseBytes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTiered(t)
	eng := s.open(t, "")
	store := blob.NewStore(eng.Blobs(), blob.Options{InlineLimit: 512})
	u, err := store.BeginUpload(ctx, blob.UploadOptions{Owner: "team/app"})
	if err != nil {
		t.Fatal(err)
	}
	const parts, partSize = 12, 256 << 10
	var whole []byte
	for i := range parts {
		part := value(fmt.Sprintf("part %d", i), partSize)
		if _, err := u.Append(ctx, bytes.NewReader(part)); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		whole = append(whole, part...)
	}
	set := mustParseID(t, u.ID())
	rowBytes := func(what string) {
		t.Helper()
		var chunks, total int64
		err := s.db.Admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+s.table("blob_chunks")+`),
			(SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM `+s.table("blob_chunks")+` c)
			+ (SELECT coalesce(sum(pg_column_size(u.*)), 0) FROM `+s.table("blob_uploads")+` u)
			+ (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM `+s.table("blobs")+` b)`).Scan(&chunks, &total)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d chunk rows, %d bytes of rows for %d bytes of value", what, chunks, total, len(whole))
		if n := max(chunks, 1); total > n<<10 {
			t.Fatalf("%s: %d bytes of rows for %d chunks, want at most 1 KiB per chunk", what, total, n)
		}
	}
	var chunks int
	if err := s.db.Admin.QueryRow(ctx, "SELECT count(*) FROM "+s.table("blob_chunks")+" WHERE chunks = $1 AND object IS NOT NULL", set).Scan(&chunks); err != nil || chunks != parts {
		t.Fatalf("the upload has %d object chunks (%v), want %d", chunks, err, parts)
	}
	rowBytes("in flight")
	key, err := u.Commit(ctx, blob.CommitOptions{})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	rowBytes("committed")
	rd, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, whole) {
		t.Fatalf("the value reads %d bytes (%v), want %d", len(got), err, len(whole))
	}
}

// TestMigrateInFlightObjectUploads seeds a schema as release 15 left it,
// with uploads in flight: one whose object was written whole, one whose
// object was being written, one of chunk rows written out of order (a gap
// after 200 bytes). Once migrated, each object is its upload's chunk at
// offset 0 (whole, or unfinished), each upload's size is where its chunks
// stop tiling it (the chunks past a gap go), the whole one publishes as
// its object, and aborting the others deletes their objects.
func TestMigrateInFlightObjectUploads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTiered(t)
	e := openVirgin(t, s.db, s.params)
	if err := postgres.MigrateTo(ctx, e, 15); err != nil {
		t.Fatalf("MigrateTo(15): %v", err)
	}
	whole, partial := value("written whole", 4000), value("being written", 1500)
	wholeName, partialName := "o/ab/"+strings.Repeat("1", 30), "o/cd/"+strings.Repeat("2", 30)
	for name, v := range map[string][]byte{wholeName: whole, partialName: partial} {
		path := filepath.Join(s.dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const wholeSet, partialSet, rowsSet = 1111, 2222, 3333
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{"INSERT INTO " + s.table("blob_uploads") + " (id, expires_at, object, object_size) VALUES ($1, now() + interval '1 hour', $2, $3)", []any{wholeSet, wholeName, len(whole)}},
		{"INSERT INTO " + s.table("blob_uploads") + " (id, expires_at, object) VALUES ($1, now() + interval '1 hour', $2)", []any{partialSet, partialName}},
		{"INSERT INTO " + s.table("blob_uploads") + " (id, expires_at) VALUES ($1, now() + interval '1 hour')", []any{rowsSet}},
		{"INSERT INTO " + s.table("blob_chunks") + " (chunks, off, data) VALUES ($1, 0, $2), ($1, 100, $3), ($1, 300, $4)", []any{rowsSet, value("a", 100), value("b", 100), value("c", 100)}},
	} {
		if _, err := s.db.Admin.Exec(ctx, stmt.sql, stmt.args...); err != nil {
			t.Fatalf("%s: %v", stmt.sql, err)
		}
	}
	if err := e.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	eng := e.Blobs()
	for _, want := range []struct {
		set  blob.ChunkSet
		size int64
	}{{wholeSet, int64(len(whole))}, {partialSet, 0}, {rowsSet, 200}} {
		st, err := eng.UploadStatus(ctx, want.set)
		if err != nil || st.Size != want.size || st.Owner != "" || st.State != nil {
			t.Errorf("after the migration, UploadStatus(%d) = %+v, %v; want size %d, no owner, no state", want.set, st, err, want.size)
		}
	}
	if c, err := eng.ReadChunk(ctx, wholeSet, 100); err != nil || c.Start != 0 || c.Size != int64(len(whole)) || c.Object != wholeName {
		t.Errorf("ReadChunk of the whole object's upload = %+v, %v; want its object at 0", c, err)
	}
	if c, err := eng.ReadChunk(ctx, rowsSet, 350); err != nil || c.Start != 100 || c.Size != 100 {
		t.Errorf("ReadChunk(350) of the upload with a gap = chunk at %d of %d bytes, %v; want the chunk at 100 (the one past the gap gone)", c.Start, c.Size, err)
	}
	if c, err := eng.ReadChunk(ctx, partialSet, 0); !errors.Is(err, steaderr.ErrNotFound) {
		t.Errorf("ReadChunk of the unfinished object's upload = %+v, %v; want ErrNotFound (no committed chunk)", c, err)
	}
	if n := s.unfinished(t, partialSet); n != 1 {
		t.Errorf("the object being written is %d unfinished chunks, want 1", n)
	}
	key := blob.KeyOf(whole)
	if _, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: wholeSet, Size: int64(len(whole)), Owner: "o", TTL: time.Hour}); err != nil {
		t.Fatalf("publish of the whole object's upload: %v", err)
	}
	if st, err := eng.Get(ctx, key); err != nil || st.Object != wholeName || st.Chunks != 0 {
		t.Fatalf("Get = %+v, %v; want the value stored as its object %s", st, err, wholeName)
	}
	rd, err := blob.NewStore(eng, blob.Options{}).Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, whole) {
		t.Fatalf("the published value reads %d bytes (%v), want %d", len(got), err, len(whole))
	}
	for _, set := range []blob.ChunkSet{partialSet, rowsSet} {
		if err := eng.AbortUpload(ctx, set); err != nil {
			t.Fatalf("AbortUpload(%d): %v", set, err)
		}
	}
	if got := s.objects(t); !slices.Equal(got, []string{wholeName}) {
		t.Fatalf("after the aborts the bucket holds %q, want only %s", got, wholeName)
	}
	s.wantBucketIsRows(t, "after the aborts")
}

// gatedReader reads r once gate is closed.
type gatedReader struct {
	gate <-chan struct{}
	r    io.Reader
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.gate
	return g.r.Read(p)
}

// TestWriteChunkMeetsUnfinishedChunk holds an upload's row while an object
// chunk's naming and then a chunk row's append at the same offset wait on
// it, in that order: the naming commits an unfinished chunk the append's
// snapshot, taken before it waited, cannot see, so the append's insert
// meets it. The append must still replace it and commit (run again, its
// statement sees the chunk), and the object chunk's writer then fail with
// ErrConflict, deleting its object.
func TestWriteChunkMeetsUnfinishedChunk(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTiered(t)
	eng := s.open(t, "").Blobs()
	set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{State: state(0), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := s.db.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "SELECT FROM "+s.table("blob_uploads")+" WHERE id = $1 FOR UPDATE", int64(set)); err != nil {
		t.Fatal(err)
	}
	object, row := value("the object", 3000), value("the row", 1000)
	objectErr := make(chan error, 1)
	// The object's stream waits for the append to return, so that its
	// finishing transaction comes after the append.
	appended := make(chan struct{})
	go func() {
		_, err := eng.WriteValue(ctx, blob.WriteValueParams{Set: set, Value: &gatedReader{gate: appended, r: bytes.NewReader(object)}, Lease: time.Minute, State: func() []byte { return state(3000) }})
		objectErr <- err
	}()
	waitLockWaiters(t, s.db, 1, "the object chunk's naming to wait on the upload's row")
	rowErr := make(chan error, 1)
	go func() {
		rowErr <- eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: row, State: state(1000), Lease: time.Minute})
	}()
	waitLockWaiters(t, s.db, 2, "the append to wait on the upload's row")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-rowErr
	close(appended)
	if err != nil {
		t.Fatalf("WriteChunk over an unfinished chunk committed after its snapshot: %v", err)
	}
	if err := <-objectErr; !errors.Is(err, steaderr.ErrConflict) {
		t.Fatalf("WriteValue whose chunk was replaced: %v, want ErrConflict", err)
	}
	if c, err := eng.ReadChunk(ctx, set, 0); err != nil || c.Object != "" || !bytes.Equal(c.Data, row) {
		t.Fatalf("ReadChunk = chunk of %d bytes, object %q, %v; want the appended row", c.Size, c.Object, err)
	}
	if n := s.unfinished(t, set); n != 0 {
		t.Fatalf("%d unfinished chunks left", n)
	}
	s.wantBucketIsRows(t, "after the race")
	if got := s.objects(t); len(got) != 0 {
		t.Fatalf("the bucket holds %q, want nothing", got)
	}
}

// TestChunkObjectsLifecycle stores a value of several object chunks, keeps
// an upload in flight with a finished object chunk and an unfinished one
// (its writer killed once the object was written), and puts an orphan in
// the bucket: the orphan step deletes the orphan only, the chunks' names
// being live; deleting the value deletes its objects after its rows, and
// aborting the upload deletes its own.
func TestChunkObjectsLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTiered(t)
	e := s.open(t, "")
	eng := e.Blobs()
	store := blob.NewStore(eng, blob.Options{InlineLimit: 16})
	u, err := store.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	for i := range 3 {
		part := value(fmt.Sprintf("stored part %d", i), 2000)
		if _, err := u.Append(ctx, bytes.NewReader(part)); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, part...)
	}
	t0 := time.Now().Truncate(time.Microsecond)
	key, err := u.Commit(ctx, blob.CommitOptions{Owner: "o", TTL: time.Minute, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := eng.Get(ctx, key); err != nil || st.Chunks == 0 || st.Object != "" {
		t.Fatalf("Get = %+v, %v; want a chunk set", st, err)
	}
	inFlight, err := store.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inFlight.Append(ctx, bytes.NewReader(value("in flight", 2000))); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	postgres.SetBeforeFinish(e, cancel)
	if _, err := inFlight.Append(actx, bytes.NewReader(value("killed", 2000))); err == nil {
		t.Fatal("the killed append committed")
	}
	postgres.SetBeforeFinish(e, nil)
	orphan := "o/ee/" + strings.Repeat("e", 30)
	if err := os.MkdirAll(filepath.Join(s.dir, "o", "ee"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, filepath.FromSlash(orphan)), []byte("nobody's"), 0o600); err != nil {
		t.Fatal(err)
	}
	live := s.named(t)
	if len(live) != 5 {
		t.Fatalf("the rows name %q, want the value's 3 objects and the upload's 2", live)
	}
	sweep := e.GC().(gc.OrphanSweeper)
	for {
		o, err := sweep.SweepOrphans(ctx, gc.OrphanParams{Limit: 2})
		if err != nil {
			t.Fatalf("SweepOrphans: %v", err)
		}
		if o.Wrapped {
			break
		}
	}
	if got := s.objects(t); !slices.Equal(got, live) {
		t.Fatalf("after the orphan step the bucket holds %q, want the live %q", got, live)
	}
	verdicts, err := eng.Delete(ctx, blob.DeleteParams{Keys: []blob.Key{key}, Now: t0.Add(time.Hour)})
	if err != nil || len(verdicts) != 1 || verdicts[0].Outcome != blob.Deleted {
		t.Fatalf("Delete = %v, %v; want the value deleted", verdicts, err)
	}
	s.wantBucketIsRows(t, "after the delete")
	if got := s.objects(t); len(got) != 2 {
		t.Fatalf("after the delete the bucket holds %q, want the upload's 2 objects", got)
	}
	if err := inFlight.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.objects(t); len(got) != 0 {
		t.Fatalf("after the abort the bucket holds %q, want nothing", got)
	}
}

// TestEmptyAppends appends nothing, as a chunk row and as an object chunk
// (an empty PATCH): each commits its state and stores no chunk, the
// upload's size stays, no object is left, and the upload goes on.
func TestEmptyAppends(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTiered(t)
	eng := s.open(t, "").Blobs()
	set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{State: state(0), Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	head := value("head", 1000)
	if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: head, State: state(1000), Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: 1000, State: []byte("empty row"), Lease: time.Minute}); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("empty WriteChunk = %v, want ErrInvalidArgument", err)
	}
	if st, err := eng.UploadStatus(ctx, set); err != nil || st.Size != 1000 || !bytes.Equal(st.State, state(1000)) {
		t.Fatalf("after a refused empty WriteChunk, UploadStatus = %+v, %v; want it unchanged", st, err)
	}
	n, err := eng.WriteValue(ctx, blob.WriteValueParams{Set: set, Off: 1000, Value: bytes.NewReader(nil), Lease: time.Minute, State: func() []byte { return []byte("empty object") }})
	if err != nil || n != 0 {
		t.Fatalf("empty WriteValue = %d, %v", n, err)
	}
	if st, err := eng.UploadStatus(ctx, set); err != nil || st.Size != 1000 || string(st.State) != "empty object" {
		t.Fatalf("after an empty WriteValue, UploadStatus = %+v, %v; want size 1000, its state", st, err)
	}
	if got := s.objects(t); len(got) != 0 {
		t.Fatalf("after empty appends the bucket holds %q, want nothing", got)
	}
	tail := value("tail", 2000)
	if n, err := eng.WriteValue(ctx, blob.WriteValueParams{Set: set, Off: 1000, Value: bytes.NewReader(tail), Lease: time.Minute, State: func() []byte { return state(3000) }}); err != nil || n != 2000 {
		t.Fatalf("WriteValue after the empty appends = %d, %v", n, err)
	}
	whole := append(bytes.Clone(head), tail...)
	if _, err := eng.Put(ctx, blob.PutParams{Key: blob.KeyOf(whole), Chunks: set, Size: 3000, Owner: "o", TTL: time.Hour}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	s.wantBucketIsRows(t, "after the publish")
}

// TestPublishDiscardsObjects commits uploads whose key is stored already,
// one of several object chunks and one of a single object chunk, and one
// that holds an unfinished chunk past its bytes (its writer killed once
// the object was written): the discarded chunks' objects and the
// unfinished chunk's go once the publish commits, and the bucket holds
// exactly what the rows name.
func TestPublishDiscardsObjects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newTiered(t)
	e := s.open(t, "")
	store := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 16})
	put := func(parts ...[]byte) blob.Key {
		t.Helper()
		u, err := store.BeginUpload(ctx, blob.UploadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			if _, err := u.Append(ctx, bytes.NewReader(p)); err != nil {
				t.Fatal(err)
			}
		}
		key, err := u.Commit(ctx, blob.CommitOptions{})
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
		return key
	}
	a, b := value("part a", 3000), value("part b", 2000)
	for i, parts := range [][][]byte{{a, b}, {a}} {
		put(parts...)
		stored := s.objects(t)
		put(parts...) // the same value again: discarded
		if got := s.objects(t); !slices.Equal(got, stored) {
			t.Fatalf("case %d: after a re-put the bucket holds %q, want %q", i, got, stored)
		}
		s.wantBucketIsRows(t, fmt.Sprintf("case %d: after the re-put", i))
	}
	u, err := store.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := value("part c", 2500)
	if _, err := u.Append(ctx, bytes.NewReader(c)); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	postgres.SetBeforeFinish(e, cancel)
	if _, err := u.Append(actx, bytes.NewReader(value("killed", 1000))); err == nil {
		t.Fatal("the killed Append committed")
	}
	postgres.SetBeforeFinish(e, nil)
	before := len(s.objects(t))
	// A fresh Upload: the killed one's outcome is unknown to it.
	resumed, err := store.ResumeUpload(ctx, u.ID(), blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := resumed.Commit(ctx, blob.CommitOptions{Expect: blob.KeyOf(c)})
	if err != nil {
		t.Fatalf("Commit with an unfinished chunk past its bytes: %v", err)
	}
	if st, err := e.Blobs().Get(ctx, key); err != nil || st.Object == "" {
		t.Fatalf("Get = %+v, %v; want the value stored as its one object", st, err)
	}
	if got := len(s.objects(t)); got != before-1 {
		t.Fatalf("after the commit the bucket holds %d objects, want %d (the unfinished chunk's gone)", got, before-1)
	}
	s.wantBucketIsRows(t, "after the commit")
}
