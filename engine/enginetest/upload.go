package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// testUpload holds the rules of the upload seam (BeginUpload,
// UploadStatus, WriteChunk as an append, AbortUpload, a chunked Put) that
// the portable store never breaks itself but a remote client or a second
// server may, and the portable Upload over them
// (docs/decisions/0045-durable-uploads.md).
func testUpload(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"EndRace", uploadEndRace},
		{"PublishedSet", uploadPublishedSet},
		{"AppendOrder", uploadAppendOrder},
		{"PublishSize", uploadPublishSize},
		{"AppendRace", uploadAppendRace},
		{"EndedSet", uploadEndedSet},
		{"CommitSwap", uploadCommitSwap},
		{"RandomIDs", uploadRandomIDs},
		{"OffsetOverflow", uploadOffsetOverflow},
		{"Reap", uploadReap},
	})
	runTests(t, h, testUploadStore())
	runTests(t, h, testUploadTier())
}

// uploadRaceChunk is the chunk size of the upload races: large enough that
// a chunk write is still in flight when the racing call starts.
const uploadRaceChunk = 64 << 10

// uploadState is the state the seam tests record with an upload of size
// bytes: any bytes do, the engine keeps them as they are.
func uploadState(size int64) []byte { return fmt.Appendf(nil, "state after %d bytes\x00\xff", size) }

// appendChunk appends data at off to set, recording uploadState of the
// new size.
func appendChunk(ctx context.Context, eng blob.Backend, set blob.ChunkSet, off int64, data []byte) error {
	return eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: data, State: uploadState(off + int64(len(data))), Lease: time.Minute})
}

// stageChunks begins an upload and appends value to it in chunks of chunk
// bytes, returning its chunk set.
func stageChunks(t *testing.T, eng blob.Backend, value []byte, chunk int) blob.ChunkSet {
	t.Helper()
	set, err := eng.BeginUpload(t.Context(), blob.BeginUploadParams{State: uploadState(0), Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	for off := 0; off < len(value); off += chunk {
		if err := appendChunk(t.Context(), eng, set, int64(off), value[off:min(off+chunk, len(value))]); err != nil {
			t.Fatalf("WriteChunk at %d: %v", off, err)
		}
	}
	return set
}

// wantStatus checks that set's upload is live with the owner, size and
// state given.
func wantStatus(t *testing.T, eng blob.Backend, set blob.ChunkSet, owner string, size int64, state []byte) {
	t.Helper()
	st, err := eng.UploadStatus(t.Context(), set)
	if err != nil {
		t.Fatalf("UploadStatus(%d): %v", set, err)
	}
	if st.Owner != owner || st.Size != size || !bytes.Equal(st.State, state) {
		t.Fatalf("UploadStatus(%d) = owner %q, size %d, state %q; want %q, %d, %q", set, st.Owner, st.Size, st.State, owner, size, state)
	}
}

// wantNoUpload checks that set has no live upload: UploadStatus is
// ErrLost and ReadChunk finds none of its chunks.
func wantNoUpload(t *testing.T, eng blob.Backend, set blob.ChunkSet, what string) {
	t.Helper()
	_, err := eng.UploadStatus(t.Context(), set)
	wantErr(t, err, steaderr.ErrLost, what+": UploadStatus")
	if c, err := eng.ReadChunk(t.Context(), set, 0); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("%s: ReadChunk(0) = chunk at %d of %d bytes, %v; want ErrNotFound (an orphan chunk nothing reaps)", what, c.Start, c.Size, err)
	}
}

// uploadEndRace races a chunk append against the end of its upload, an
// abort or a publish whose key is stored already (which discards the
// staged chunks), many times. Whichever wins, no chunk of the set may
// outlive the upload: an abort of what is left must leave nothing to read.
func uploadEndRace(t *testing.T, h Harness) {
	const rounds = 40
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("upload end race", 2*uploadRaceChunk)
	key := blob.KeyOf(value)
	if _, err := eng.Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "racer", TTL: time.Minute}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	for _, end := range []struct {
		name string
		end  func(set blob.ChunkSet) error
	}{
		{"Abort", func(set blob.ChunkSet) error { return eng.AbortUpload(ctx, set) }},
		{"Discard", func(set blob.ChunkSet) error {
			_, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "racer", TTL: time.Minute})
			return err
		}},
	} {
		t.Run(end.name, func(t *testing.T) {
			for round := range rounds {
				set := stageChunks(t, eng, value[:uploadRaceChunk], uploadRaceChunk)
				var writeErr, endErr error
				var wg sync.WaitGroup
				wg.Go(func() { writeErr = appendChunk(ctx, eng, set, uploadRaceChunk, value[uploadRaceChunk:]) })
				wg.Go(func() { endErr = end.end(set) })
				wg.Wait()
				if writeErr != nil && !errors.Is(writeErr, steaderr.ErrLost) {
					t.Fatalf("round %d: WriteChunk racing the upload's end: %v, want nil or ErrLost", round, writeErr)
				}
				// A publish before the last chunk arrived is refused: the
				// upload holds fewer bytes than the publish names.
				if endErr != nil && !errors.Is(endErr, steaderr.ErrConflict) {
					t.Fatalf("round %d: %s racing a chunk write: %v, want nil or ErrConflict", round, end.name, endErr)
				}
				// Whatever is left of the upload (a publish refused before
				// the last chunk arrived) is aborted; nothing may remain.
				if err := eng.AbortUpload(ctx, set); err != nil {
					t.Fatalf("round %d: AbortUpload: %v", round, err)
				}
				wantNoUpload(t, eng, set, fmt.Sprintf("round %d: after %s", round, end.name))
				if c, err := eng.ReadChunk(ctx, set, uploadRaceChunk); !errors.Is(err, steaderr.ErrNotFound) {
					t.Fatalf("round %d: after %s, ReadChunk(%d) = chunk at %d of %d bytes, %v; want ErrNotFound", round, end.name, uploadRaceChunk, c.Start, c.Size, err)
				}
			}
		})
	}
	wantValue(t, b.store, key, value)
}

// uploadPublishedSet checks that a published chunk set takes no chunk,
// not even one at offset 0 or at its end, has no upload status, and that
// an abort of it leaves the published value whole.
func uploadPublishedSet(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("published set", 3000)
	key := blob.KeyOf(value)
	set := stageChunks(t, eng, value, 1000)
	if _, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "publisher", TTL: time.Minute}); err != nil {
		t.Fatalf("Put (publish): %v", err)
	}
	_, err := eng.UploadStatus(ctx, set)
	wantErr(t, err, steaderr.ErrLost, "UploadStatus of a published set")
	for _, off := range []int64{0, 500, 1000, 3000} {
		// Not fatal: what the abort then does matters most.
		if err := appendChunk(ctx, eng, set, off, []byte("an intruder")); !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("WriteChunk at %d of a published set: %v, want an error wrapping ErrLost", off, err)
		}
		if err := eng.AbortUpload(ctx, set); err != nil {
			t.Fatalf("AbortUpload of a published set: %v", err)
		}
		wantValue(t, b.store, key, value)
	}
	_, err = eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "publisher", TTL: time.Minute})
	wantErr(t, err, steaderr.ErrLost, "a second publish of a published set")
	wantValue(t, b.store, key, value)
}

// wantChunk checks that ReadChunk(set, off) answers the chunk of value
// starting at start, chunk bytes long (shorter at the value's end), kept
// as a row.
func wantChunk(t *testing.T, eng blob.Backend, set blob.ChunkSet, off int64, value []byte, start int64, chunk int) {
	t.Helper()
	c, err := eng.ReadChunk(t.Context(), set, off)
	end := min(start+int64(chunk), int64(len(value)))
	if err != nil || c.Start != start || c.Size != end-start || c.Object != "" || !bytes.Equal(c.Data, value[start:end]) {
		t.Fatalf("ReadChunk(%d) = chunk at %d of %d bytes (size %d, object %q), %v; want the chunk [%d, %d) of the value", off, c.Start, len(c.Data), c.Size, c.Object, err, start, end)
	}
}

// uploadAppendOrder checks that an append anywhere but at the upload's
// end (over a chunk stored already, inside one, past the end leaving a
// gap) is refused with ErrConflict, stores nothing and leaves the
// upload's status as it was, so that a value's chunks always tile it and
// a writer that lost track (a second server, a retry of a chunk that did
// commit) learns it instead of storing bytes twice.
func uploadAppendOrder(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("append order", 3000)
	key := blob.KeyOf(value)
	set := stageChunks(t, eng, value, 1000)
	for _, c := range []struct {
		off int64
		n   int
	}{{0, 1}, {0, 1000}, {500, 10}, {1000, 1000}, {1999, 1}, {2000, 1000}, {2999, 1}, {2999, 2}, {3001, 10}, {4000, 1000}, {1 << 40, 1}} {
		err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: c.off, Data: bytes.Repeat([]byte{'!'}, c.n), State: []byte("a wrong state"), Lease: time.Minute})
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("WriteChunk of %d bytes at %d of an upload of 3000", c.n, c.off))
		wantStatus(t, eng, set, "", 3000, uploadState(3000))
	}
	for off := int64(0); off < 3000; off += 250 {
		wantChunk(t, eng, set, off, value, off/1000*1000, 1000)
	}
	if _, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "publisher", TTL: time.Minute}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	rd, err := b.store.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rd.Close()
	for _, off := range []int64{500, 1995, 2999} {
		p := make([]byte, 1)
		if _, err := rd.ReadAt(p, off); err != nil && err != io.EOF || p[0] != value[off] {
			t.Fatalf("ReadAt(%d) = %q, %v; want %q", off, p, err, value[off:off+1])
		}
	}
	wantValue(t, b.store, key, value)
}

// uploadPublishSize checks that a publish naming another size than the
// upload holds (a writer appended since, or a client lost count) is
// refused with ErrConflict and one of an upload with no chunks (not even
// as the empty value) with ErrInvalidArgument: each publishes and pins
// nothing and leaves the upload to be published rightly or aborted.
func uploadPublishSize(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("publish size", 3000)
	key := blob.KeyOf(value)
	publish := func(set blob.ChunkSet, size int64) error {
		_, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: size, Owner: "publisher", TTL: time.Minute})
		return err
	}
	set := stageChunks(t, eng, value, 1000)
	for _, size := range []int64{0, 1, 999, 1000, 2000, 2999, 3001, 4000, math.MaxInt64} {
		err := publish(set, size)
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("publish of 3000 staged bytes as %d", size))
		if _, err := eng.Stat(ctx, key); !errors.Is(err, steaderr.ErrNotFound) {
			t.Fatalf("after a refused publish, Stat = %v, want ErrNotFound", err)
		}
		wantStatus(t, eng, set, "", 3000, uploadState(3000))
	}
	if err := publish(set, 3000); err != nil {
		t.Fatalf("publish after refused ones: %v", err)
	}
	wantValue(t, b.store, key, value)

	// No chunks at all: nothing to publish, even as an empty value.
	empty, err := eng.BeginUpload(ctx, blob.BeginUploadParams{State: uploadState(0), Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	_, err = eng.Put(ctx, blob.PutParams{Key: blob.KeyOf(nil), Chunks: empty, Size: 0, Owner: "publisher", TTL: time.Minute})
	wantErr(t, err, steaderr.ErrInvalidArgument, "publish of a set with no chunks")
	if _, err := eng.Stat(ctx, blob.KeyOf(nil)); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("after a refused publish, Stat = %v, want ErrNotFound", err)
	}
	wantStatus(t, eng, empty, "", 0, uploadState(0))
	if err := eng.AbortUpload(ctx, empty); err != nil {
		t.Fatalf("AbortUpload: %v", err)
	}
	wantNoUpload(t, eng, empty, "after the abort")
}

// uploadAppendRace races two appends at the upload's end many times, as
// two servers continuing one upload may: exactly one commits, the other
// is refused with ErrConflict, and the upload is the winner's bytes,
// published and read back whole.
func uploadAppendRace(t *testing.T, h Harness) {
	const rounds = 30
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	head := testValue("append race", uploadRaceChunk)
	tails := [2][]byte{testValue("append race 0", uploadRaceChunk), testValue("append race 1", uploadRaceChunk+10)}
	for round := range rounds {
		set := stageChunks(t, eng, head, uploadRaceChunk)
		var errs [2]error
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = appendChunk(ctx, eng, set, uploadRaceChunk, tails[i]) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: both appends at %d committed", round, uploadRaceChunk)
			case err == nil:
				winner = i
			case !errors.Is(err, steaderr.ErrConflict):
				t.Fatalf("round %d: racing append %d: %v, want nil or ErrConflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither racing append committed: %v", round, errs)
		}
		value := append(bytes.Clone(head), tails[winner]...)
		wantStatus(t, eng, set, "", int64(len(value)), uploadState(int64(len(value))))
		key := blob.KeyOf(value)
		if _, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "racer", TTL: time.Minute, Now: b.clock.Now()}); err != nil {
			t.Fatalf("round %d: publish: %v", round, err)
		}
		wantValue(t, b.store, key, value)
		b.expirePins()
		if err := engineDelete(ctx, eng, key, b.clock.Now()); err != nil {
			t.Fatalf("round %d: Delete: %v", round, err)
		}
	}
}

// uploadEndedSet checks that a chunk set takes chunks only while the
// upload BeginUpload started is live: once aborted, not even a chunk at
// offset 0 starts it again, and a set never begun takes none.
func uploadEndedSet(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("ended set", 2000)
	set := stageChunks(t, eng, value, 1000)
	if err := eng.AbortUpload(ctx, set); err != nil {
		t.Fatalf("AbortUpload: %v", err)
	}
	if err := eng.AbortUpload(ctx, set); err != nil {
		t.Fatalf("AbortUpload again: %v", err)
	}
	for _, off := range []int64{0, 1000, 2000} {
		err := appendChunk(ctx, eng, set, off, value[:1000])
		wantErr(t, err, steaderr.ErrLost, fmt.Sprintf("WriteChunk at %d of an aborted upload", off))
	}
	wantNoUpload(t, eng, set, "an aborted upload")
	_, err := eng.Put(ctx, blob.PutParams{Key: blob.KeyOf(value), Chunks: set, Size: 2000, Owner: "publisher", TTL: time.Minute})
	wantErr(t, err, steaderr.ErrLost, "publish of an aborted upload")
	never := set ^ 0x5a5a5a5a
	err = appendChunk(ctx, eng, never, 0, value[:1000])
	wantErr(t, err, steaderr.ErrLost, "WriteChunk at 0 of a set never begun")
	wantNoUpload(t, eng, never, "a set never begun")
}

// swapEngine runs swap once, after the first ReadChunk returns.
type swapEngine struct {
	blob.Backend
	once sync.Once
	swap func()
}

func (s *swapEngine) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
	c, err := s.Backend.ReadChunk(ctx, set, off)
	s.once.Do(s.swap)
	return c, err
}

// uploadCommitSwap aborts an upload and appends other bytes at offset 0
// of its set while Upload.Commit reads its chunks to store the value
// inline (as a second client of a server may): the commit must then fail
// with ErrLost, publishing nothing, so the key never names bytes that do
// not hash to it.
func uploadCommitSwap(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	good := testValue("the good value", 1000)
	evil := testValue("the evil value", 1000)
	var set blob.ChunkSet
	swap := &swapEngine{Backend: eng, swap: func() {
		if err := eng.AbortUpload(ctx, set); err != nil {
			t.Errorf("AbortUpload: %v", err)
		}
		if err := appendChunk(ctx, eng, set, 0, evil); !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("WriteChunk at 0 of the aborted set: %v, want an error wrapping ErrLost", err)
		}
	}}
	store := blob.NewStore(swap, blob.Options{ChunkSize: 500, Now: b.clock.Now})
	u, err := store.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	set = uploadSet(t, u)
	if n, err := u.Append(ctx, bytes.NewReader(good)); err != nil || n != int64(len(good)) {
		t.Fatalf("Append = %d, %v", n, err)
	}
	_, err = u.Commit(ctx, blob.CommitOptions{})
	wantErr(t, err, steaderr.ErrLost, "Commit of an upload aborted while its bytes were read")
	if _, err := eng.Stat(ctx, blob.KeyOf(good)); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("after the refused commit, Stat = %v, want ErrNotFound", err)
	}
	if _, err := eng.Stat(ctx, blob.KeyOf(evil)); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("after the refused commit, Stat of the evil value = %v, want ErrNotFound", err)
	}
}

// uploadSet returns u's chunk set, parsed from its ID.
func uploadSet(t *testing.T, u *blob.Upload) blob.ChunkSet {
	t.Helper()
	var n uint64
	if _, err := fmt.Sscanf(u.ID(), "%016x", &n); err != nil || len(u.ID()) != 16 || n == 0 || n > math.MaxInt64 {
		t.Fatalf("upload ID %q: want 16 hex digits naming a chunk set (%v)", u.ID(), err)
	}
	return blob.ChunkSet(n)
}

// uploadRandomIDs checks that BeginUpload draws positive, distinct chunk
// set ids that do not follow each other, so one upload's id tells nothing
// of another's.
func uploadRandomIDs(t *testing.T, h Harness) {
	b := setup(t, h)
	const n = 16
	seen := make(map[blob.ChunkSet]bool, n)
	var last blob.ChunkSet
	for i := range n {
		set, err := b.blobs.BeginUpload(t.Context(), blob.BeginUploadParams{State: uploadState(0), Lease: time.Minute})
		if err != nil {
			t.Fatalf("BeginUpload: %v", err)
		}
		if set <= 0 || seen[set] || i > 0 && (set-last == 1 || last-set == 1) {
			t.Fatalf("BeginUpload %d drew chunk set %d after %d: want positive, distinct, not consecutive ids", i, set, last)
		}
		seen[set], last = true, set
	}
}

// uploadOffsetOverflow checks that a chunk whose end is past the largest
// int64 (where offset plus length wraps around) or whose offset is
// negative is refused with ErrInvalidArgument and stores nothing, the
// upload's status unchanged.
func uploadOffsetOverflow(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("offset overflow", 1000)
	set := stageChunks(t, eng, value, 1000)
	for _, off := range []int64{math.MaxInt64 - 2, math.MaxInt64 - 5, math.MaxInt64 - 9, math.MaxInt64, -1, -10, math.MinInt64} {
		err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: []byte("0123456789"), State: []byte("a wrong state"), Lease: time.Minute})
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("WriteChunk of 10 bytes at %d", off))
		wantStatus(t, eng, set, "", 1000, uploadState(1000))
	}
	for _, off := range []int64{math.MaxInt64 - 1, math.MaxInt64 - 9} {
		if c, err := eng.ReadChunk(ctx, set, off); err != nil || c.Start != 0 {
			t.Fatalf("ReadChunk(%d) after refused writes = chunk at %d of %d bytes, %v; want the chunk at 0", off, c.Start, c.Size, err)
		}
	}
	// An append just fitting below the largest offset is merely out of
	// order.
	err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: math.MaxInt64 - 10, Data: []byte("0123456789"), State: []byte("a wrong state"), Lease: time.Minute})
	wantErr(t, err, steaderr.ErrConflict, "WriteChunk of 10 bytes ending at the largest int64")
	wantStatus(t, eng, set, "", 1000, uploadState(1000))
	value = append(value, 'x')
	if err := appendChunk(ctx, eng, set, 1000, value[1000:]); err != nil {
		t.Fatalf("WriteChunk at the end after refused ones: %v", err)
	}
	if _, err := eng.Put(ctx, blob.PutParams{Key: blob.KeyOf(value), Chunks: set, Size: int64(len(value)), Owner: "publisher", TTL: time.Minute}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	wantValue(t, b.store, blob.KeyOf(value), value)
}

// uploadReap checks ReapUploads on the caller's clock: an upload whose
// lease lapsed is discarded with its chunks and takes no chunk again,
// while one a chunk write renewed in time is kept whole; the portable
// store reaps on its own clock.
func uploadReap(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	t0 := b.clock.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	write := func(set blob.ChunkSet, off int64, label string, now time.Time) error {
		return eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: testValue(label, 100), State: uploadState(off + 100), Lease: time.Minute, Now: now})
	}
	begin := func(name string) blob.ChunkSet {
		t.Helper()
		set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{State: uploadState(0), Lease: time.Minute, Now: t0})
		if err != nil {
			t.Fatalf("BeginUpload %s: %v", name, err)
		}
		if err := write(set, 0, name, t0); err != nil {
			t.Fatalf("WriteChunk to %s: %v", name, err)
		}
		return set
	}
	reap := func(now time.Time, want int) {
		t.Helper()
		n, err := eng.ReapUploads(ctx, blob.ReapUploadsParams{Now: now})
		if err != nil || n != want {
			t.Fatalf("ReapUploads at t0+%v = %d, %v; want %d", now.Sub(t0), n, err, want)
		}
	}
	lapsing, renewed := begin("lapsing"), begin("renewed")
	reap(at(30*time.Second), 0)
	// Renewed at t0+40s, the upload lasts until t0+100s.
	if err := write(renewed, 100, "renewed 2", at(40*time.Second)); err != nil {
		t.Fatalf("WriteChunk renewing: %v", err)
	}
	reap(at(70*time.Second), 1)
	reap(at(70*time.Second), 0)
	err := write(lapsing, 100, "late", at(70*time.Second))
	wantErr(t, err, steaderr.ErrLost, "WriteChunk to a reaped upload")
	wantNoUpload(t, eng, lapsing, "a reaped upload")
	for _, off := range []int64{0, 100} {
		if c, err := eng.ReadChunk(ctx, renewed, off); err != nil || len(c.Data) != 100 {
			t.Fatalf("ReadChunk at %d of the renewed upload: %d bytes, %v", off, len(c.Data), err)
		}
	}
	wantStatus(t, eng, renewed, "", 200, uploadState(200))
	if err := write(renewed, 200, "renewed 3", at(70*time.Second)); err != nil {
		t.Fatalf("WriteChunk to the renewed upload after the reap: %v", err)
	}
	// The store's clock, moved past the renewed lease (t0+130s).
	b.clock.Advance(3 * time.Minute)
	if n, err := b.store.ReapUploads(ctx); err != nil || n != 1 {
		t.Fatalf("Store.ReapUploads on its clock = %d, %v; want 1", n, err)
	}
	wantNoUpload(t, eng, renewed, "an upload the store reaped")
}
