package blob

import (
	"context"
	"hash"
	"io"
	"sync"
	"time"
)

// Streamer is the part of a Backend that keeps large values as objects
// in a bucket, its bytes tier (docs/decisions/0027-bytes-tier.md). A Store
// over an engine whose Tiered answers true streams every value over its
// inline limit into one object under an upload (WriteValue), then
// publishes it with Put naming the upload, as a chunked value is; the
// engine's Get then answers Stored.Object, read with ReadValue. An engine
// without a tier answers Tiered false, refuses WriteValue and is never
// asked to ReadValue; one whose Get can name objects it does not write
// (the remote engine, whose server keeps the tier) answers ReadValue
// whatever Tiered says.
type Streamer interface {
	// Tiered reports whether the engine's puts go to a bytes tier: false,
	// and the Store stores chunks as without one.
	Tiered() bool
	// WriteValue records a fresh object name for the upload p.Set (before
	// any byte is written), streams p.Value into that object, renewing the
	// upload's lease to p.Lease as it goes, and returns the object's size
	// once it is completely and durably written. Put then publishes it
	// (the upload's object must hold exactly PutParams.Size bytes). An
	// upload that already has a chunk or an object, or is gone, is an
	// error wrapping steaderr.ErrLost or ErrConflict; an error reading
	// p.Value comes back wrapped, as an error of the source's. On error
	// no object is left but the one the upload names, which AbortUpload
	// or ReapUploads deletes.
	WriteValue(ctx context.Context, p WriteValueParams) (int64, error)
	// ReadValue returns a reader over p.N bytes of the object p.Object,
	// key p.Key's value of p.Size bytes, from byte p.Off (p.N < 0: to its
	// end). It checks the object's size before returning: an object of
	// another size than p.Size (cut short, or replaced, behind the store's
	// back) is an error wrapping steaderr.ErrCorrupt, so that no read of
	// it begins. An object gone (its blob was deleted, or the bucket lost
	// it) is an error wrapping steaderr.ErrNotFound.
	ReadValue(ctx context.Context, p ReadValueParams) (io.ReadCloser, error)
}

// WriteValueParams are the arguments of Streamer.WriteValue.
type WriteValueParams struct {
	Set   ChunkSet
	Value io.Reader
	Lease time.Duration
}

// ReadValueParams are the arguments of Streamer.ReadValue.
type ReadValueParams struct {
	Key    Key
	Object string
	// Size is the value's size, which the object must hold.
	Size   int64
	Off, N int64
}

// putObject streams r's content into one object of the engine's bytes
// tier under an upload and publishes it, pinned, once written whole and
// hashed, as putChunked does with chunks. h has been fed every byte r
// yields. r is read (so hashed) on a goroutine of its own a chunk ahead of
// the bucket's write (readChunks), so that hashing runs beside the write,
// not in series with it.
func (s *Store) putObject(ctx context.Context, want Key, children []Key, r io.Reader, h hash.Hash) (key Key, err error) {
	set, err := s.eng.BeginUpload(ctx, BeginUploadParams{Lease: s.lease, Now: s.pins.engineNow()})
	if err != nil {
		return Key{}, err
	}
	defer s.abortUpload(ctx, set, &err)
	chunks, stopReading := s.readChunks(r)
	stop := sync.OnceFunc(stopReading)
	defer stop()
	src := &chunkSource{chunks: chunks}
	size, err := s.eng.WriteValue(ctx, WriteValueParams{Set: set, Value: src, Lease: s.lease})
	if src.err != nil {
		return Key{}, src.err
	}
	if err != nil {
		return Key{}, err
	}
	stop() // h has seen every byte read once the reading goroutine is done
	return s.publishStaged(ctx, h, want, children, set, size)
}

// chunkSource reads the chunks readChunks sends as one stream, handing
// each buffer back once read, and keeps the error that ended it (a read
// error or ErrTooLarge), so that the put reports it rather than the
// bucket write it broke off.
type chunkSource struct {
	chunks <-chan chunk
	cur    chunk
	rest   []byte
	err    error
}

func (c *chunkSource) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for len(c.rest) == 0 {
		if c.cur.release != nil {
			c.cur.release()
			c.cur = chunk{}
		}
		next, ok := <-c.chunks
		if !ok {
			return 0, io.EOF
		}
		if next.err != nil {
			c.err = next.err
			return 0, c.err
		}
		c.cur, c.rest = next, next.data
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}
