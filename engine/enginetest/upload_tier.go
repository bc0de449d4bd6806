package enginetest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// testUploadTier holds the rules of uploads on an engine with a bytes tier
// (docs/decisions/0045-durable-uploads.md): an append past the inline
// limit is one object chunk, an upload of one object chunk publishes as
// that object, rows and objects mix in a chunk set, and no object outlives
// the rows naming it. Each is skipped on an engine without a tier; the
// engine's tiered run (TierAreas) runs them.
func testUploadTier() []suiteTest {
	return []suiteTest{
		{"TierObjectChunk", uploadTierObjectChunk},
		{"TierMixed", uploadTierMixed},
		{"TierAbandoned", uploadTierAbandoned},
		{"TierAppendAbandoned", uploadTierAppendAbandoned},
		{"TierHeadAbandoned", uploadTierHeadAbandoned},
		{"TierNoObjectLeft", uploadTierNoObjectLeft},
	}
}

// setupTiered is setupWith over an engine with a bytes tier; on one
// without, the test is skipped.
func setupTiered(t *testing.T, h Harness, opts blob.Options) *bundle {
	t.Helper()
	b := setupWith(t, h, opts)
	if !b.blobs.Tiered() {
		t.Skip("the engine has no bytes tier (Tiered is false); its tiered run checks this")
	}
	return b
}

// bucket counts the objects of eng's bucket through its orphan step, run
// dry: how many it holds and how many of them no row names (with no
// grace). ok is false for an engine without an orphan step.
func bucket(t *testing.T, eng engine.Engine) (objects, orphans int64, ok bool) {
	t.Helper()
	o, ok := eng.GC().(gc.OrphanSweeper)
	if !ok {
		return 0, 0, false
	}
	got, err := o.SweepOrphans(t.Context(), gc.OrphanParams{Limit: 100000, DryRun: true})
	if err != nil {
		t.Fatalf("SweepOrphans (dry run): %v", err)
	}
	if !got.Wrapped {
		t.Fatalf("SweepOrphans (dry run) of %d objects did not reach the bucket's end", got.Listed)
	}
	return got.Listed, got.Deleted, true
}

// wantBucket checks that eng's bucket holds objects objects and no orphan,
// where it can tell.
func wantBucket(t *testing.T, eng engine.Engine, objects int64, what string) {
	t.Helper()
	if got, orphans, ok := bucket(t, eng); ok && (got != objects || orphans != 0) {
		t.Fatalf("%s: the bucket holds %d objects, %d of them orphans; want %d, no orphan", what, got, orphans, objects)
	}
}

// wantObjectGone checks that the object name is no longer in the bucket.
func wantObjectGone(t *testing.T, eng blob.Backend, key blob.Key, name string, size int64, what string) {
	t.Helper()
	rc, err := eng.ReadValue(t.Context(), blob.ReadValueParams{Key: key, Object: name, Size: size, N: -1})
	if err == nil {
		rc.Close()
		t.Fatalf("%s: object %s is still in the bucket", what, name)
	}
	wantErr(t, err, steaderr.ErrNotFound, what+": ReadValue of its object")
}

// uploadChunks returns the chunks of set, from the first on, as ReadChunk
// answers them, checking that they tile size bytes.
func uploadChunks(t *testing.T, eng blob.Backend, set blob.ChunkSet, size int64) []blob.Chunk {
	t.Helper()
	var chunks []blob.Chunk
	for off := int64(0); off < size; {
		c, err := eng.ReadChunk(t.Context(), set, off)
		if err != nil {
			t.Fatalf("ReadChunk(%d, %d): %v", set, off, err)
		}
		if c.Start != off || c.Size <= 0 || c.Object == "" && int64(len(c.Data)) != c.Size || c.Object != "" && c.Data != nil {
			t.Fatalf("ReadChunk(%d, %d) = chunk at %d of size %d, %d bytes of data, object %q; want one starting there, its data or its object", set, off, c.Start, c.Size, len(c.Data), c.Object)
		}
		chunks = append(chunks, c)
		off += c.Size
	}
	return chunks
}

// wantReads checks that key reads back as want through s by every means
// (whole, WriteTo, ReadAt and Seek across each of the chunk boundaries
// at, and verified).
func wantReads(t *testing.T, s *blob.Store, key blob.Key, want []byte, at []int64) {
	t.Helper()
	ctx := t.Context()
	rd, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rd.Close()
	checkReader(t, rd, key, want)
	size := int64(len(want))
	for _, b := range at {
		for _, off := range []int64{b - 3, b - 1, b} {
			if off < 0 || off >= size {
				continue
			}
			p := make([]byte, 40)
			n, err := rd.ReadAt(p, off)
			if wantN := min(size-off, 40); int64(n) != wantN || err != nil && err != io.EOF || !bytes.Equal(p[:n], want[off:off+int64(n)]) {
				t.Fatalf("ReadAt(40 bytes at %d, across the chunk boundary at %d) = %d, %v, or the wrong bytes", off, b, n, err)
			}
			if _, err := rd.Seek(off, io.SeekStart); err != nil {
				t.Fatalf("Seek(%d): %v", off, err)
			}
			var rest bytes.Buffer
			if n, err := rd.WriteTo(&rest); err != nil || n != size-off || !bytes.Equal(rest.Bytes(), want[off:]) {
				t.Fatalf("WriteTo from %d = %d, %v, or the wrong bytes", off, n, err)
			}
		}
	}
	concurrentReadAt(t, rd, want)
	if err := s.Verify(ctx, key); err != nil {
		t.Fatalf("Verify(%s): %v", key, err)
	}
}

// concurrentReadAt checks that ReadAt calls of one Reader from several
// goroutines at once each read their own bytes (io.ReaderAt's contract).
func concurrentReadAt(t *testing.T, rd *blob.Reader, want []byte) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				off := (g*977 + i*131) % len(want)
				p := make([]byte, min(700, len(want)-off))
				if n, err := rd.ReadAt(p, int64(off)); n != len(p) || err != nil && err != io.EOF || !bytes.Equal(p, want[off:off+len(p)]) {
					errs <- fmt.Errorf("concurrent ReadAt(%d bytes at %d) = %d, %v, equal %v", len(p), off, n, err, bytes.Equal(p, want[off:off+len(p)]))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// uploadTierObjectChunk checks that an append past the inline limit is
// one object chunk, whatever the chunk size (ReadChunk answers its object
// and size, no data), and that an upload of that one chunk publishes as
// that object, its chunk row gone.
func uploadTierObjectChunk(t *testing.T, h Harness) {
	b := setupTiered(t, h, uploadOpts)
	ctx, eng := t.Context(), b.blobs
	before, _, _ := bucket(t, b.eng)
	value := testValue("tier object chunk", 5000)
	u := mustBegin(t, b.store, "tier")
	mustAppend(t, u, value)
	set := uploadSet(t, u)
	chunks := uploadChunks(t, eng, set, int64(len(value)))
	if len(chunks) != 1 || chunks[0].Object == "" || chunks[0].Size != int64(len(value)) {
		t.Fatalf("an append of %d bytes past the inline limit is chunks %+v, want one object chunk of all of it", len(value), chunks)
	}
	if c, err := eng.ReadChunk(ctx, set, int64(len(value))-1); err != nil || c.Object != chunks[0].Object || c.Start != 0 {
		t.Fatalf("ReadChunk of the last byte = %+v, %v; want the object chunk", c, err)
	}
	wantBucket(t, b.eng, before+1, "after the append")
	key := mustCommit(t, b, u, value)
	st, err := eng.Get(ctx, key)
	if err != nil || st.Object != chunks[0].Object || st.Chunks != 0 || st.Size != int64(len(value)) {
		t.Fatalf("engine Get of an upload of one object chunk = %+v, %v; want that object, %s", st, err, chunks[0].Object)
	}
	if _, err := eng.ReadChunk(ctx, set, 0); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("ReadChunk of the published upload's set = %v, want ErrNotFound (its chunk row gone)", err)
	}
	wantReads(t, b.store, key, value, nil)
	wantBucket(t, b.eng, before+1, "after the commit")
}

// mixedAppends are the appends of a value whose upload mixes rows and
// objects over uploadOpts (an inline limit of 16 bytes): two appends
// within the limit (rows), then three past it (objects), the first of
// which starts below it.
var mixedAppends = []int{10, 5, 3000, 7, 2000}

// appendMixed begins an upload on s and appends a value in mixedAppends,
// returning it, the value and its chunk boundaries.
func appendMixed(t *testing.T, s *blob.Store, label string) (*blob.Upload, []byte, []int64) {
	t.Helper()
	u := mustBegin(t, s, "tier")
	var value []byte
	var starts []int64
	for i, n := range mixedAppends {
		part := testValue(fmt.Sprint(label, i), n)
		starts = append(starts, int64(len(value)))
		mustAppend(t, u, part)
		value = append(value, part...)
	}
	return u, value, starts
}

// uploadTierMixed checks that an upload of several appends on a tier keeps
// those within the inline limit as rows and each past it as one object,
// publishes as a chunk set naming both, and reads back byte for byte
// however it is read.
func uploadTierMixed(t *testing.T, h Harness) {
	b := setupTiered(t, h, uploadOpts)
	ctx, eng := t.Context(), b.blobs
	before, _, _ := bucket(t, b.eng)
	u, value, starts := appendMixed(t, b.store, "tier mixed")
	set := uploadSet(t, u)
	chunks := uploadChunks(t, eng, set, int64(len(value)))
	if len(chunks) != len(mixedAppends) {
		t.Fatalf("appends of %v are %d chunks, want one each", mixedAppends, len(chunks))
	}
	names := map[string]bool{}
	for i, c := range chunks {
		if c.Start != starts[i] || c.Size != int64(mixedAppends[i]) || (c.Object != "") != (i >= 2) || names[c.Object] {
			t.Fatalf("chunk %d = at %d of size %d, object %q; want the append at %d of %d bytes, an object of its own from the third on", i, c.Start, c.Size, c.Object, starts[i], mixedAppends[i])
		}
		if c.Object != "" {
			names[c.Object] = true
		} else if !bytes.Equal(c.Data, value[c.Start:c.Start+c.Size]) {
			t.Fatalf("chunk %d holds the wrong bytes", i)
		}
	}
	wantBucket(t, b.eng, before+3, "after the appends")
	key := mustCommit(t, b, u, value)
	st, err := eng.Get(ctx, key)
	if err != nil || st.Chunks == 0 || st.Object != "" || st.Size != int64(len(value)) {
		t.Fatalf("engine Get of a mixed upload = %+v, %v; want its chunk set", st, err)
	}
	if got := uploadChunks(t, eng, st.Chunks, st.Size); len(got) != len(chunks) {
		t.Fatalf("the published set has %d chunks, want the upload's %d", len(got), len(chunks))
	}
	wantReads(t, b.store, key, value, starts)
	verifying := secondStore(b, blob.Options{VerifyReads: true})
	wantReads(t, verifying, key, value, starts)
	wantBucket(t, b.eng, before+3, "after the commit")
}

// errSource is the error of the sources that fail part-way.
var errSource = errors.New("enginetest: the source failed")

// uploadTierAbandoned checks the seam's WriteValue: one whose source fails
// part-way (a client gone mid-PATCH) is an error wrapping the source's
// and leaves the upload's size and state as they were, and the next one at
// that offset replaces what it left and commits; one at another offset is
// ErrConflict, one to an upload gone ErrLost.
func uploadTierAbandoned(t *testing.T, h Harness) {
	b := setupTiered(t, h, uploadOpts)
	ctx, eng := t.Context(), b.blobs
	before, _, _ := bucket(t, b.eng)
	value := testValue("tier abandoned", 3000)
	set := stageChunks(t, eng, value[:10], 10)
	state := func(s string) func() []byte { return func() []byte { return []byte(s) } }
	write := func(off int64, r io.Reader, st string) (int64, error) {
		return eng.WriteValue(ctx, blob.WriteValueParams{Set: set, Off: off, Value: r, Lease: time.Minute, State: state(st)})
	}
	for range 2 {
		_, err := write(10, &failingReader{data: value[10:2500], err: errSource}, "a wrong state")
		wantErr(t, err, errSource, "WriteValue whose source failed")
		wantStatus(t, eng, set, "", 10, uploadState(10))
	}
	for _, off := range []int64{0, 9, 11, 3000} {
		_, err := write(off, bytes.NewReader(value[10:]), "a wrong state")
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("WriteValue at %d of an upload of 10 bytes", off))
		wantStatus(t, eng, set, "", 10, uploadState(10))
	}
	n, err := write(10, bytes.NewReader(value[10:]), "whole")
	if err != nil || n != 2990 {
		t.Fatalf("WriteValue after abandoned ones = %d, %v; want 2990", n, err)
	}
	wantStatus(t, eng, set, "", 3000, []byte("whole"))
	chunks := uploadChunks(t, eng, set, 3000)
	if len(chunks) != 2 || chunks[1].Object == "" || chunks[1].Size != 2990 {
		t.Fatalf("chunks after the WriteValue = %+v, want the row and an object of 2990 bytes", chunks)
	}
	// What the abandoned writes left is deleted, or an orphan the orphan
	// step may delete; the object the upload names is neither.
	if objects, orphans, ok := bucket(t, b.eng); ok && (objects-orphans != before+1 || orphans > 2) {
		t.Fatalf("the bucket holds %d objects, %d of them orphans; want %d named", objects, orphans, before+1)
	}
	sweep(t, b.eng)
	wantBucket(t, b.eng, before+1, "after the orphan step")
	key := blob.KeyOf(value)
	if _, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: 3000, Owner: "publisher", TTL: time.Minute}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	wantReads(t, b.store, key, value, []int64{10})

	if err := eng.AbortUpload(ctx, set); err != nil {
		t.Fatalf("AbortUpload of a published set: %v", err)
	}
	_, err = write(3000, bytes.NewReader([]byte("more")), "more")
	wantErr(t, err, steaderr.ErrLost, "WriteValue to a published upload")
	_, err = eng.WriteValue(ctx, blob.WriteValueParams{Set: set ^ 0x5a5a5a5a, Value: bytes.NewReader(value), Lease: time.Minute, State: state("never")})
	wantErr(t, err, steaderr.ErrLost, "WriteValue to an upload never begun")
	wantReads(t, b.store, key, value, []int64{10})
	wantBucket(t, b.eng, before+1, "after the refused writes")
}

// sweep runs eng's orphan step, with no grace, until it wraps, if it has
// one.
func sweep(t *testing.T, eng engine.Engine) {
	t.Helper()
	o, ok := eng.GC().(gc.OrphanSweeper)
	if !ok {
		return
	}
	for {
		got, err := o.SweepOrphans(t.Context(), gc.OrphanParams{Limit: 1000})
		if err != nil {
			t.Fatalf("SweepOrphans: %v", err)
		}
		if got.Wrapped {
			return
		}
	}
}

// uploadTierAppendAbandoned checks the same through the Upload: an Append
// whose source fails past the inline limit takes nothing of its object
// and keeps the hash, so the next Append from there commits the right
// value.
func uploadTierAppendAbandoned(t *testing.T, h Harness) {
	b := setupTiered(t, h, uploadOpts)
	value := testValue("tier append abandoned", 6000)
	u := mustBegin(t, b.store, "tier")
	mustAppend(t, u, value[:3000])
	set := uploadSet(t, u)
	st, err := b.blobs.UploadStatus(t.Context(), set)
	if err != nil {
		t.Fatalf("UploadStatus: %v", err)
	}
	for _, cut := range []int{3001, 4000, 6000} {
		n, err := u.Append(t.Context(), &failingReader{data: value[3000:cut], err: errSource})
		wantErr(t, err, errSource, "Append whose source failed")
		if n != 0 || u.Size() != 3000 {
			t.Fatalf("an Append whose source failed = %d bytes taken, size %d; want 0, 3000", n, u.Size())
		}
		wantStatus(t, b.blobs, set, "tier", 3000, st.State)
	}
	mustResume(t, secondStore(b, uploadOpts), u.ID(), "tier", 3000)
	mustAppend(t, u, value[3000:])
	mustCommit(t, b, u, value)
}

// uploadTierHeadAbandoned checks that an append whose source fails before
// it passed the inline limit (its bytes would be rows) commits none of
// them, as an object append that fails commits none: on a tier an append
// is whole or nothing.
func uploadTierHeadAbandoned(t *testing.T, h Harness) {
	b := setupTiered(t, h, uploadOpts)
	s := secondStore(b, blob.Options{InlineLimit: 4096, ChunkSize: 1000, UploadLease: time.Minute})
	u := mustBegin(t, s, "tier")
	src := io.MultiReader(bytes.NewReader(testValue("head", 2500)), iotest.ErrReader(errSource))
	if n, err := u.Append(t.Context(), src); n != 0 || !errors.Is(err, errSource) {
		t.Fatalf("an append whose source fails within the inline limit = %d, %v; want 0 bytes and the source's error", n, err)
	}
	if st, err := b.blobs.UploadStatus(t.Context(), uploadSet(t, u)); err != nil || st.Size != 0 {
		t.Fatalf("after the failed append the upload is %+v, %v; want size 0", st, err)
	}
}

// uploadTierNoObjectLeft checks that no object outlives the rows naming
// it: an upload's objects go with its abort or its reap (an abandoned
// write's too), a value's with its delete or its collection.
func uploadTierNoObjectLeft(t *testing.T, h Harness) {
	b := setupTiered(t, h, uploadOpts)
	ctx, eng := t.Context(), b.blobs
	before, _, _ := bucket(t, b.eng)
	objectsOf := func(u *blob.Upload, size int64) []blob.Chunk {
		t.Helper()
		var out []blob.Chunk
		for _, c := range uploadChunks(t, eng, uploadSet(t, u), size) {
			if c.Object != "" {
				out = append(out, c)
			}
		}
		if len(out) == 0 {
			t.Fatalf("an upload of %d bytes has no object chunk", size)
		}
		return out
	}
	wantGone := func(key blob.Key, chunks []blob.Chunk, what string) {
		t.Helper()
		for _, c := range chunks {
			wantObjectGone(t, eng, key, c.Object, c.Size, what)
		}
		wantBucket(t, b.eng, before, what)
	}

	t.Run("Abort", func(t *testing.T) {
		u, value, _ := appendMixed(t, b.store, "no object left: abort")
		objs := objectsOf(u, int64(len(value)))
		// And an abandoned write past its end.
		if _, err := u.Append(ctx, &failingReader{data: value[:2000], err: errSource}); !errors.Is(err, errSource) {
			t.Fatalf("Append whose source failed: %v", err)
		}
		if err := u.Abort(ctx); err != nil {
			t.Fatalf("Abort: %v", err)
		}
		wantGone(blob.KeyOf(value), objs, "after the abort")
	})
	t.Run("Reap", func(t *testing.T) {
		u, value, _ := appendMixed(t, b.store, "no object left: reap")
		objs := objectsOf(u, int64(len(value)))
		if _, err := u.Append(ctx, &failingReader{data: value[:2000], err: errSource}); !errors.Is(err, errSource) {
			t.Fatalf("Append whose source failed: %v", err)
		}
		b.clock.Advance(2 * uploadOpts.UploadLease)
		if n, err := b.store.ReapUploads(ctx); err != nil || n != 1 {
			t.Fatalf("ReapUploads = %d, %v; want the lapsed upload", n, err)
		}
		wantGone(blob.KeyOf(value), objs, "after the reap")
	})
	t.Run("Delete", func(t *testing.T) {
		u, value, _ := appendMixed(t, b.store, "no object left: delete")
		objs := objectsOf(u, int64(len(value)))
		key := mustCommit(t, b, u, value)
		one := mustBegin(t, b.store, "tier")
		single := testValue("no object left: one object", 4000)
		mustAppend(t, one, single)
		objs = append(objs, objectsOf(one, 4000)...)
		oneKey := mustCommit(t, b, one, single)
		b.expirePins()
		for _, k := range []blob.Key{key, oneKey} {
			if err := b.store.Delete(ctx, k); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		}
		wantGone(key, objs, "after the deletes")
	})
	t.Run("Collect", func(t *testing.T) {
		if b.eng.GC() == nil {
			t.Skip("the engine's data is collected elsewhere (Engine.GC is nil)")
		}
		col := gc.New(b.eng.GC(), gc.Options{Grace: testGrace, Batch: 7, Holder: "enginetest", Now: b.clock.Now, AllUnreferenced: true})
		u, value, _ := appendMixed(t, b.store, "no object left: collect")
		objs := objectsOf(u, int64(len(value)))
		key := mustCommit(t, b, u, value)
		b.expirePins()
		for range 2 {
			if rep, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil || rep.Aborted != "" {
				t.Fatalf("Sweep = %+v, %v", rep, err)
			}
			b.clock.Advance(testGrace)
		}
		wantHas(t, b.store, key, false)
		wantGone(key, objs, "after the collection")
	})
}
