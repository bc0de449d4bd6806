package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// testBlob covers the blob rules, through the portable store and the
// engine seam.
func testBlob(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"RoundTrip", blobRoundTrip},
		{"Dedup", blobDedup},
		{"PutExpect", blobPutExpect},
		{"Stat", blobStat},
		{"Has", blobHas},
		{"Absent", blobAbsent},
		{"ZeroKey", blobZeroKey},
		{"MaxSize", blobMaxSize},
		{"ReaderError", blobReaderError},
		{"Cancel", blobCancel},
		{"Isolation", blobIsolation},
		{"List", blobList},
		{"All", blobAll},
		{"SeamList", blobSeamList},
		{"ListDuringPuts", blobListDuringPuts},
		{"Concurrent", blobConcurrent},
		{"Delete", blobDelete},
		{"RangeReads", blobRangeReads},
		{"DeletedWhileReading", blobDeletedWhileReading},
		{"SameContentRace", blobSameContentRace},
		{"PutDeleteRace", blobPutDeleteRace},
		{"Verify", blobVerify},
		{"PutCreated", blobPutCreated},
	})
}

func blobRoundTrip(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"Empty", 0},
		{"OneByte", 1},
		{"FewKiB", 5<<10 + 3},
		{"InlineLimit", blob.InlineLimit},
		{"OverInlineLimit", blob.InlineLimit + 1},
		{"FewChunks", 2*blob.DefaultChunkSize + 5},
		{"ChunkMultiple", 2 * blob.DefaultChunkSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			value := testValue(tc.name, tc.size)
			key := mustPut(t, b.store, value)

			rd, err := b.store.Get(t.Context(), key)
			if err != nil {
				t.Fatalf("Get(%s): %v", key, err)
			}
			checkReader(t, rd, key, value)

			if got := engineValue(t, b.blobs, key); !bytes.Equal(got, value) {
				t.Fatalf("engine Get(%s) = %d bytes %s, want %d bytes", key, len(got), blob.KeyOf(got), len(value))
			}
		})
	}
}

// engineValue reads key's whole value through the engine seam: inline, or
// chunk by chunk.
func engineValue(t *testing.T, eng blob.Backend, key blob.Key) []byte {
	t.Helper()
	st, err := eng.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("engine Get(%s): %v", key, err)
	}
	if st.Object != "" {
		rc, err := eng.ReadValue(t.Context(), blob.ReadValueParams{Key: key, Object: st.Object, Size: st.Size, N: -1})
		if err != nil {
			t.Fatalf("engine ReadValue(%s): %v", st.Object, err)
		}
		defer rc.Close()
		value, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("engine ReadValue(%s): reading: %v", st.Object, err)
		}
		if int64(len(value)) != st.Size {
			t.Fatalf("engine Get(%s): object of %d bytes, size %d", key, len(value), st.Size)
		}
		return value
	}
	if st.Chunks == 0 {
		if int64(len(st.Value)) != st.Size {
			t.Fatalf("engine Get(%s): inline value of %d bytes, size %d", key, len(st.Value), st.Size)
		}
		return st.Value
	}
	var value []byte
	for int64(len(value)) < st.Size {
		c, err := eng.ReadChunk(t.Context(), st.Chunks, int64(len(value)))
		if err != nil {
			t.Fatalf("engine ReadChunk(%d, %d): %v", st.Chunks, len(value), err)
		}
		data := chunkBytes(t, eng, key, c)
		if c.Start != int64(len(value)) || len(data) == 0 {
			t.Fatalf("engine ReadChunk(%d, %d) = chunk at %d of %d bytes, want one starting there", st.Chunks, len(value), c.Start, len(data))
		}
		value = append(value, data...)
	}
	return value
}

// chunkBytes returns the bytes of c, a chunk of key's value (or of an
// upload, key then zero): its data, or its object's bytes read whole.
func chunkBytes(t *testing.T, eng blob.Backend, key blob.Key, c blob.Chunk) []byte {
	t.Helper()
	if c.Object == "" {
		if int64(len(c.Data)) != c.Size {
			t.Fatalf("engine ReadChunk: chunk at %d of %d bytes, Size %d", c.Start, len(c.Data), c.Size)
		}
		return c.Data
	}
	if c.Data != nil {
		t.Fatalf("engine ReadChunk: object chunk %s at %d with %d bytes of data", c.Object, c.Start, len(c.Data))
	}
	rc, err := eng.ReadValue(t.Context(), blob.ReadValueParams{Key: key, Object: c.Object, At: c.Start, Size: c.Size, N: -1})
	if err != nil {
		t.Fatalf("engine ReadValue(%s, chunk at %d): %v", c.Object, c.Start, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil || int64(len(data)) != c.Size {
		t.Fatalf("engine ReadValue(%s, chunk at %d) = %d bytes, %v; want %d", c.Object, c.Start, len(data), err, c.Size)
	}
	return data
}

// checkReader checks every way of reading rd, a reader over want stored
// under key.
func checkReader(t *testing.T, rd *blob.Reader, key blob.Key, want []byte) {
	t.Helper()
	if rd.Key() != key {
		t.Fatalf("Reader.Key() = %s, want %s", rd.Key(), key)
	}
	size := int64(len(want))
	if rd.Size() != size {
		t.Fatalf("Reader.Size() = %d, want %d", rd.Size(), size)
	}
	got, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("reading the whole value: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes %s, want %d bytes %s", len(got), blob.KeyOf(got), size, blob.KeyOf(want))
	}
	if rd.Size() != size {
		t.Fatalf("Reader.Size() after reading = %d, want %d", rd.Size(), size)
	}

	const span = 16
	for _, off := range []int64{0, 1, size / 2, size - 1, size - span, size, size + 1, size + 1000} {
		if off < 0 {
			continue
		}
		p := make([]byte, span)
		n, err := rd.ReadAt(p, off)
		wantN := min(max(size-off, 0), span)
		if int64(n) != wantN {
			t.Fatalf("ReadAt(%d bytes, off %d) of %d-byte value = %d bytes, want %d", span, off, size, n, wantN)
		}
		if n > 0 && !bytes.Equal(p[:n], want[off:off+int64(n)]) {
			t.Fatalf("ReadAt(%d bytes, off %d) = %x, want %x", span, off, p[:n], want[off:off+int64(n)])
		}
		switch {
		case wantN < span && err != io.EOF:
			t.Fatalf("ReadAt(%d bytes, off %d) of %d-byte value: error %v, want io.EOF", span, off, size, err)
		case wantN == span && err != nil && err != io.EOF:
			t.Fatalf("ReadAt(%d bytes, off %d): %v", span, off, err)
		}
	}

	if size >= 8 {
		seek := func(offset int64, whence int, wantPos int64) {
			t.Helper()
			pos, err := rd.Seek(offset, whence)
			if err != nil || pos != wantPos {
				t.Fatalf("Seek(%d, %d) = %d, %v, want %d, nil", offset, whence, pos, err, wantPos)
			}
		}
		readN := func(n int, wantAt int64) {
			t.Helper()
			p := make([]byte, n)
			if _, err := io.ReadFull(rd, p); err != nil {
				t.Fatalf("reading %d bytes at %d: %v", n, wantAt, err)
			}
			if !bytes.Equal(p, want[wantAt:wantAt+int64(n)]) {
				t.Fatalf("read %x at %d, want %x", p, wantAt, want[wantAt:wantAt+int64(n)])
			}
		}
		seek(0, io.SeekStart, 0)
		readN(3, 0)
		seek(2, io.SeekCurrent, 5)
		readN(1, 5)
		seek(-2, io.SeekEnd, size-2)
		readN(2, size-2)
		seek(size/2, io.SeekStart, size/2)
		readN(int(size-size/2), size/2)
	}
	pos, err := rd.Seek(0, io.SeekEnd)
	if err != nil || pos != size {
		t.Fatalf("Seek(0, io.SeekEnd) = %d, %v, want %d, nil", pos, err, size)
	}
	if n, err := rd.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v, want 0, io.EOF", n, err)
	}
	if _, err := rd.Seek(-1, io.SeekStart); err == nil {
		t.Fatal("Seek(-1, io.SeekStart) succeeded, want an error")
	}
	if err := rd.Close(); err != nil {
		t.Fatalf("Reader.Close: %v", err)
	}
}

func blobDedup(t *testing.T, h Harness) {
	b := setup(t, h)
	value := testValue("dedup", 100)
	key := mustPut(t, b.store, value)
	if again := mustPut(t, b.store, value); again != key {
		t.Fatalf("second Put = %s, want %s", again, key)
	}
	if err := b.store.PutExpect(t.Context(), key, bytes.NewReader(value)); err != nil {
		t.Fatalf("PutExpect of stored content: %v", err)
	}
	if _, err := b.blobs.Put(t.Context(), blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute}); err != nil {
		t.Fatalf("engine Put of stored content: %v", err)
	}
	page := mustList(t, b.store, blob.Key{}, 10)
	if len(page) != 1 || page[0] != (blob.Info{Key: key, Size: 100}) {
		t.Fatalf("List after 4 puts of one value = %v, want one blob %s of 100 bytes", page, key)
	}
	wantValue(t, b.store, key, value)
}

func blobPutExpect(t *testing.T, h Harness) {
	t.Run("RightKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		value := testValue("expect right", 300)
		key := blob.KeyOf(value)
		if err := b.store.PutExpect(t.Context(), key, bytes.NewReader(value)); err != nil {
			t.Fatalf("PutExpect(right key): %v", err)
		}
		wantValue(t, b.store, key, value)
	})
	t.Run("WrongKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		value := testValue("expect wrong", 300)
		claimed := blob.KeyOf(testValue("something else", 300))
		err := b.store.PutExpect(t.Context(), claimed, bytes.NewReader(value))
		wantErr(t, err, steaderr.ErrDigestMismatch, "PutExpect(wrong key)")
		wantHas(t, b.store, claimed, false)
		wantHas(t, b.store, blob.KeyOf(value), false)
		wantNothingStored(t, b.store)
	})
	t.Run("ZeroKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		err := b.store.PutExpect(t.Context(), blob.Key{}, bytes.NewReader([]byte("x")))
		wantErr(t, err, steaderr.ErrInvalidKey, "PutExpect(zero key)")
		wantNothingStored(t, b.store)
	})
}

func blobStat(t *testing.T, h Harness) {
	b := setup(t, h)
	for _, size := range []int{0, 1, 1234} {
		value := testValue(fmt.Sprint("stat", size), size)
		key := mustPut(t, b.store, value)
		want := blob.Info{Key: key, Size: int64(size)}
		info, err := b.store.Stat(t.Context(), key)
		if err != nil || info != want {
			t.Fatalf("Stat(%d-byte blob) = %+v, %v, want %+v, nil", size, info, err, want)
		}
		info, err = b.blobs.Stat(t.Context(), key)
		if err != nil || info != want {
			t.Fatalf("engine Stat(%d-byte blob) = %+v, %v, want %+v, nil", size, info, err, want)
		}
	}
}

func blobHas(t *testing.T, h Harness) {
	b := setup(t, h)
	key := mustPut(t, b.store, []byte("has"))
	wantHas(t, b.store, key, true)
	wantHas(t, b.store, absentKey("has"), false)
	empty := mustPut(t, b.store, nil)
	wantHas(t, b.store, empty, true)
}

func blobAbsent(t *testing.T, h Harness) {
	b := setup(t, h)
	mustPut(t, b.store, []byte("something else is stored"))
	key := absentKey("absent")
	ctx := t.Context()

	_, err := b.store.Get(ctx, key)
	wantErr(t, err, steaderr.ErrNotFound, "Get(absent)")
	_, err = b.store.Stat(ctx, key)
	wantErr(t, err, steaderr.ErrNotFound, "Stat(absent)")
	wantErr(t, b.store.Delete(ctx, key), steaderr.ErrNotFound, "Delete(absent)")

	_, err = b.blobs.Get(ctx, key)
	wantErr(t, err, steaderr.ErrNotFound, "engine Get(absent)")
	_, err = b.blobs.Stat(ctx, key)
	wantErr(t, err, steaderr.ErrNotFound, "engine Stat(absent)")
	wantErr(t, engineDelete(ctx, b.blobs, key, time.Time{}), steaderr.ErrNotFound, "engine Delete(absent)")
	if n := len(mustList(t, b.store, blob.Key{}, 10)); n != 1 {
		t.Fatalf("List after operations on an absent key holds %d blobs, want 1", n)
	}
}

func blobZeroKey(t *testing.T, h Harness) {
	b := setup(t, h)
	mustPut(t, b.store, []byte("something is stored"))
	ctx := t.Context()
	var zero blob.Key

	_, err := b.store.Get(ctx, zero)
	wantErr(t, err, steaderr.ErrInvalidKey, "Get(zero key)")
	_, err = b.store.Stat(ctx, zero)
	wantErr(t, err, steaderr.ErrInvalidKey, "Stat(zero key)")
	has, err := b.store.Has(ctx, zero)
	wantErr(t, err, steaderr.ErrInvalidKey, "Has(zero key)")
	if has {
		t.Fatal("Has(zero key) = true")
	}
	wantErr(t, b.store.Delete(ctx, zero), steaderr.ErrInvalidKey, "Delete(zero key)")
	if n := len(mustList(t, b.store, blob.Key{}, 10)); n != 1 {
		t.Fatalf("List after operations on the zero key holds %d blobs, want 1", n)
	}
}

// endlessReader yields bytes forever and counts them.
type endlessReader struct{ n int64 }

func (r *endlessReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	r.n += int64(len(p))
	return len(p), nil
}

func blobMaxSize(t *testing.T, h Harness) {
	const maxSize = 100
	t.Run("OverMax", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, h, blob.Options{MaxSize: maxSize})
		value := testValue("over max", maxSize+1)
		_, err := b.store.Put(t.Context(), bytes.NewReader(value))
		wantErr(t, err, steaderr.ErrTooLarge, "Put(MaxSize+1 bytes)")
		err = b.store.PutExpect(t.Context(), blob.KeyOf(value), bytes.NewReader(value))
		wantErr(t, err, steaderr.ErrTooLarge, "PutExpect(MaxSize+1 bytes)")
		wantHas(t, b.store, blob.KeyOf(value), false)
		wantNothingStored(t, b.store)
	})
	t.Run("AtMax", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, h, blob.Options{MaxSize: maxSize})
		value := testValue("at max", maxSize)
		wantValue(t, b.store, mustPut(t, b.store, value), value)
	})
	t.Run("EndlessReaderOverMax", func(t *testing.T) {
		t.Parallel()
		b := setupWith(t, h, blob.Options{MaxSize: maxSize})
		r := &endlessReader{}
		_, err := b.store.Put(t.Context(), r)
		wantErr(t, err, steaderr.ErrTooLarge, "Put(endless reader) with MaxSize 100")
		if r.n > maxSize+1 {
			t.Fatalf("blob.Store.Put read %d bytes from the reader with MaxSize %d, want at most MaxSize+1 = %d", r.n, maxSize, maxSize+1)
		}
		wantNothingStored(t, b.store)
	})
	// A value over the inline limit streams in chunks; one that outgrows
	// MaxSize midway is refused after MaxSize+1 bytes, its staged chunks
	// discarded.
	t.Run("EndlessReaderChunked", func(t *testing.T) {
		t.Parallel()
		limit := int64(blob.InlineLimit + 3*blob.DefaultChunkSize/2)
		b := setupWith(t, h, blob.Options{MaxSize: limit})
		r := &endlessReader{}
		_, err := b.store.Put(t.Context(), r)
		wantErr(t, err, steaderr.ErrTooLarge, "Put(endless reader) over the inline limit")
		if r.n > limit+1 {
			t.Fatalf("blob.Store.Put read %d bytes from the reader with MaxSize %d, want at most MaxSize+1", r.n, limit)
		}
		wantNothingStored(t, b.store)
	})
}

// failingReader yields data, then fails with err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func blobReaderError(t *testing.T, h Harness) {
	errBoom := errors.New("enginetest: reader failed")
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"AtOnce", nil},
		{"MidWay", testValue("reader error", 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			_, err := b.store.Put(t.Context(), &failingReader{data: tc.data, err: errBoom})
			wantErr(t, err, errBoom, "Put(failing reader)")
			err = b.store.PutExpect(t.Context(), blob.KeyOf(tc.data), &failingReader{data: tc.data, err: errBoom})
			wantErr(t, err, errBoom, "PutExpect(failing reader)")
			wantHas(t, b.store, blob.KeyOf(tc.data), false)
			wantNothingStored(t, b.store)
		})
	}
}

// cancellingReader yields data and cancels its context in the same Read,
// then reports EOF.
type cancellingReader struct {
	data   []byte
	cancel context.CancelFunc
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	r.cancel()
	return n, nil
}

func blobCancel(t *testing.T, h Harness) {
	value := testValue("cancel", 500)
	key := blob.KeyOf(value)

	// Puts with a cancelled context store nothing.
	t.Run("Put", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, err := b.store.Put(cancelled(t), bytes.NewReader(value))
		wantErr(t, err, context.Canceled, "Put(cancelled ctx)")
		err = b.store.PutExpect(cancelled(t), key, bytes.NewReader(value))
		wantErr(t, err, context.Canceled, "PutExpect(cancelled ctx)")
		wantHas(t, b.store, key, false)
		wantNothingStored(t, b.store)
	})
	t.Run("PutCancelledWhileReading", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, err := b.store.Put(ctx, &cancellingReader{data: value, cancel: cancel})
		wantErr(t, err, context.Canceled, "Put(reader that cancels the context)")
		wantHas(t, b.store, key, false)
		wantNothingStored(t, b.store)
	})
	t.Run("EnginePut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, err := b.blobs.Put(cancelled(t), blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute})
		wantErr(t, err, context.Canceled, "engine Put(cancelled ctx)")
		wantHas(t, b.store, key, false)
		wantNothingStored(t, b.store)
	})

	// A put whose context ends while it runs may or may not take effect,
	// never partially: afterwards each key is absent or whole.
	t.Run("PutCancelledMidStatement", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const puts = 60
		var wg sync.WaitGroup
		failed := make([]bool, puts)
		for i := range puts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				time.AfterFunc(time.Duration(i*50)*time.Microsecond, cancel)
				_, err := b.store.Put(ctx, bytes.NewReader(testValue(fmt.Sprint("mid-statement", i), 1000+i)))
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("Put %d: %v, want success or an error wrapping context.Canceled", i, err)
				}
				failed[i] = err != nil
			}()
		}
		wg.Wait()
		for i := range puts {
			value := testValue(fmt.Sprint("mid-statement", i), 1000+i)
			key := blob.KeyOf(value)
			has, err := b.store.Has(t.Context(), key)
			switch {
			case err != nil:
				t.Fatalf("Has(%s): %v", key, err)
			case has:
				wantValue(t, b.store, key, value) // whole, whatever the put reported
			case !failed[i]:
				t.Fatalf("put %d succeeded but %s is absent", i, key)
			}
		}
	})

	// Reads and deletes with a cancelled context fail; deletes delete
	// nothing.
	t.Run("ReadsAndDeletes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mustPut(t, b.store, value)
		for _, tc := range []struct {
			name string
			call func(ctx context.Context) error
		}{
			{"Get", func(ctx context.Context) error { _, err := b.store.Get(ctx, key); return err }},
			{"Stat", func(ctx context.Context) error { _, err := b.store.Stat(ctx, key); return err }},
			{"Has", func(ctx context.Context) error { _, err := b.store.Has(ctx, key); return err }},
			{"List", func(ctx context.Context) error { _, err := b.store.List(ctx, blob.Key{}, 10); return err }},
			{"All", func(ctx context.Context) error {
				for _, err := range b.store.All(ctx, blob.Key{}) {
					if err != nil {
						return err
					}
				}
				return nil
			}},
			{"Delete", func(ctx context.Context) error { return b.store.Delete(ctx, key) }},
			{"EngineGet", func(ctx context.Context) error { _, err := b.blobs.Get(ctx, key); return err }},
			{"EngineStat", func(ctx context.Context) error { _, err := b.blobs.Stat(ctx, key); return err }},
			{"EngineList", func(ctx context.Context) error {
				return b.blobs.List(ctx, blob.Key{}, 10, func(blob.Info) bool { return true })
			}},
			{"EngineDelete", func(ctx context.Context) error { return engineDelete(ctx, b.blobs, key, time.Time{}) }},
		} {
			wantErr(t, tc.call(cancelled(t)), context.Canceled, tc.name+" with a cancelled ctx")
		}
		wantValue(t, b.store, key, value)
	})
}

func blobIsolation(t *testing.T, h Harness) {
	value := testValue("isolation", 64)
	key := blob.KeyOf(value)
	t.Run("GetReturnsCopies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		mustPut(t, b.store, value)
		got, err := b.blobs.Get(t.Context(), key)
		if err != nil {
			t.Fatalf("engine Get: %v", err)
		}
		for i := range got.Value {
			got.Value[i] ^= 0xff
		}
		if got.Chunks != 0 {
			c, err := b.blobs.ReadChunk(t.Context(), got.Chunks, 0)
			if err != nil {
				t.Fatalf("engine ReadChunk: %v", err)
			}
			for i := range c.Data {
				c.Data[i] ^= 0xff
			}
		}
		if again := engineValue(t, b.blobs, key); !bytes.Equal(again, value) {
			t.Fatal("mutating the bytes one engine Get returned changed what a later Get returns")
		}
		read := mustGet(t, b.store, key)
		clear(read)
		wantValue(t, b.store, key, value)
	})
	t.Run("PutDoesNotRetain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		buf := bytes.Clone(value)
		if _, err := b.blobs.Put(t.Context(), blob.PutParams{Key: key, Value: buf, Owner: "test", TTL: time.Minute}); err != nil {
			t.Fatalf("engine Put: %v", err)
		}
		for i := range buf {
			buf[i] = 0xff
		}
		if got := engineValue(t, b.blobs, key); !bytes.Equal(got, value) {
			t.Fatal("engine Put retained the caller's buffer: mutating it after Put returned changed the stored value")
		}
	})
	// The store reuses its read buffers between puts; each stored value
	// must survive the next put.
	t.Run("SuccessivePuts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		values := make([][]byte, 10)
		for i := range values {
			values[i] = testValue(fmt.Sprint("successive", i), 1000+i)
			mustPut(t, b.store, values[i])
		}
		for _, v := range values {
			wantValue(t, b.store, blob.KeyOf(v), v)
		}
	})
}

func blobList(t *testing.T, h Harness) {
	const n = 20
	b := setup(t, h)
	keys := sortedKeys(mustPutN(t, b.store, "list", n))
	sizes := make(map[blob.Key]int64, n)
	for i := range n {
		sizes[blob.KeyOf(testValue(fmt.Sprint("list", i), i))] = int64(i)
	}
	// after returns the stored keys strictly greater than k.
	after := func(k blob.Key) []blob.Key {
		var out []blob.Key
		for _, key := range keys {
			if key.Compare(k) > 0 {
				out = append(out, key)
			}
		}
		return out
	}

	t.Run("Order", func(t *testing.T) {
		t.Parallel()
		page := mustList(t, b.store, blob.Key{}, 100)
		wantAscending(t, "List(from start)", page)
		wantKeys(t, "List(from start)", page, keys)
		for _, info := range page {
			if info.Size != sizes[info.Key] {
				t.Fatalf("List: %s has size %d, want %d", info.Key, info.Size, sizes[info.Key])
			}
		}
	})
	t.Run("After", func(t *testing.T) {
		t.Parallel()
		for _, i := range []int{0, 1, n / 2, n - 2} {
			wantKeys(t, fmt.Sprintf("List(after key %d of %d)", i, n), mustList(t, b.store, keys[i], 100), keys[i+1:])
		}
	})
	t.Run("AfterLast", func(t *testing.T) {
		t.Parallel()
		wantKeys(t, "List(after the last key)", mustList(t, b.store, keys[n-1], 100), nil)
	})
	t.Run("AfterAbsent", func(t *testing.T) {
		t.Parallel()
		var lowest, highest [32]byte
		for i := range highest {
			highest[i] = 0xff
		}
		cursors := []blob.Key{keyOfDigest(t, lowest), keyOfDigest(t, highest), absentKey("after 1"), absentKey("after 2")}
		// Neighbours of a stored key: just below it (so it is listed) and
		// just above it (so it is not).
		for _, i := range []int{0, n / 2, n - 1} {
			d := keys[i].Digest()
			if d[31] > 0 {
				below := d
				below[31]--
				cursors = append(cursors, keyOfDigest(t, below))
			}
			if d[31] < 0xff {
				above := d
				above[31]++
				cursors = append(cursors, keyOfDigest(t, above))
			}
		}
		for _, c := range cursors {
			if _, stored := sizes[c]; stored {
				continue
			}
			wantKeys(t, fmt.Sprintf("List(after absent key %s)", c), mustList(t, b.store, c, 100), after(c))
			wantKeys(t, fmt.Sprintf("All(after absent key %s)", c), mustAll(t, b.store, c), after(c))
		}
	})
	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		wantKeys(t, "List(limit 1)", mustList(t, b.store, blob.Key{}, 1), keys[:1])
		wantKeys(t, "List(limit 5)", mustList(t, b.store, blob.Key{}, 5), keys[:5])
		wantKeys(t, "List(after key 4, limit 5)", mustList(t, b.store, keys[4], 5), keys[5:10])
		wantKeys(t, "List(after key n-3, limit 5)", mustList(t, b.store, keys[n-3], 5), keys[n-2:])
		wantKeys(t, "List(limit n)", mustList(t, b.store, blob.Key{}, n), keys)
	})
	t.Run("InvalidLimit", func(t *testing.T) {
		t.Parallel()
		for _, limit := range []int{0, -1} {
			_, err := b.store.List(t.Context(), blob.Key{}, limit)
			wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("List(limit %d)", limit))
		}
	})
	t.Run("Paging", func(t *testing.T) {
		t.Parallel()
		const total, pageSize = 53, 7
		b := setup(t, h)
		want := sortedKeys(mustPutN(t, b.store, "paging", total))
		var got []blob.Info
		pages := 0
		var cursor blob.Key
		for {
			page := mustList(t, b.store, cursor, pageSize)
			if len(page) == 0 {
				break
			}
			pages++
			if len(page) > pageSize {
				t.Fatalf("page %d has %d blobs, limit %d", pages, len(page), pageSize)
			}
			if len(page) < pageSize && len(got)+len(page) != total {
				t.Fatalf("page %d has %d blobs before the end, want %d", pages, len(page), pageSize)
			}
			if page[0].Key.Compare(cursor) <= 0 {
				t.Fatalf("page %d starts at %s, not after its cursor %s", pages, page[0].Key, cursor)
			}
			got = append(got, page...)
			cursor = page[len(page)-1].Key
			if pages > total {
				t.Fatalf("paging did not end after %d pages", pages)
			}
		}
		wantAscending(t, "pages", got)
		wantKeys(t, "every page, in order", got, want)
		if wantPages := (total + pageSize - 1) / pageSize; pages != wantPages {
			t.Fatalf("paged in %d pages, want %d", pages, wantPages)
		}
	})
}

func blobAll(t *testing.T, h Harness) {
	const n = 15
	t.Run("Everything", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		wantKeys(t, "All(empty store)", mustAll(t, b.store, blob.Key{}), nil)
		keys := sortedKeys(mustPutN(t, b.store, "all", n))
		got := mustAll(t, b.store, blob.Key{})
		wantAscending(t, "All(from start)", got)
		wantKeys(t, "All(from start)", got, keys)
		wantKeys(t, "All(after key 6)", mustAll(t, b.store, keys[6]), keys[7:])
		wantKeys(t, "All(after the last key)", mustAll(t, b.store, keys[n-1]), nil)
	})
	// Breaking out of All must release whatever the engine holds (a
	// transaction, a connection, a lock): break more times than a
	// connection pool holds, then the engine must still work.
	t.Run("EarlyBreak", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		keys := sortedKeys(mustPutN(t, b.store, "all break", n))
		for round := range 20 {
			var got []blob.Info
			for info, err := range b.store.All(t.Context(), blob.Key{}) {
				if err != nil {
					t.Fatalf("All, round %d: %v", round, err)
				}
				got = append(got, info)
				if len(got) == 3 {
					break
				}
			}
			wantKeys(t, fmt.Sprintf("All, round %d, broken after 3", round), got, keys[:3])
		}
		value := testValue("after the breaks", 10)
		key := mustPut(t, b.store, value)
		wantValue(t, b.store, key, value)
		b.expirePins()
		if err := b.store.Delete(t.Context(), key); err != nil {
			t.Fatalf("Delete after breaking out of All: %v", err)
		}
		wantKeys(t, "List after breaking out of All", mustList(t, b.store, blob.Key{}, 100), keys)
	})
	// All walks in pages and holds nothing while the loop body runs, so the
	// body may use the store. Every blob stored for the whole walk is
	// yielded exactly once, in order; blobs put or deleted meanwhile may or
	// may not be.
	for _, pageSize := range []int{1, 3, n, blob.DefaultPageSize} {
		t.Run(fmt.Sprintf("WritesDuringIteration/page%d", pageSize), func(t *testing.T) {
			t.Parallel()
			b := setupWith(t, h, blob.Options{PageSize: pageSize})
			keys := sortedKeys(mustPutN(t, b.store, "all walk", n))
			b.expirePins()
			deleted := map[blob.Key]bool{keys[n-1]: true, keys[n/2]: true}
			var got []blob.Info
			added := map[blob.Key]bool{}
			for info, err := range b.store.All(t.Context(), blob.Key{}) {
				if err != nil {
					t.Fatalf("All: %v", err)
				}
				got = append(got, info)
				if !deleted[info.Key] {
					mustGet(t, b.store, info.Key)
				}
				if len(got) == 1 {
					for i := range 5 {
						added[mustPut(t, b.store, testValue(fmt.Sprint("added while walking", i), 10+i))] = true
					}
					for key := range deleted {
						if err := b.store.Delete(t.Context(), key); err != nil {
							t.Fatalf("Delete while walking: %v", err)
						}
					}
				}
			}
			wantAscending(t, "All with puts and deletes in its loop body", got)
			yielded := map[blob.Key]bool{}
			for _, info := range got {
				if !slices.Contains(keys, info.Key) && !added[info.Key] {
					t.Fatalf("All yielded %s, which was never stored", info.Key)
				}
				yielded[info.Key] = true
			}
			for _, key := range keys {
				if !deleted[key] && !yielded[key] {
					t.Fatalf("All skipped %s, stored for the whole walk", key)
				}
			}
			var left []blob.Key
			for _, key := range keys {
				if !deleted[key] {
					left = append(left, key)
				}
			}
			for key := range added {
				left = append(left, key)
			}
			wantKeys(t, "List after", mustList(t, b.store, blob.Key{}, 100), sortedKeys(left))
		})
	}
}

// blobSeamList covers the engine's List directly: it yields at most limit
// blobs, refuses a limit below 1, and stops when yield returns false.
func blobSeamList(t *testing.T, h Harness) {
	const n = 10
	b := setup(t, h)
	keys := sortedKeys(mustPutN(t, b.store, "seam list", n))
	list := func(after blob.Key, limit, stopAfter int) []blob.Info {
		t.Helper()
		var got []blob.Info
		err := b.blobs.List(t.Context(), after, limit, func(info blob.Info) bool {
			got = append(got, info)
			if stopAfter > 0 && len(got) > stopAfter {
				t.Errorf("engine List(limit %d) called yield again after it returned false", limit)
				return false
			}
			return len(got) != stopAfter
		})
		if err != nil {
			t.Fatalf("engine List(after %q, limit %d, stop after %d): %v", after, limit, stopAfter, err)
		}
		return got
	}
	for _, limit := range []int{0, -1} {
		err := b.blobs.List(t.Context(), blob.Key{}, limit, func(info blob.Info) bool {
			t.Errorf("engine List(limit %d) yielded %s", limit, info.Key)
			return true
		})
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("engine List(limit %d)", limit))
	}
	wantKeys(t, "engine List(limit n)", list(blob.Key{}, n, 0), keys)
	wantKeys(t, "engine List(limit n+1)", list(blob.Key{}, n+1, 0), keys)
	wantKeys(t, "engine List(limit 3)", list(blob.Key{}, 3, 0), keys[:3])
	wantKeys(t, "engine List(after key 2, limit 4)", list(keys[2], 4, 0), keys[3:7])
	wantKeys(t, "engine List(after key 5)", list(keys[5], n, 0), keys[6:])
	wantKeys(t, "engine List(yield false at 2)", list(blob.Key{}, n, 2), keys[:2])
	wantKeys(t, "engine List(limit 5, yield false at 1)", list(blob.Key{}, 5, 1), keys[:1])
	for _, info := range list(blob.Key{}, n, 0) {
		if want := blob.KeyOf(testValue(fmt.Sprint("seam list", info.Size), int(info.Size))); info.Key != want {
			t.Fatalf("engine List: %s has size %d, which is not its value's size", info.Key, info.Size)
		}
	}
}

// blobListDuringPuts lists while other goroutines put: every listing is
// ordered, holds every blob stored before it began and nothing that was
// never put.
func blobListDuringPuts(t *testing.T, h Harness) {
	const base, writers, perWriter = 20, 4, 25
	b := setup(t, h)
	before := mustPutN(t, b.store, "before", base)
	known := make(map[blob.Key]int64)
	for i, key := range before {
		known[key] = int64(i)
	}
	values := make([][]byte, writers*perWriter)
	for i := range values {
		values[i] = testValue(fmt.Sprint("during", i), 100+i)
		known[blob.KeyOf(values[i])] = int64(len(values[i]))
	}

	check := func(what string, got []blob.Info) {
		t.Helper()
		wantAscending(t, what, got)
		seen := make(map[blob.Key]bool, len(got))
		for _, info := range got {
			size, ok := known[info.Key]
			if !ok {
				t.Fatalf("%s: listed %s, which was never put", what, info.Key)
			}
			if info.Size != size {
				t.Fatalf("%s: %s has size %d, want %d", what, info.Key, info.Size, size)
			}
			seen[info.Key] = true
		}
		for _, key := range before {
			if !seen[key] {
				t.Fatalf("%s: %s, stored before the listing began, is missing", what, key)
			}
		}
	}

	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait() // a failed check must not end the test under running writers
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				v := values[w*perWriter+i]
				if _, err := b.store.Put(t.Context(), bytes.NewReader(v)); err != nil {
					t.Errorf("concurrent Put: %v", err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	for listing := 0; ; listing++ {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		check(fmt.Sprintf("List %d", listing), mustList(t, b.store, blob.Key{}, 1000))
		check(fmt.Sprintf("All %d", listing), mustAll(t, b.store, blob.Key{}))
		if finished {
			break
		}
	}
	if got := len(mustList(t, b.store, blob.Key{}, 1000)); got != base+writers*perWriter {
		t.Fatalf("after the puts, List holds %d blobs, want %d", got, base+writers*perWriter)
	}
}

func blobConcurrent(t *testing.T, h Harness) {
	const goroutines = 32
	t.Run("SameContent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		value := testValue("same content", 2000)
		want := blob.KeyOf(value)
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				key, err := b.store.Put(t.Context(), bytes.NewReader(value))
				if err != nil {
					t.Errorf("concurrent Put of one value: %v", err)
				} else if key != want {
					t.Errorf("concurrent Put of one value = %s, want %s", key, want)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		page := mustList(t, b.store, blob.Key{}, 100)
		if len(page) != 1 || page[0] != (blob.Info{Key: want, Size: 2000}) {
			t.Fatalf("List after %d concurrent puts of one value = %v, want one blob %s of 2000 bytes", goroutines, page, want)
		}
		wantValue(t, b.store, want, value)
	})
	t.Run("DistinctContent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		values := make([][]byte, goroutines)
		for i := range values {
			values[i] = testValue(fmt.Sprint("distinct", i), 64+i)
		}
		var wg sync.WaitGroup
		for _, v := range values {
			wg.Go(func() {
				if _, err := b.store.Put(t.Context(), bytes.NewReader(v)); err != nil {
					t.Errorf("concurrent Put: %v", err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		for _, v := range values {
			wantValue(t, b.store, blob.KeyOf(v), v)
		}
		if got := len(mustList(t, b.store, blob.Key{}, 100)); got != goroutines {
			t.Fatalf("List after %d concurrent puts of distinct values holds %d blobs", goroutines, got)
		}
	})
}

func blobDelete(t *testing.T, h Harness) {
	t.Run("Removes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		keep := testValue("keep", 10)
		keepKey := mustPut(t, b.store, keep)
		value := testValue("delete", 10)
		key := mustPut(t, b.store, value)
		wantErr(t, b.store.Delete(t.Context(), key), steaderr.ErrProtected, "Delete while the put's pin lasts")
		wantValue(t, b.store, key, value)
		b.expirePins()
		if err := b.store.Delete(t.Context(), key); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		wantHas(t, b.store, key, false)
		_, err := b.store.Get(t.Context(), key)
		wantErr(t, err, steaderr.ErrNotFound, "Get after Delete")
		_, err = b.store.Stat(t.Context(), key)
		wantErr(t, err, steaderr.ErrNotFound, "Stat after Delete")
		wantKeys(t, "List after Delete", mustList(t, b.store, blob.Key{}, 10), []blob.Key{keepKey})
		wantValue(t, b.store, keepKey, keep)
	})
	t.Run("Twice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		key := mustPut(t, b.store, testValue("delete twice", 10))
		b.expirePins()
		if err := b.store.Delete(t.Context(), key); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		wantErr(t, b.store.Delete(t.Context(), key), steaderr.ErrNotFound, "second Delete")
		wantErr(t, engineDelete(t.Context(), b.blobs, key, time.Time{}), steaderr.ErrNotFound, "engine Delete after Delete")
	})
	t.Run("RePut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		value := testValue("re-put", 10)
		key := mustPut(t, b.store, value)
		b.expirePins()
		if err := b.store.Delete(t.Context(), key); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		mustPut(t, b.store, value)
		wantValue(t, b.store, key, value)
		wantKeys(t, "List after Delete and re-Put", mustList(t, b.store, blob.Key{}, 10), []blob.Key{key})
	})
	t.Run("Engine", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		key := mustPut(t, b.store, testValue("engine delete", 10))
		b.expirePins()
		if err := engineDelete(t.Context(), b.blobs, key, b.clock.Now()); err != nil {
			t.Fatalf("engine Delete: %v", err)
		}
		_, err := b.blobs.Stat(t.Context(), key)
		wantErr(t, err, steaderr.ErrNotFound, "engine Stat after engine Delete")
		wantNothingStored(t, b.store)
	})
}

// blobPutCreated checks that a put tells whether it stored its blob: the
// first put of a key does, a re-put does not, of concurrent puts of one
// key exactly one does, and the first put after the blob's deletion does
// again; inline and chunked, with children, through the store and the seam.
func blobPutCreated(t *testing.T, h Harness) {
	const racers = 16
	ctx := func(t *testing.T) context.Context { return t.Context() }
	for _, tc := range []struct {
		name   string
		inline int
	}{{"Inline", 0}, {"Chunked", tinyInline}} {
		t.Run("Store"+tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h)
			opts := func(owner string) blob.Options {
				return blob.Options{Owner: owner, Now: b.clock.Now, InlineLimit: tc.inline, ChunkSize: tinyChunk}
			}
			store := blob.NewStore(b.blobs, opts("first"))
			child := testValue("created child "+tc.name, 3*tinyChunk+5)
			value := testValue("created "+tc.name, 2*tinyChunk+7)
			put := func(s *blob.Store, value []byte, children ...blob.Key) bool {
				t.Helper()
				res, err := s.PutWith(ctx(t), bytes.NewReader(value), blob.PutOptions{Children: children})
				if err != nil {
					t.Fatalf("PutWith(%d bytes): %v", len(value), err)
				}
				if res.Key != blob.KeyOf(value) {
					t.Fatalf("PutWith(%d bytes) = key %s, want %s", len(value), res.Key, blob.KeyOf(value))
				}
				return res.Created
			}
			if !put(store, child) {
				t.Fatal("first put of a key: Created false, want true")
			}
			if put(store, child) {
				t.Fatal("re-put through the same store: Created true, want false")
			}
			if put(blob.NewStore(b.blobs, opts("second")), child) {
				t.Fatal("re-put through another store: Created true, want false")
			}
			var created sync.WaitGroup
			var mu sync.Mutex
			n := 0
			for i := range racers {
				created.Go(func() {
					if put(blob.NewStore(b.blobs, opts(fmt.Sprint("racer", i))), value, blob.KeyOf(child)) {
						mu.Lock()
						n++
						mu.Unlock()
					}
				})
			}
			created.Wait()
			if n != 1 {
				t.Fatalf("%d concurrent puts of one key with a child: %d told Created, want exactly 1", racers, n)
			}
			// A parent deleted leaves its child to the collector.
			b.expirePins()
			for _, v := range [][]byte{value, child} {
				if err := store.Delete(ctx(t), blob.KeyOf(v)); err != nil {
					t.Fatalf("Delete(%s) after the pins expired: %v", blob.KeyOf(v), err)
				}
			}
			if !put(store, child) {
				t.Fatal("put after the key was deleted: Created false, want true")
			}
		})
	}
	t.Run("Seam", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		child := testValue("seam created child", 100)
		parent := testValue("seam created parent", 200)
		enginePut := func(owner string, value []byte, children ...blob.Key) (bool, error) {
			return b.blobs.Put(ctx(t), blob.PutParams{Key: blob.KeyOf(value), Value: value, Children: children, Owner: owner, TTL: time.Minute})
		}
		race := func(what string, put func(i int) (bool, error)) {
			t.Helper()
			told := make([]bool, racers)
			errs := make([]error, racers)
			var wg sync.WaitGroup
			for i := range racers {
				wg.Go(func() { told[i], errs[i] = put(i) })
			}
			wg.Wait()
			n := 0
			for i, err := range errs {
				if err != nil {
					t.Fatalf("%s, put %d: %v", what, i, err)
				}
				if told[i] {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d concurrent %s: %d told created, want exactly 1", racers, what, n)
			}
		}
		race("engine puts of one key", func(i int) (bool, error) { return enginePut(fmt.Sprint("o", i), child) })
		race("engine puts of one parent", func(i int) (bool, error) { return enginePut(fmt.Sprint("o", i), parent, blob.KeyOf(child)) })
		if created, err := enginePut("late", parent, blob.KeyOf(child)); err != nil || created {
			t.Fatalf("engine re-put of a parent = %v, %v; want false, nil", created, err)
		}
		if created, err := enginePut("late", parent); err != nil || created {
			t.Fatalf("engine re-put of a parent without its children = %v, %v; want false, nil", created, err)
		}
		// A failed put creates nothing, and tells so.
		orphan := testValue("seam created orphan", 50)
		if created, err := enginePut("late", orphan, absentKey("seam created")); !errors.Is(err, steaderr.ErrNotFound) || created {
			t.Fatalf("engine put naming an absent child = %v, %v; want false and ErrNotFound", created, err)
		}
		chunked := testValue("seam created chunks", 3000)
		key := blob.KeyOf(chunked)
		sets := make([]blob.ChunkSet, racers)
		for i := range sets {
			sets[i] = stageChunks(t, b.blobs, chunked, 1000)
		}
		race("publishes of one key", func(i int) (bool, error) {
			return b.blobs.Put(ctx(t), blob.PutParams{Key: key, Chunks: sets[i], Size: int64(len(chunked)), Owner: fmt.Sprint("p", i), TTL: time.Minute})
		})
		far := time.Now().Add(time.Hour)
		for _, k := range []blob.Key{key, blob.KeyOf(parent)} {
			if err := engineDelete(ctx(t), b.blobs, k, far); err != nil {
				t.Fatalf("engine Delete(%s) past the pins: %v", k, err)
			}
		}
		if created, err := enginePut("again", parent, blob.KeyOf(child)); err != nil || !created {
			t.Fatalf("engine put after the parent's delete = %v, %v; want true, nil", created, err)
		}
		if created, err := b.blobs.Put(ctx(t), blob.PutParams{Key: key, Chunks: stageChunks(t, b.blobs, chunked, 1000), Size: int64(len(chunked)), Owner: "again", TTL: time.Minute}); err != nil || !created {
			t.Fatalf("publish after the key's delete = %v, %v; want true, nil", created, err)
		}
	})
}
