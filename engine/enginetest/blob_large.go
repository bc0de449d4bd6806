package enginetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"

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

func (c *chunkCounter) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
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
