package blob

import (
	"context"
	"io"
	"time"
)

// Streamer is the part of a Backend that keeps large values as objects
// in a bucket, its bytes tier (docs/decisions/0027-bytes-tier.md). On an
// engine whose Tiered answers true, an Upload appends the bytes past the
// Store's inline limit as object chunks (WriteValue), each one object, so
// that a value's bytes are in the bucket and its rows name them; an upload
// of one object chunk is published as that object (Stored.Object). Reads
// of either go through ReadValue. An engine without a tier answers Tiered
// false, refuses WriteValue and is never asked to ReadValue; one whose
// Get can name objects it does not write (the remote engine, whose server
// keeps the tier) answers ReadValue whatever Tiered says.
type Streamer interface {
	// Tiered reports whether the engine's uploads go to a bytes tier:
	// false, and the Store stores chunks as without one.
	Tiered() bool
	// WriteValue appends p.Value to the upload p.Set as one object chunk
	// starting at byte p.Off, which must be the upload's size. It commits
	// a fresh object's name under (p.Set, p.Off) before the first byte is
	// written (replacing a name a writer that never finished left there:
	// the last writer at an offset wins, and the one it replaced fails
	// with an error wrapping steaderr.ErrConflict), streams p.Value into
	// that object, renewing the upload's lease to p.Lease from p.Now as
	// it goes, and, once the object is completely and durably written,
	// commits the chunk's size, the upload's new size, state p.State()
	// and lease in one transaction, and returns the bytes written. An upload gone is an
	// error wrapping steaderr.ErrLost, an offset other than its size one
	// wrapping steaderr.ErrConflict; an error reading p.Value comes back
	// wrapped, as an error of the source's. On error the upload's size and
	// state are unchanged, and no object is left but one a chunk row
	// names, which AbortUpload or ReapUploads deletes.
	WriteValue(ctx context.Context, p WriteValueParams) (int64, error)
	// ReadValue returns a reader over p.N bytes of the object p.Object,
	// holding the p.Size bytes of key p.Key's value from byte p.At on (a
	// whole value's object: p.At 0 and p.Size the value's size), from
	// byte p.Off of the object (p.N < 0: to its end). It checks the
	// object's size before returning: an object of another size than
	// p.Size (cut short, or replaced, behind the store's back) is an error
	// wrapping steaderr.ErrCorrupt, so that no read of it begins. An
	// object gone (its blob was deleted, or the bucket lost it) is an
	// error wrapping steaderr.ErrNotFound.
	ReadValue(ctx context.Context, p ReadValueParams) (io.ReadCloser, error)
}

// WriteValueParams are the arguments of Streamer.WriteValue.
type WriteValueParams struct {
	Set   ChunkSet
	Off   int64
	Value io.Reader
	Lease time.Duration
	// Now returns the instant each renewal of the lease, and the commit's,
	// runs from, a whole microsecond; nil, or the zero instant: the
	// engine's clock (as BeginUploadParams.Now and WriteChunkParams.Now).
	Now func() time.Time
	// State returns the upload's state once Value is read to its end; it
	// is called once, after the last read of Value, at most
	// MaxUploadState bytes.
	State func() []byte
}

// ReadValueParams are the arguments of Streamer.ReadValue.
type ReadValueParams struct {
	Key    Key
	Object string
	// At is the object's first byte in the value, and Size how many bytes
	// the object holds.
	At, Size int64
	Off, N   int64
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
