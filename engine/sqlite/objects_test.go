package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gblob "gocloud.dev/blob"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/faultbucket"
	"github.com/steadkit/stead/steaderr"
)

// tiered opens a migrated engine on a fresh database with the bytes tier
// in dir, and a store over it whose inline limit is small.
func tiered(t *testing.T, path, dir string) (*sqlite.Engine, *blob.Store) {
	t.Helper()
	e := openConfig(t, sqlite.Config{Path: path, Bytes: "file://" + filepath.ToSlash(dir)})
	mustMigrate(t, e)
	return e, blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64, PinTTL: time.Millisecond})
}

// objectFiles lists the files under dir/o, by path relative to dir.
func objectFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(dir, "o"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func randomValue(n int) []byte {
	v := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n)})
	_, _ = r.Read(v)
	return v
}

// TestBytesTierObject puts a value over the inline limit: it is one object
// named by its row (and by Explain), read back whole and by ranges, and
// gone from the bucket once the blob is deleted.
func TestBytesTierObject(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, s := tiered(t, tempPath(t), dir)
	ctx := t.Context()
	value := randomValue(300_000)
	key, err := s.Put(ctx, bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.Blobs().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Object == "" || st.Chunks != 0 || st.Value != nil || st.Size != int64(len(value)) {
		t.Fatalf("engine Get = %+v, want an object of %d bytes", st, len(value))
	}
	if files := objectFiles(t, dir); len(files) != 1 || files[0] != st.Object {
		t.Fatalf("bucket holds %q, want just %s", files, st.Object)
	}
	x, err := e.GC().Explain(ctx, gc.ExplainParams{Key: key})
	if err != nil || x.Object != st.Object {
		t.Fatalf("Explain = %+v, %v; want object %s", x, err, st.Object)
	}
	rd, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for _, span := range [][2]int64{{0, 10}, {299_990, 10}, {123_456, 70_000}, {1, 299_999}} {
		got := make([]byte, span[1])
		if n, err := rd.ReadAt(got, span[0]); err != nil || n != len(got) || !bytes.Equal(got, value[span[0]:span[0]+span[1]]) {
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want the value's bytes", span[1], span[0], n, err)
		}
	}
	if _, err := rd.Seek(200_000, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(rd); err != nil || !bytes.Equal(rest, value[200_000:]) {
		t.Fatalf("read after Seek = %d bytes, %v", len(rest), err)
	}
	if err := s.Verify(ctx, key); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	time.Sleep(2 * time.Millisecond) // the put's pin lapses
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if files := objectFiles(t, dir); len(files) != 0 {
		t.Fatalf("after Delete the bucket holds %q, want nothing", files)
	}
}

// TestBytesTierDedup puts one value twice: one object stays, the second
// upload's is deleted once its publish found the key stored.
func TestBytesTierDedup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, _ := tiered(t, tempPath(t), dir)
	value := randomValue(1000)
	for range 2 {
		// Stores of their own, so the second put is not skipped by the
		// first's pin.
		s := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64})
		if _, err := s.Put(t.Context(), bytes.NewReader(value)); err != nil {
			t.Fatal(err)
		}
	}
	if files := objectFiles(t, dir); len(files) != 1 {
		t.Fatalf("bucket holds %q, want one object", files)
	}
}

// TestBytesTierFailedPut: a source that fails midway, or is over the
// size limit, publishes nothing and leaves no object.
func TestBytesTierFailedPut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, _ := tiered(t, tempPath(t), dir)
	s := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64, MaxSize: 10_000})
	boom := errors.New("source broke")
	_, err := s.Put(t.Context(), io.MultiReader(bytes.NewReader(randomValue(5000)), iotestErr{boom}))
	if !errors.Is(err, boom) {
		t.Fatalf("Put of a failing source = %v, want its error", err)
	}
	_, err = s.Put(t.Context(), bytes.NewReader(randomValue(10_001)))
	if !errors.Is(err, steaderr.ErrTooLarge) {
		t.Fatalf("Put over MaxSize = %v, want ErrTooLarge", err)
	}
	if files := objectFiles(t, dir); len(files) != 0 {
		t.Fatalf("bucket holds %q after failed puts, want nothing", files)
	}
	n := 0
	if err := e.Blobs().List(t.Context(), blob.Key{}, 10, func(blob.Info) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("List = %d blobs, %v; want none", n, err)
	}
}

type iotestErr struct{ err error }

func (r iotestErr) Read([]byte) (int, error) { return 0, r.err }

// TestBytesTierOrphanSweep leaves objects no row names (a crash between an
// object's write and its publish, and between a row's deletion and its
// object's, leave such) and a stale temporary file: the orphan step
// deletes them once older than the grace, and never an object a blob or
// an upload names.
func TestBytesTierOrphanSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, s := tiered(t, tempPath(t), dir)
	ctx := t.Context()
	key, err := s.Put(ctx, bytes.NewReader(randomValue(1000)))
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.Blobs().Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A live upload naming an object mid-write.
	set, err := e.Blobs().BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	writing := make(chan error, 1)
	go func() {
		_, err := e.Blobs().WriteValue(ctx, blob.WriteValueParams{Set: set, Value: pr, Lease: time.Hour})
		writing <- err
	}()
	if _, err := pw.Write([]byte("half an object")); err != nil {
		t.Fatal(err)
	}
	orphans := []string{"o/ab/0123456789abcdef0123456789abcd", "o/cd/0123456789abcdef0123456789abcd.18a2b3c4d5e6f.tmp"}
	for _, name := range orphans {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("orphan"), 0o644); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-2 * time.Hour)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	sweeper := e.GC().(gc.OrphanSweeper)
	got, err := sweeper.SweepOrphans(ctx, gc.OrphanParams{Limit: 100, Grace: time.Hour, DryRun: true})
	if err != nil || got.Deleted != 2 {
		t.Fatalf("dry SweepOrphans = %+v, %v; want 2 orphans", got, err)
	}
	if files := objectFiles(t, dir); len(files) < 4 {
		t.Fatalf("a dry run deleted: bucket holds %q", files)
	}
	// The grace spares an orphan younger than it: the stored object and the
	// one being written are named anyway, and with a zero grace too.
	got, err = sweeper.SweepOrphans(ctx, gc.OrphanParams{Limit: 100, Grace: 0})
	if err != nil || got.Deleted != 2 || !got.Wrapped {
		t.Fatalf("SweepOrphans = %+v, %v; want 2 orphans deleted, listing wrapped", got, err)
	}
	files := strings.Join(objectFiles(t, dir), " ")
	for _, name := range orphans {
		if strings.Contains(files, name) {
			t.Errorf("orphan %s left: bucket holds %s", name, files)
		}
	}
	if !strings.Contains(files, st.Object) {
		t.Errorf("the stored blob's object %s was deleted: bucket holds %s", st.Object, files)
	}
	if _, err := pw.Write([]byte(", the other half")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-writing; err != nil {
		t.Fatalf("the write in flight failed after the sweep: %v", err)
	}
	if _, err := blob.NewStore(e.Blobs(), blob.Options{}).Get(ctx, key); err != nil {
		t.Fatal(err)
	}
}

// faultyTier opens a migrated engine whose bytes tier is a file:// bucket
// in dir behind faultbucket, failing the calls fail says.
func faultyTier(t *testing.T, dir string, fail func(op, key string) error) *sqlite.Engine {
	t.Helper()
	inner, err := gblob.OpenBucket(t.Context(), "file://"+filepath.ToSlash(dir)+"?create_dir=1&no_tmp_dir=1&metadata=skip")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	b := faultbucket.New(inner, fail)
	t.Cleanup(func() { b.Close() })
	e := openConfig(t, sqlite.Config{Path: tempPath(t), Bucket: b})
	mustMigrate(t, e)
	return e
}

// TestBytesTierUnreachableSweep: a bucket that cannot be listed fails the
// orphan step with ErrUnavailable and deletes nothing.
func TestBytesTierUnreachableSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var down atomic.Bool
	e := faultyTier(t, dir, func(op, key string) error {
		if down.Load() {
			return faultbucket.ErrInjected
		}
		return nil
	})
	s := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64})
	if _, err := s.Put(t.Context(), bytes.NewReader(randomValue(1000))); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "o", "ab", "0123456789abcdef0123456789abcd")
	if err := os.WriteFile(orphan, []byte("orphan"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(orphan), 0o755)
	if err := os.WriteFile(orphan, []byte("orphan"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := objectFiles(t, dir)
	down.Store(true)
	_, err := e.GC().(gc.OrphanSweeper).SweepOrphans(t.Context(), gc.OrphanParams{Limit: 100})
	if !errors.Is(err, steaderr.ErrUnavailable) {
		t.Fatalf("SweepOrphans over an unreachable bucket = %v, want ErrUnavailable", err)
	}
	if after := objectFiles(t, dir); len(after) != len(before) {
		t.Fatalf("bucket held %q, holds %q after the failed sweep", before, after)
	}
	down.Store(false)
	if got, err := e.GC().(gc.OrphanSweeper).SweepOrphans(t.Context(), gc.OrphanParams{Limit: 100}); err != nil || got.Deleted != 1 {
		t.Fatalf("SweepOrphans once the bucket is back = %+v, %v; want the orphan deleted", got, err)
	}
}

// TestBytesTierWriteFailsMidway: an object write that fails after some
// bytes publishes nothing, and leaves no object behind, even when the
// abort cannot delete it (the upload is reaped, then the orphan swept).
func TestBytesTierWriteFailsMidway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var writes atomic.Int64
	var deletesDown atomic.Bool
	e := faultyTier(t, dir, func(op, key string) error {
		switch {
		case op == faultbucket.OpWrite && strings.HasPrefix(key, "o/") && writes.Add(1) > 2:
			return faultbucket.ErrInjected
		case op == faultbucket.OpDelete && deletesDown.Load():
			return faultbucket.ErrInjected
		}
		return nil
	})
	s := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64, UploadLease: time.Millisecond})
	deletesDown.Store(true)
	_, err := s.Put(t.Context(), bytes.NewReader(randomValue(4<<20)))
	if !errors.Is(err, steaderr.ErrUnavailable) {
		t.Fatalf("Put with a write failing midway = %v, want ErrUnavailable", err)
	}
	n := 0
	if err := e.Blobs().List(t.Context(), blob.Key{}, 10, func(blob.Info) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("List = %d blobs, %v; want none published", n, err)
	}
	deletesDown.Store(false)
	time.Sleep(2 * time.Millisecond) // the upload lease lapses
	if _, err := e.Blobs().ReapUploads(t.Context(), blob.ReapUploadsParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.GC().(gc.OrphanSweeper).SweepOrphans(t.Context(), gc.OrphanParams{Limit: 100}); err != nil {
		t.Fatal(err)
	}
	if files := objectFiles(t, dir); len(files) != 0 {
		t.Fatalf("bucket holds %q after the failed put was reaped and swept, want nothing", files)
	}
}

// TestBytesTierRefusals: a store that recorded a tier refuses to open
// without one; a store holding blobs refuses a tier unless adopted; a
// bucket claimed by another store is refused.
func TestBytesTierRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.WithoutCancel(t.Context())
	dir := t.TempDir()
	tieredPath := tempPath(t)
	e, _ := tiered(t, tieredPath, dir)
	e.Close()

	plain := openEngine(t, tieredPath)
	if err := plain.Migrate(ctx); !errors.Is(err, steaderr.ErrInvalidArgument) || !strings.Contains(err.Error(), "bytes=") {
		t.Fatalf("Migrate without the tier the store recorded = %v, want ErrInvalidArgument naming bytes=", err)
	}

	other := tempPath(t)
	o, _ := tiered(t, other, t.TempDir())
	o.Close()
	stolen := openConfig(t, sqlite.Config{Path: other, Bytes: "file://" + filepath.ToSlash(dir)})
	if err := stolen.Migrate(ctx); !errors.Is(err, steaderr.ErrConflict) || !strings.Contains(err.Error(), "another store") {
		t.Fatalf("Migrate with another store's bucket = %v, want ErrConflict", err)
	}

	held := tempPath(t)
	h := openEngine(t, held)
	mustMigrate(t, h)
	if _, err := blob.NewStore(h.Blobs(), blob.Options{}).Put(ctx, strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	h.Close()
	refused := openConfig(t, sqlite.Config{Path: held, Bytes: "file://" + filepath.ToSlash(t.TempDir())})
	if err := refused.Migrate(ctx); !errors.Is(err, steaderr.ErrConflict) || !strings.Contains(err.Error(), "bytes_adopt") {
		t.Fatalf("Migrate of a store with blobs, given a tier = %v, want ErrConflict naming bytes_adopt", err)
	}
	refused.Close()
	adopted := openConfig(t, sqlite.Config{Path: held, Bytes: "file://" + filepath.ToSlash(t.TempDir()), BytesAdopt: true})
	mustMigrate(t, adopted)
	if _, err := blob.NewStore(adopted.Blobs(), blob.Options{}).Get(ctx, blob.KeyOf([]byte("old"))); err != nil {
		t.Fatalf("Get of a value stored before the tier was adopted: %v", err)
	}
}

func TestParseURLBytes(t *testing.T) {
	t.Parallel()
	cfg, err := sqlite.ParseURL("sqlite:///var/lib/s.db?bytes=file%3A%2F%2F%2Fvar%2Flib%2Fstead%2Fobjects&bytes_adopt=1")
	if err != nil || cfg.Bytes != "file:///var/lib/stead/objects" || !cfg.BytesAdopt {
		t.Fatalf("ParseURL = %+v, %v", cfg, err)
	}
	for _, bad := range []string{"sqlite://s.db?bytes=", "sqlite://s.db?bytes_adopt=maybe"} {
		if _, err := sqlite.ParseURL(bad); !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("ParseURL(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := sqlite.Open(t.Context(), sqlite.Config{Path: tempPath(t), Bytes: "file://relative/dir"}); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Errorf("Open with a relative file bucket = %v, want ErrInvalidArgument", err)
	}
}

// TestBytesTierLeaseRenewed: a write that outlasts its upload lease renews
// it as it goes, so a reap meanwhile leaves it alone and it publishes.
func TestBytesTierLeaseRenewed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := openConfig(t, sqlite.Config{Path: tempPath(t), Bytes: "file://" + filepath.ToSlash(dir)})
	mustMigrate(t, e)
	// Long enough that a renewal every third of it lands in time on a
	// loaded machine; the write takes four leases.
	lease := 500 * time.Millisecond
	s := blob.NewStore(e.Blobs(), blob.Options{InlineLimit: 64, UploadLease: lease})
	pr, pw := io.Pipe()
	value := randomValue(16_000)
	go func() {
		for i := 0; i < len(value); i += 1000 {
			time.Sleep(lease / 4) // the whole write takes four leases
			pw.Write(value[i : i+1000])
		}
		pw.Close()
	}()
	stop := make(chan struct{})
	reaped := make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				reaped <- n
				return
			case <-time.After(lease / 3):
				k, _ := e.Blobs().ReapUploads(context.WithoutCancel(t.Context()), blob.ReapUploadsParams{})
				n += k
			}
		}
	}()
	key, err := s.Put(t.Context(), pr)
	close(stop)
	if n := <-reaped; n != 0 || err != nil {
		t.Fatalf("Put = %v with %d uploads reaped meanwhile; want the lease renewed and the put published", err, n)
	}
	if key != blob.KeyOf(value) {
		t.Fatalf("Put = %s, want %s", key, blob.KeyOf(value))
	}
}
