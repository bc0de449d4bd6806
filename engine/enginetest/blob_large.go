package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// chunkCounter is a blob engine that counts chunk fetches. It stores
// large values in chunks even over an engine with a bytes tier.
type chunkCounter struct {
	blob.Backend
	reads atomic.Int64
}

func (c *chunkCounter) Tiered() bool { return false }

func (c *chunkCounter) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (int64, []byte, error) {
	c.reads.Add(1)
	return c.Backend.ReadChunk(ctx, set, off)
}

// chunkedStore returns a store over a fresh engine whose values over 16
// bytes are stored in chunks of chunk bytes, and the counter of its chunk
// fetches.
func chunkedStore(t *testing.T, h Harness, chunk int, opts blob.Options) (*bundle, *blob.Store, *chunkCounter) {
	t.Helper()
	b := setup(t, h)
	counter := &chunkCounter{Backend: b.blobs}
	opts.InlineLimit, opts.ChunkSize, opts.Now = tinyInline, chunk, b.clock.Now
	return b, blob.NewStore(counter, opts), counter
}

// blobRangeReads checks that a range read fetches only the chunks holding
// the range, that Size reads none, and that hostile ranges get clear
// answers.
func blobRangeReads(t *testing.T, h Harness) {
	const chunk, chunks = 1000, 10
	_, store, counter := chunkedStore(t, h, chunk, blob.Options{})
	value := testValue("ranges", chunk*chunks-7) // the last chunk is short
	key := mustPut(t, store, value)
	size := int64(len(value))

	fetches := func(what string, want int64, read func()) {
		t.Helper()
		before := counter.reads.Load()
		read()
		if got := counter.reads.Load() - before; got != want {
			t.Fatalf("%s fetched %d chunks, want %d", what, got, want)
		}
	}
	var rd *blob.Reader
	fetches("Get and Size", 0, func() {
		var err error
		if rd, err = store.Get(t.Context(), key); err != nil {
			t.Fatalf("Get: %v", err)
		}
		if rd.Size() != size {
			t.Fatalf("Size() = %d, want %d", rd.Size(), size)
		}
	})
	t.Cleanup(func() { rd.Close() })
	readAt := func(n int, off int64, wantN int, wantErr error) {
		t.Helper()
		p := make([]byte, n)
		got, err := rd.ReadAt(p, off)
		if got != wantN || !errors.Is(err, wantErr) && err != wantErr {
			t.Fatalf("ReadAt(%d bytes, off %d) = %d, %v; want %d, %v", n, off, got, err, wantN, wantErr)
		}
		if got > 0 && !bytes.Equal(p[:got], value[off:off+int64(got)]) {
			t.Fatalf("ReadAt(%d bytes, off %d) returned the wrong bytes", n, off)
		}
	}
	fetches("ReadAt inside chunk 7", 1, func() { readAt(10, 7*chunk+5, 10, nil) })
	fetches("ReadAt across chunks 3 and 4", 2, func() { readAt(20, 4*chunk-10, 20, nil) })
	fetches("ReadAt of the last bytes", 1, func() { readAt(100, size-50, 50, io.EOF) })
	fetches("ReadAt at EOF", 0, func() { readAt(10, size, 0, io.EOF) })
	fetches("ReadAt far beyond EOF", 0, func() { readAt(10, math.MaxInt64, 0, io.EOF) })
	fetches("ReadAt at a negative offset", 0, func() { readAt(10, -1, 0, steaderr.ErrInvalidArgument) })
	fetches("ReadAt of the whole value and more", chunks, func() { readAt(int(size)+1<<16, 0, int(size), io.EOF) })
	fetches("ReadAt of nothing", 0, func() { readAt(0, 3*chunk, 0, nil) })

	fetches("Seek and Read in chunk 8", 1, func() {
		if _, err := rd.Seek(8*chunk+1, io.SeekStart); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		p := make([]byte, 10)
		if n, err := io.ReadFull(rd, p); err != nil || !bytes.Equal(p, value[8*chunk+1:8*chunk+11]) {
			t.Fatalf("Read after Seek = %d, %v, or the wrong bytes", n, err)
		}
	})
	fetches("hostile seeks", 0, func() {
		for _, tc := range []struct {
			off    int64
			whence int
		}{{-1, io.SeekStart}, {-size - 1, io.SeekEnd}, {math.MinInt64, io.SeekCurrent}, {0, 3}} {
			if _, err := rd.Seek(tc.off, tc.whence); !errors.Is(err, steaderr.ErrInvalidArgument) {
				t.Fatalf("Seek(%d, %d): %v, want an error wrapping ErrInvalidArgument", tc.off, tc.whence, err)
			}
		}
		if pos, err := rd.Seek(size+100, io.SeekStart); err != nil || pos != size+100 {
			t.Fatalf("Seek beyond EOF = %d, %v", pos, err)
		}
		if n, err := rd.Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Fatalf("Read beyond EOF = %d, %v; want 0, io.EOF", n, err)
		}
	})
	fetches("WriteTo from the start", chunks, func() {
		if _, err := rd.Seek(0, io.SeekStart); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		var buf bytes.Buffer
		if n, err := rd.WriteTo(&buf); err != nil || n != size || !bytes.Equal(buf.Bytes(), value) {
			t.Fatalf("WriteTo = %d, %v, or the wrong bytes", n, err)
		}
	})
}

// blobDeletedWhileReading checks that a reader of a value deleted under it
// fails with ErrNotFound, even once the same content is stored again, and
// never returns other bytes.
func blobDeletedWhileReading(t *testing.T, h Harness) {
	const chunk = 1000
	b, store, _ := chunkedStore(t, h, chunk, blob.Options{})
	value := testValue("deleted while reading", 5*chunk)
	key := mustPut(t, store, value)
	rd, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	p := make([]byte, chunk)
	if _, err := io.ReadFull(rd, p); err != nil || !bytes.Equal(p, value[:chunk]) {
		t.Fatalf("reading the first chunk: %v", err)
	}
	b.expirePins()
	if err := store.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	mustPut(t, store, value) // the same key again, in a new chunk set
	n, err := io.ReadFull(rd, p)
	wantErr(t, err, steaderr.ErrNotFound, "reading on after the value was deleted")
	if n != 0 {
		t.Fatalf("reading on after the value was deleted returned %d bytes", n)
	}
	_, err = rd.ReadAt(p, 3*chunk)
	wantErr(t, err, steaderr.ErrNotFound, "ReadAt after the value was deleted")
	wantValue(t, store, key, value)
}

// blobSameContentRace puts one chunked value from many goroutines at once:
// every put succeeds, and one value is stored.
func blobSameContentRace(t *testing.T, h Harness) {
	const chunk, puts = 1000, 8
	b, store, _ := chunkedStore(t, h, chunk, blob.Options{})
	value := testValue("same content", 4*chunk+1)
	var wg sync.WaitGroup
	errs := make([]error, puts)
	for i := range puts {
		wg.Go(func() { _, errs[i] = store.Put(t.Context(), bytes.NewReader(value)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	key := blob.KeyOf(value)
	wantKeys(t, "List after racing puts", mustAll(t, b.store, blob.Key{}), []blob.Key{key})
	wantValue(t, store, key, value)
}

// blobPutDeleteRace races chunked puts of one value against deletes of its
// key, each after the pins expired: a delete either removes the value
// whole or is refused while a fresh put's pin protects it, and a read
// never sees a partial value.
func blobPutDeleteRace(t *testing.T, h Harness) {
	const chunk, rounds = 1000, 20
	b, store, _ := chunkedStore(t, h, chunk, blob.Options{VerifyReads: true})
	value := testValue("put delete race", 3*chunk+5)
	key := blob.KeyOf(value)
	ctx := t.Context()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range rounds {
			if _, err := store.Put(ctx, bytes.NewReader(value)); err != nil {
				t.Errorf("Put: %v", err)
				return
			}
		}
	})
	wg.Go(func() {
		for range rounds {
			b.expirePins()
			if err := store.Delete(ctx, key); err != nil && !errors.Is(err, steaderr.ErrNotFound) && !errors.Is(err, steaderr.ErrProtected) {
				t.Errorf("Delete: %v", err)
				return
			}
			rd, err := store.Get(ctx, key)
			if errors.Is(err, steaderr.ErrNotFound) {
				continue
			}
			if err != nil {
				t.Errorf("Get: %v", err)
				return
			}
			got, err := io.ReadAll(rd)
			if err != nil && !errors.Is(err, steaderr.ErrNotFound) {
				t.Errorf("reading during deletes: %v", err)
				return
			}
			if err == nil && !bytes.Equal(got, value) {
				t.Errorf("read %d bytes %s during deletes, want the value", len(got), blob.KeyOf(got))
				return
			}
		}
	})
	wg.Wait()
	if _, err := store.Put(ctx, bytes.NewReader(value)); err != nil {
		t.Fatalf("Put after the race: %v", err)
	}
	wantValue(t, store, key, value)
}

// blobVerify checks Verify and VerifyReads on intact values of both tiers;
// engine tests corrupt stored chunks directly.
func blobVerify(t *testing.T, h Harness) {
	_, store, _ := chunkedStore(t, h, 1000, blob.Options{VerifyReads: true})
	for _, size := range []int{0, tinyInline, tinyInline + 1, 1000, 3500} {
		value := testValue("verify", size)
		key := mustPut(t, store, value)
		if err := store.Verify(t.Context(), key); err != nil {
			t.Fatalf("Verify(%d-byte value): %v", size, err)
		}
		wantValue(t, store, key, value)
	}
	err := store.Verify(t.Context(), absentKey("verify"))
	wantErr(t, err, steaderr.ErrNotFound, "Verify(absent key)")
	err = store.Verify(t.Context(), blob.Key{})
	wantErr(t, err, steaderr.ErrInvalidKey, "Verify(zero key)")
}

// testUpload holds the rules of the chunked-upload seam (BeginUpload,
// WriteChunk, AbortUpload, a chunked Put) that the portable store never
// breaks itself but a remote client may: they run once, on the seam.
func testUpload(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"EndRace", uploadEndRace},
		{"PublishedSet", uploadPublishedSet},
		{"Overlap", uploadOverlap},
		{"Tiling", uploadTiling},
		{"OverlapRace", uploadOverlapRace},
		{"EndedSet", uploadEndedSet},
		{"PublishSwap", uploadPublishSwap},
		{"RandomIDs", uploadRandomIDs},
		{"OffsetOverflow", uploadOffsetOverflow},
		{"Reap", uploadReap},
	})
}

// uploadRaceChunk is the chunk size of the upload races: large enough that
// a chunk write is still in flight when the racing call starts.
const uploadRaceChunk = 64 << 10

// uploadEndRace races a chunk write against the end of its upload, an
// abort or a publish whose key is stored already (which discards the
// staged chunks), many times. Whichever wins, no chunk of the set may
// outlive the upload: an abort of what is left must leave nothing to read.
func uploadEndRace(t *testing.T, h Harness) {
	const rounds = 40
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("upload end race", 2*uploadRaceChunk)
	key := blob.KeyOf(value)
	if err := eng.Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "racer", TTL: time.Minute}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	for _, end := range []struct {
		name string
		end  func(set blob.ChunkSet) error
	}{
		{"Abort", func(set blob.ChunkSet) error { return eng.AbortUpload(ctx, set) }},
		{"Discard", func(set blob.ChunkSet) error {
			return eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "racer", TTL: time.Minute})
		}},
	} {
		t.Run(end.name, func(t *testing.T) {
			for round := range rounds {
				set := stageChunks(t, eng, value[:uploadRaceChunk], uploadRaceChunk)
				var writeErr, endErr error
				var wg sync.WaitGroup
				wg.Go(func() {
					writeErr = eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: uploadRaceChunk, Data: value[uploadRaceChunk:], Lease: time.Minute})
				})
				wg.Go(func() { endErr = end.end(set) })
				wg.Wait()
				if writeErr != nil && !errors.Is(writeErr, steaderr.ErrLost) {
					t.Fatalf("round %d: WriteChunk racing the upload's end: %v, want nil or ErrLost", round, writeErr)
				}
				// A publish may be refused for a value not whole yet (a
				// server checks its hash first).
				if endErr != nil && !errors.Is(endErr, steaderr.ErrInvalidArgument) && !errors.Is(endErr, steaderr.ErrDigestMismatch) {
					t.Fatalf("round %d: %s racing a chunk write: %v", round, end.name, endErr)
				}
				// Whatever is left of the upload (a publish refused before
				// the last chunk arrived) is aborted; nothing may remain.
				if err := eng.AbortUpload(ctx, set); err != nil {
					t.Fatalf("round %d: AbortUpload: %v", round, err)
				}
				for _, off := range []int64{0, uploadRaceChunk} {
					if start, data, err := eng.ReadChunk(ctx, set, off); !errors.Is(err, steaderr.ErrNotFound) {
						t.Fatalf("round %d: after %s, ReadChunk(%d) = chunk at %d of %d bytes, %v; want ErrNotFound (an orphan chunk nothing reaps)",
							round, end.name, off, start, len(data), err)
					}
				}
			}
		})
	}
	wantValue(t, b.store, key, value)
}

// stageChunks begins an upload and writes value to it in chunks of chunk
// bytes, returning its chunk set.
func stageChunks(t *testing.T, eng blob.Backend, value []byte, chunk int) blob.ChunkSet {
	t.Helper()
	set, err := eng.BeginUpload(t.Context(), blob.BeginUploadParams{Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	for off := 0; off < len(value); off += chunk {
		if err := eng.WriteChunk(t.Context(), blob.WriteChunkParams{Set: set, Off: int64(off), Data: value[off:min(off+chunk, len(value))], Lease: time.Minute}); err != nil {
			t.Fatalf("WriteChunk at %d: %v", off, err)
		}
	}
	return set
}

// uploadPublishedSet checks that a published chunk set takes no chunk,
// not even one at offset 0 that would start an upload again, and that an
// abort of it leaves the published value whole.
func uploadPublishedSet(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("published set", 3000)
	key := blob.KeyOf(value)
	set := stageChunks(t, eng, value, 1000)
	if err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "publisher", TTL: time.Minute}); err != nil {
		t.Fatalf("Put (publish): %v", err)
	}
	for _, off := range []int64{0, 500, 1000, 3000} {
		// Not fatal: what the abort then does matters most.
		if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: []byte("an intruder"), Lease: time.Minute}); !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("WriteChunk at %d of a published set: %v, want an error wrapping ErrLost", off, err)
		}
		if err := eng.AbortUpload(ctx, set); err != nil {
			t.Fatalf("AbortUpload of a published set: %v", err)
		}
		wantValue(t, b.store, key, value)
	}
}

// wantChunk checks that ReadChunk(set, off) answers the chunk of value
// starting at start, chunk bytes long (shorter at the value's end).
func wantChunk(t *testing.T, eng blob.Backend, set blob.ChunkSet, off int64, value []byte, start int64, chunk int) {
	t.Helper()
	got, data, err := eng.ReadChunk(t.Context(), set, off)
	end := min(start+int64(chunk), int64(len(value)))
	if err != nil || got != start || !bytes.Equal(data, value[start:end]) {
		t.Fatalf("ReadChunk(%d) = chunk at %d of %d bytes, %v; want the chunk [%d, %d) of the value", off, got, len(data), err, start, end)
	}
}

// uploadOverlap checks that a chunk overlapping one stored already (the
// same offset, inside it, across its end) is refused with ErrConflict and
// stores nothing, so that a published value reads the same bytes however
// it is read: an extra chunk inside another would be skipped by a reader
// going from the start (and by the hash that checks the value) but served
// to one seeking into it.
func uploadOverlap(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("overlap", 3000)
	key := blob.KeyOf(value)
	set := stageChunks(t, eng, value, 1000)
	for _, c := range []struct {
		off int64
		n   int
	}{{0, 1}, {0, 1000}, {500, 10}, {1000, 1000}, {1000, 1}, {1999, 1}, {1990, 20}, {999, 2}, {2999, 1}, {2500, 1000}} {
		err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: c.off, Data: bytes.Repeat([]byte{'!'}, c.n), Lease: time.Minute})
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("WriteChunk of %d bytes at %d over chunks of 1000", c.n, c.off))
	}
	for off := int64(0); off < 3000; off += 250 {
		wantChunk(t, eng, set, off, value, off/1000*1000, 1000)
	}
	if err := b.store.Publish(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "publisher", TTL: time.Minute}); err != nil {
		t.Fatalf("Publish: %v", err)
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

// uploadTiling checks that a publish whose staged chunks do not cover
// [0, size) exactly (a gap, a chunk past the end, a missing tail) is
// refused with ErrInvalidArgument, publishes and pins nothing and leaves
// the upload to be published rightly or aborted.
func uploadTiling(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("tiling", 3000)
	key := blob.KeyOf(value)
	publish := func(set blob.ChunkSet, size int64) error {
		return eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: size, Owner: "publisher", TTL: time.Minute})
	}
	set := stageChunks(t, eng, value, 1000)
	for _, size := range []int64{1, 999, 1000, 2000, 2999, 3001, 4000} {
		wantRefusedPublish(t, publish(set, size), fmt.Sprintf("publish of 3000 staged bytes as %d", size))
		if _, err := eng.Stat(ctx, key); !errors.Is(err, steaderr.ErrNotFound) {
			t.Fatalf("after a refused publish, Stat = %v, want ErrNotFound", err)
		}
	}
	if err := publish(set, 3000); err != nil {
		t.Fatalf("publish after refused ones: %v", err)
	}
	wantValue(t, b.store, key, value)

	// A gap inside: chunks [0, 1000) and [2000, 3000).
	gap, err := eng.BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	for _, off := range []int{0, 2000} {
		if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: gap, Off: int64(off), Data: value[off : off+1000], Lease: time.Minute}); err != nil {
			t.Fatalf("WriteChunk at %d: %v", off, err)
		}
	}
	other := testValue("tiling with a gap", 3000)
	err = eng.Put(ctx, blob.PutParams{Key: blob.KeyOf(other), Chunks: gap, Size: 3000, Owner: "publisher", TTL: time.Minute})
	wantRefusedPublish(t, err, "publish of chunks with a gap")
	if _, err := eng.Stat(ctx, blob.KeyOf(other)); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("after a refused publish, Stat = %v, want ErrNotFound", err)
	}
	if err := eng.AbortUpload(ctx, gap); err != nil {
		t.Fatalf("AbortUpload: %v", err)
	}
	if _, _, err := eng.ReadChunk(ctx, gap, 0); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("after the abort, ReadChunk = %v, want ErrNotFound", err)
	}

	// No chunks at all: nothing to publish, even as an empty value.
	empty, err := eng.BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	err = eng.Put(ctx, blob.PutParams{Key: blob.KeyOf(nil), Chunks: empty, Size: 0, Owner: "publisher", TTL: time.Minute})
	wantRefusedPublish(t, err, "publish of a set with no chunks")
	if _, err := eng.Stat(ctx, blob.KeyOf(nil)); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("after a refused publish, Stat = %v, want ErrNotFound", err)
	}
}

// wantRefusedPublish checks that err refuses the publish of staged chunks
// that do not cover the value exactly: ErrInvalidArgument from the
// engine's check, or ErrDigestMismatch from a server that re-reads the
// chunks before it publishes.
func wantRefusedPublish(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, steaderr.ErrInvalidArgument) && !errors.Is(err, steaderr.ErrDigestMismatch) {
		t.Fatalf("%s: error %v, want one wrapping ErrInvalidArgument (or ErrDigestMismatch)", what, err)
	}
}

// uploadOverlapRace races two overlapping chunk writes to one upload many
// times: an overlap that slips past both writes' checks must still be
// refused by the publish, never published.
func uploadOverlapRace(t *testing.T, h Harness) {
	const rounds = 30
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("overlap race", 2*uploadRaceChunk)
	key := blob.KeyOf(value)
	for round := range rounds {
		set := stageChunks(t, eng, value[:uploadRaceChunk], uploadRaceChunk)
		var errs [2]error
		var wg sync.WaitGroup
		wg.Go(func() {
			errs[0] = eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: uploadRaceChunk, Data: value[uploadRaceChunk:], Lease: time.Minute})
		})
		wg.Go(func() {
			errs[1] = eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: uploadRaceChunk + 10, Data: []byte("an intruder"), Lease: time.Minute})
		})
		wg.Wait()
		for _, err := range errs {
			if err != nil && !errors.Is(err, steaderr.ErrConflict) {
				t.Fatalf("round %d: racing overlapping chunk writes: %v, want nil or ErrConflict", round, err)
			}
		}
		err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(value)), Owner: "racer", TTL: time.Minute, Now: b.clock.Now()})
		switch {
		case errs[0] == nil && errs[1] == nil:
			wantRefusedPublish(t, err, fmt.Sprintf("round %d: publish of overlapping chunks", round))
		case errs[0] != nil:
			wantRefusedPublish(t, err, fmt.Sprintf("round %d: publish of a value with a gap", round))
		case err != nil:
			t.Fatalf("round %d: publish: %v", round, err)
		}
		if err := eng.AbortUpload(ctx, set); err != nil {
			t.Fatalf("round %d: AbortUpload: %v", round, err)
		}
		if _, err := eng.Stat(ctx, key); err == nil {
			wantValue(t, b.store, key, value)
			b.expirePins()
			if err := engineDelete(ctx, eng, key, b.clock.Now()); err != nil {
				t.Fatalf("round %d: Delete: %v", round, err)
			}
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
	for _, off := range []int64{0, 1000, 2000} {
		err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: value[:1000], Lease: time.Minute})
		wantErr(t, err, steaderr.ErrLost, fmt.Sprintf("WriteChunk at %d of an aborted upload", off))
	}
	if _, _, err := eng.ReadChunk(ctx, set, 0); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("ReadChunk of an aborted upload: %v, want ErrNotFound", err)
	}
	err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set ^ 0x5a5a5a5a, Data: value[:1000], Lease: time.Minute})
	wantErr(t, err, steaderr.ErrLost, "WriteChunk at 0 of a set never begun")
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
	begin := func(name string) blob.ChunkSet {
		t.Helper()
		set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Minute, Now: t0})
		if err != nil {
			t.Fatalf("BeginUpload %s: %v", name, err)
		}
		if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: testValue(name, 100), Lease: time.Minute, Now: t0}); err != nil {
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
	if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: renewed, Off: 100, Data: testValue("renewed 2", 100), Lease: time.Minute, Now: at(40 * time.Second)}); err != nil {
		t.Fatalf("WriteChunk renewing: %v", err)
	}
	reap(at(70*time.Second), 1)
	reap(at(70*time.Second), 0)
	err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: lapsing, Off: 100, Data: testValue("late", 100), Lease: time.Minute, Now: at(70 * time.Second)})
	wantErr(t, err, steaderr.ErrLost, "WriteChunk to a reaped upload")
	if _, _, err := eng.ReadChunk(ctx, lapsing, 0); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("ReadChunk of a reaped upload: %v, want ErrNotFound", err)
	}
	for _, off := range []int64{0, 100} {
		if _, data, err := eng.ReadChunk(ctx, renewed, off); err != nil || len(data) != 100 {
			t.Fatalf("ReadChunk at %d of the renewed upload: %d bytes, %v", off, len(data), err)
		}
	}
	if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: renewed, Off: 200, Data: testValue("renewed 3", 100), Lease: time.Minute, Now: at(70 * time.Second)}); err != nil {
		t.Fatalf("WriteChunk to the renewed upload after the reap: %v", err)
	}
	// The store's clock, moved past the renewed lease (t0+130s).
	b.clock.Advance(3 * time.Minute)
	if n, err := b.store.ReapUploads(ctx); err != nil || n != 1 {
		t.Fatalf("Store.ReapUploads on its clock = %d, %v; want 1", n, err)
	}
	if _, _, err := eng.ReadChunk(ctx, renewed, 0); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("ReadChunk of an upload the store reaped: %v, want ErrNotFound", err)
	}
}

// swapEngine runs swap once, after the first ReadChunk returns.
type swapEngine struct {
	blob.Backend
	once sync.Once
	swap func()
}

func (s *swapEngine) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (int64, []byte, error) {
	start, data, err := s.Backend.ReadChunk(ctx, set, off)
	s.once.Do(s.swap)
	return start, data, err
}

// uploadPublishSwap aborts an upload and writes other bytes at offset 0
// of its set while Store.Publish hashes the staged chunks (as a second
// client of a server may): the publish must then fail, publishing
// nothing, so the key never names bytes that do not hash to it.
func uploadPublishSwap(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	good := testValue("the good value", 1000)
	evil := testValue("the evil value", 1000)
	key := blob.KeyOf(good)
	set := stageChunks(t, eng, good, 1000)
	swap := &swapEngine{Backend: eng, swap: func() {
		if err := eng.AbortUpload(ctx, set); err != nil {
			t.Errorf("AbortUpload: %v", err)
		}
		err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: evil, Lease: time.Minute})
		if !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("WriteChunk at 0 of the aborted set: %v, want an error wrapping ErrLost", err)
		}
	}}
	store := blob.NewStore(swap, blob.Options{InlineLimit: tinyInline, ChunkSize: 1000})
	err := store.Publish(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(good)), Owner: "publisher", TTL: time.Minute})
	if !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("Publish of an upload aborted while it was hashed: %v, want an error wrapping ErrLost", err)
	}
	if _, err := eng.Stat(ctx, key); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("after the refused publish, Stat = %v, want ErrNotFound", err)
	}
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
		set, err := b.blobs.BeginUpload(t.Context(), blob.BeginUploadParams{Lease: time.Minute})
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
// negative is refused with ErrInvalidArgument and stores nothing: else
// two overlapping chunks near the end both pass the overlap check.
func uploadOffsetOverflow(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	value := testValue("offset overflow", 1000)
	set := stageChunks(t, eng, value, 1000)
	for _, off := range []int64{math.MaxInt64 - 2, math.MaxInt64 - 5, math.MaxInt64 - 9, math.MaxInt64, -1, math.MinInt64} {
		err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: []byte("0123456789"), Lease: time.Minute})
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("WriteChunk of 10 bytes at %d", off))
	}
	for _, off := range []int64{math.MaxInt64 - 1, math.MaxInt64 - 9} {
		if start, data, err := eng.ReadChunk(ctx, set, off); err != nil || start != 0 {
			t.Fatalf("ReadChunk(%d) after refused writes = chunk at %d of %d bytes, %v; want the chunk at 0", off, start, len(data), err)
		}
	}
}
