package blob

import (
	"context"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/steadkit/stead/steaderr"
)

// Streamer is the part of an Backend that keeps large values as objects
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
// yields.
func (s *Store) putObject(ctx context.Context, want Key, children []Key, r io.Reader, h hash.Hash) (key Key, err error) {
	set, err := s.eng.BeginUpload(ctx, BeginUploadParams{Lease: s.lease, Now: s.pins.engineNow()})
	if err != nil {
		return Key{}, err
	}
	defer s.abortUpload(ctx, set, &err)
	src := &limitedSource{r: r, max: s.maxSize}
	size, err := s.eng.WriteValue(ctx, WriteValueParams{Set: set, Value: src, Lease: s.lease})
	if src.err != nil {
		return Key{}, src.err
	}
	if err != nil {
		return Key{}, err
	}
	return s.publishStaged(ctx, h, want, children, set, size)
}

// limitedSource reads a put's source for the bytes tier, failing once it
// has read more than max bytes, and keeps the error that ended it (a read
// error or ErrTooLarge), so that the put reports it rather than the
// bucket write it broke off.
type limitedSource struct {
	r    io.Reader
	max  int64
	read int64
	err  error
}

func (l *limitedSource) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.r.Read(p[:min(int64(len(p)), l.max-l.read+1)])
	l.read += int64(n)
	switch {
	case l.read > l.max:
		l.err = fmt.Errorf("%w: more than %d bytes", steaderr.ErrTooLarge, l.max)
		return 0, l.err
	case err != nil && err != io.EOF:
		l.err = fmt.Errorf("read content: %w", err)
		return n, l.err
	}
	return n, err
}
