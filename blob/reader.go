package blob

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/steadkit/stead/steaderr"
)

// Reader reads one blob's value. It is an io.ReadSeekCloser, an io.ReaderAt
// and an io.WriterTo (so io.Copy needs no buffer); Size reports the whole
// value's length without reading it. A chunked value is fetched one chunk
// at a time, only the chunks a read needs, each in its own short statement:
// a Reader holds no connection between calls. Reads use the context given
// to Get. A value deleted while it is being read fails the next chunk fetch
// with an error wrapping ErrNotFound; a Reader never returns another
// value's bytes. A Reader is not safe for concurrent Read and Seek; ReadAt
// is.
type Reader struct {
	key  Key
	size int64
	// inline is the whole value when it is stored inline.
	inline []byte
	ctx    context.Context
	eng    Engine
	set    ChunkSet

	mu    sync.Mutex // guards chunk
	chunk struct {
		start int64
		data  []byte
	}

	pos    int64
	verify bool
	// hash, when verifying, has been fed the value's bytes [0, hashed):
	// reads in order from the start are checked at EOF.
	hash   hash.Hash
	hashed int64
	err    error // a verification failure, returned by every later read
}

var (
	_ io.ReadSeekCloser = (*Reader)(nil)
	_ io.ReaderAt       = (*Reader)(nil)
	_ io.WriterTo       = (*Reader)(nil)
)

func newReader(ctx context.Context, eng Engine, key Key, st Stored, verify bool) *Reader {
	r := &Reader{key: key, size: st.Size, inline: st.Value, ctx: ctx, eng: eng, set: st.Chunks}
	if verify && st.Chunks != 0 {
		r.verify, r.hash = true, sha256.New()
	}
	return r
}

// Key returns the key of the blob being read.
func (r *Reader) Key() Key { return r.key }

// Size returns the blob's size in bytes.
func (r *Reader) Size() int64 { return r.size }

// Read implements io.Reader. With verification on (Options.VerifyReads),
// reading a chunked value through to its end from offset 0 fails at EOF
// with an error wrapping ErrDigestMismatch when the stored bytes no longer
// hash to the key.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.pos >= r.size {
		return 0, r.atEOF()
	}
	n, err := r.ReadAt(p, r.pos)
	r.advance(p[:n])
	if err == io.EOF {
		err = nil
		if r.pos >= r.size {
			err = r.atEOF()
		}
	}
	return n, err
}

// advance moves the position past p, just read from it, feeding the
// verification hash when p continues what it has seen.
func (r *Reader) advance(p []byte) {
	if r.hash != nil && r.pos == r.hashed {
		r.hash.Write(p)
		r.hashed += int64(len(p))
	}
	r.pos += int64(len(p))
}

// atEOF is what a read at the end returns: io.EOF, or the verification
// failure when the whole value was hashed and does not match its key.
func (r *Reader) atEOF() error {
	if r.hash != nil && r.hashed == r.size {
		var got Key
		got.valid = true
		r.hash.Sum(got.digest[:0])
		r.hash = nil
		if got != r.key {
			r.err = fmt.Errorf("blob read %s: %w: stored content hashes to %s", r.key, steaderr.ErrDigestMismatch, got)
			return r.err
		}
	}
	return io.EOF
}

// WriteTo implements io.WriterTo: it writes the rest of the value to w, one
// chunk at a time, verifying as Read does.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if r.err != nil {
			return total, r.err
		}
		if r.pos >= r.size {
			if err := r.atEOF(); err != io.EOF {
				return total, err
			}
			return total, nil
		}
		p, err := r.span(r.pos)
		if err != nil {
			return total, err
		}
		n, err := w.Write(p)
		r.advance(p[:n])
		total += int64(n)
		if err != nil {
			return total, err
		}
		if n < len(p) {
			return total, io.ErrShortWrite
		}
	}
}

// span returns the stored bytes from off to the end of the chunk holding
// off (the rest of the value, when it is inline). It is only valid until
// the next call.
func (r *Reader) span(off int64) ([]byte, error) {
	if r.set == 0 {
		return r.inline[off:], nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.chunk
	if c.data == nil || off < c.start || off >= c.start+int64(len(c.data)) {
		start, data, err := r.eng.ReadChunk(r.ctx, r.set, off)
		if err != nil {
			c.data = nil
			if errors.Is(err, steaderr.ErrNotFound) {
				return nil, fmt.Errorf("blob read %s at %d: deleted while being read: %w", r.key, off, err)
			}
			return nil, fmt.Errorf("blob read %s at %d: %w", r.key, off, err)
		}
		if len(data) == 0 || off < start || off >= start+int64(len(data)) || start+int64(len(data)) > r.size {
			c.data = nil
			return nil, fmt.Errorf("blob read %s at %d: %w: stored chunk [%d, %d) does not fit a %d-byte value", r.key, off, steaderr.ErrDigestMismatch, start, start+int64(len(data)), r.size)
		}
		c.start, c.data = start, data
	}
	return c.data[off-c.start:], nil
}

// ReadAt implements io.ReaderAt, fetching only the chunks that hold
// [off, off+len(p)). It does not verify.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("blob read %s: %w: negative offset %d", r.key, steaderr.ErrInvalidArgument, off)
	}
	n := 0
	for n < len(p) {
		if off >= r.size {
			return n, io.EOF
		}
		span, err := r.span(off)
		if err != nil {
			return n, err
		}
		k := copy(p[n:], span)
		n += k
		off += int64(k)
	}
	return n, nil
}

// Seek implements io.Seeker. Seeking to the start restarts verification;
// after a seek elsewhere, reads are not verified.
func (r *Reader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.pos + offset
	case io.SeekEnd:
		abs = r.size + offset
	default:
		return 0, fmt.Errorf("blob seek %s: %w: whence %d", r.key, steaderr.ErrInvalidArgument, whence)
	}
	if abs < 0 {
		return 0, fmt.Errorf("blob seek %s: %w: negative position %d", r.key, steaderr.ErrInvalidArgument, abs)
	}
	if abs == 0 && r.verify && r.err == nil && (r.hash == nil || r.hashed != 0) {
		r.hash, r.hashed = sha256.New(), 0
	}
	r.pos = abs
	return abs, nil
}

// Close releases the reader. It never fails.
func (r *Reader) Close() error {
	r.mu.Lock()
	r.chunk.data = nil
	r.mu.Unlock()
	return nil
}
