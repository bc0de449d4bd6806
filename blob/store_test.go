package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/steaderr"
)

// TestPutHashesAsItReads puts values through readers that return them in
// pieces, one after another through the same pooled hash: each key is the
// digest of the whole value, and io.Copy (WriteTo) reads back what is left
// after a first Read.
func TestPutHashesAsItReads(t *testing.T) {
	t.Parallel()
	eng := memory.New()
	t.Cleanup(func() { eng.Close() })
	s := blob.NewStore(eng.Blobs(), blob.Options{})
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, size := range []int{0, 1, 4095, 64<<10 + 1, blob.InlineLimit} {
		value := make([]byte, size)
		rand.Read(value)
		for name, wrap := range readers {
			key, err := s.Put(t.Context(), wrap(bytes.NewReader(value)))
			if err != nil || key != blob.KeyOf(value) {
				t.Fatalf("Put of %d bytes read %s = %v, %v; want %v", size, name, key, err, blob.KeyOf(value))
			}
		}
		r, err := s.Get(t.Context(), blob.KeyOf(value))
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if _, err := r.Read(make([]byte, min(size, 1))); err != nil && size > 0 {
			t.Fatal(err)
		}
		if n, err := io.Copy(&got, r); err != nil || n != int64(max(size-1, 0)) || !bytes.Equal(got.Bytes(), value[min(size, 1):]) {
			t.Fatalf("io.Copy of the rest of a %d-byte blob = %d, %v; want the value after its first byte", size, n, err)
		}
	}
}

// TestPutReadError: a reader failing midway stores nothing.
func TestPutReadError(t *testing.T) {
	t.Parallel()
	eng := memory.New()
	t.Cleanup(func() { eng.Close() })
	s := blob.NewStore(eng.Blobs(), blob.Options{})
	value := bytes.Repeat([]byte("x"), 10000)
	if _, err := s.Put(t.Context(), iotest.TimeoutReader(iotest.HalfReader(bytes.NewReader(value)))); !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("Put through a failing reader = %v, want its error", err)
	}
	if ok, err := s.Has(t.Context(), blob.KeyOf(value)); ok || err != nil {
		t.Fatalf("Has after a failed put = %v, %v; want false", ok, err)
	}
	for _, k := range []blob.Key{blob.KeyOf(value[:5000]), blob.KeyOf(nil)} {
		if _, err := s.Stat(t.Context(), k); !errors.Is(err, steaderr.ErrNotFound) {
			t.Fatalf("Stat of a prefix after a failed put = %v, want ErrNotFound", err)
		}
	}
}

// TestCloseEndsGuards: a guard still held when the store closes stops
// renewing at once and reports the loss.
func TestCloseEndsGuards(t *testing.T) {
	eng := memory.New()
	defer eng.Close()
	s := blob.NewStore(eng.Blobs(), blob.Options{})
	key, err := s.Put(t.Context(), strings.NewReader("guarded"))
	if err != nil {
		t.Fatal(err)
	}
	guard, err := s.Pin(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	select {
	case <-guard.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("a guard kept renewing after Close")
	}
	if err := guard.Release(t.Context()); !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("Release after Close = %v, want ErrLost", err)
	}
}

// untouchedEngine is a blob engine whose chunk reads and puts fail the
// test: what it is given must be refused before the engine is called.
type untouchedEngine struct {
	blob.Backend
	t *testing.T
}

func (u untouchedEngine) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
	u.t.Errorf("ReadChunk(%d, %d) called", set, off)
	return blob.Chunk{}, steaderr.ErrNotFound
}

func (u untouchedEngine) Put(ctx context.Context, p blob.PutParams) (bool, error) {
	u.t.Errorf("Put(%+v) called", p)
	return false, nil
}

// TestCommitRefusesBadPins checks that an upload's Commit refuses a pin
// the engines may not be handed (an invalid owner, a TTL or instant that
// is not a whole positive microsecond) before it calls the engine, and
// leaves the upload to be committed rightly.
func TestCommitRefusesBadPins(t *testing.T) {
	t.Parallel()
	eng := memory.New()
	t.Cleanup(func() { eng.Close() })
	s := blob.NewStore(untouchedEngine{Backend: eng.Blobs(), t: t}, blob.Options{})
	u, err := s.BeginUpload(t.Context(), blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ok := blob.CommitOptions{Owner: "publisher", TTL: time.Minute}
	for _, c := range []struct {
		name string
		edit func(*blob.CommitOptions)
		want error
	}{
		{"owner with a control character", func(p *blob.CommitOptions) { p.Owner = "a\nb" }, steaderr.ErrInvalidName},
		{"owner too long", func(p *blob.CommitOptions) { p.Owner = strings.Repeat("o", 256) }, steaderr.ErrInvalidName},
		{"zero TTL", func(p *blob.CommitOptions) { p.TTL = 0 }, steaderr.ErrInvalidArgument},
		{"negative TTL", func(p *blob.CommitOptions) { p.TTL = -time.Second }, steaderr.ErrInvalidArgument},
		{"TTL of a nanosecond", func(p *blob.CommitOptions) { p.TTL = time.Nanosecond }, steaderr.ErrInvalidArgument},
		{"TTL not whole microseconds", func(p *blob.CommitOptions) { p.TTL = time.Second + time.Nanosecond }, steaderr.ErrInvalidArgument},
		{"instant not a whole microsecond", func(p *blob.CommitOptions) { p.Now = time.Unix(1, 1) }, steaderr.ErrInvalidArgument},
	} {
		p := ok
		c.edit(&p)
		if _, err := u.Commit(t.Context(), p); !errors.Is(err, c.want) {
			t.Errorf("%s: Commit = %v, want an error wrapping %v", c.name, err, c.want)
		}
	}
	if size := u.Size(); size != 0 {
		t.Fatalf("Size after refused commits = %d, want 0", size)
	}
	if _, err := s.ResumeUpload(t.Context(), u.ID(), blob.UploadOptions{}); err != nil {
		t.Fatalf("ResumeUpload after refused commits: %v", err)
	}
}

// TestFailedPutMessage: a chunked put whose write and then abort both
// fail says both on one line, the put's error first, and stays matchable
// as the write's error only.
func TestFailedPutMessage(t *testing.T) {
	t.Parallel()
	eng := faultengine.New(memory.New(), faultengine.Func(func(op faultengine.Op) error {
		switch op {
		case faultengine.BlobWriteChunk:
			return steaderr.ErrUnavailable
		case faultengine.BlobAbortUpload:
			return steaderr.ErrClosed
		}
		return nil
	}))
	t.Cleanup(func() { eng.Close() })
	s := blob.NewStore(eng.Blobs(), blob.Options{InlineLimit: 4, ChunkSize: 4})
	_, err := s.Put(t.Context(), strings.NewReader("more than one chunk"))
	if !errors.Is(err, steaderr.ErrUnavailable) || errors.Is(err, steaderr.ErrClosed) {
		t.Fatalf("Put = %v, want the write's ErrUnavailable (and not the abort's error)", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "stead: unavailable; discarding the staged upload failed too (the upload lease reaps it): stead: closed") {
		t.Fatalf("Put = %q, want both errors on one line", msg)
	}
}
