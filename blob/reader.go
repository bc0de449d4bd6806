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
// value's bytes. A value kept in a bytes tier is read from its object: Read
// and WriteTo through one ranged read kept open while reads go on in order,
// each ReadAt through a ranged read of just its bytes. A Reader is not safe
// for concurrent Read and Seek; ReadAt is.
type Reader struct {
	key  Key
	size int64
	// inline is the whole value when it is stored inline.
	inline []byte
	ctx    context.Context
	eng    Backend
	set    ChunkSet
	// object is the bucket object holding the whole value, read through
	// the engine's ReadValue: one ranged read kept open for reads in order
	// (stream, at the value's byte streamAt), a ranged read of its own for
	// each ReadAt. cur is the object chunk of a chunk set last read, whose
	// ranged read stream is when streamObj names it.
	object    objRef
	cur       objRef
	stream    io.ReadCloser
	streamObj string
	streamAt  int64

	mu sync.Mutex // guards chunk, buffered, chunkBuf, cur and the stream
	// chunk is the data chunk last fetched (its bytes never change), and
	// buffered the object bytes last read into chunkBuf, which the next
	// object read overwrites: only sequential reads use it.
	chunk, buffered struct {
		start int64
		data  []byte
	}
	chunkBuf []byte

	pos    int64
	verify bool
	// hash, when verifying, has been fed the value's bytes [0, hashed):
	// reads in order from the start are checked at EOF.
	hash   hash.Hash
	hashed int64
	err    error // a verification failure, returned by every later read
	// mismatch is what stored bytes that do not match are: ErrCorrupt for
	// a stored value, ErrDigestMismatch for an upload's staged bytes read
	// before their publish (the writer's, not the store's, fault).
	mismatch error
}

var (
	_ io.ReadSeekCloser = (*Reader)(nil)
	_ io.ReaderAt       = (*Reader)(nil)
	_ io.WriterTo       = (*Reader)(nil)
)

func newReader(ctx context.Context, eng Backend, key Key, st Stored, verify bool) *Reader {
	r := &Reader{key: key, size: st.Size, inline: st.Value, ctx: ctx, eng: eng, set: st.Chunks, mismatch: steaderr.ErrCorrupt}
	if st.Object != "" {
		r.object = objRef{name: st.Object, size: st.Size}
	}
	if verify && !st.Inline() {
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
// with an error wrapping ErrCorrupt (an ErrDigestMismatch) when the stored
// bytes no longer hash to the key.
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
			r.err = fmt.Errorf("blob read %s: %w: stored content hashes to %s", r.key, r.mismatch, got)
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
	if r.set == 0 && r.object.name == "" {
		return r.inline[off:], nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := &r.buffered; b.data != nil && off >= b.start && off < b.start+int64(len(b.data)) {
		return b.data[off-b.start:], nil
	}
	o, data, err := r.locate(off)
	if err != nil || o.name == "" {
		return data, err
	}
	return r.objectSpan(o, off)
}

// locate returns the object holding byte off, or the rest of the data
// chunk holding it (a slice of bytes that never change), fetching the
// chunk when it is not the one last fetched. r.mu is held.
func (r *Reader) locate(off int64) (objRef, []byte, error) {
	if r.object.name != "" {
		return r.object, nil, nil
	}
	c := &r.chunk
	if c.data != nil && off >= c.start && off < c.start+int64(len(c.data)) {
		return objRef{}, c.data[off-c.start:], nil
	}
	if r.cur.holds(off) {
		return r.cur, nil, nil
	}
	ch, err := r.eng.ReadChunk(r.ctx, r.set, off)
	if err != nil {
		if errors.Is(err, steaderr.ErrNotFound) {
			return objRef{}, nil, fmt.Errorf("blob read %s at %d: deleted while being read: %w", r.key, off, err)
		}
		return objRef{}, nil, fmt.Errorf("blob read %s at %d: %w", r.key, off, err)
	}
	size := int64(len(ch.Data))
	if ch.Object != "" {
		size = ch.Size
	}
	if size <= 0 || off < ch.Start || off >= ch.Start+size || ch.Start+size > r.size {
		return objRef{}, nil, fmt.Errorf("blob read %s at %d: %w: stored chunk [%d, %d) does not fit a %d-byte value", r.key, off, r.mismatch, ch.Start, ch.Start+size, r.size)
	}
	if ch.Object != "" {
		r.cur = objRef{name: ch.Object, at: ch.Start, size: size}
		return r.cur, nil, nil
	}
	c.start, c.data = ch.Start, ch.Data
	return objRef{}, c.data[off-c.start:], nil
}

// objRef is a bucket object holding the value's bytes [at, at+size).
type objRef struct {
	name     string
	at, size int64
}

func (o objRef) holds(off int64) bool {
	return o.name != "" && off >= o.at && off < o.at+o.size
}

// objectBuf is how much of an object one span holds.
const objectBuf = 256 << 10

// objectSpan reads o's bytes from the value's byte off into the span
// buffer, continuing the open ranged read when it stands at off and
// opening one from off to o's end otherwise. r.mu is held.
func (r *Reader) objectSpan(o objRef, off int64) ([]byte, error) {
	c := &r.buffered
	c.data = nil
	if r.stream != nil && (r.streamObj != o.name || r.streamAt != off) {
		_ = r.stream.Close()
		r.stream = nil
	}
	if r.stream == nil {
		rc, err := r.openObject(o, off, -1)
		if err != nil {
			return nil, err
		}
		r.stream, r.streamObj, r.streamAt = rc, o.name, off
	}
	if cap(r.chunkBuf) == 0 {
		r.chunkBuf = make([]byte, objectBuf)
	}
	end := o.at + o.size
	buf := r.chunkBuf[:min(int64(len(r.chunkBuf)), end-off)]
	n, err := io.ReadFull(r.stream, buf)
	r.streamAt += int64(n)
	if err == nil && r.streamAt == end {
		// The whole object is read: the ranged read is not kept open.
		err = r.stream.Close()
		r.stream = nil
	}
	if err != nil {
		if r.stream != nil {
			_ = r.stream.Close()
			r.stream = nil
		}
		return nil, r.objectErr(o, off+int64(n), err)
	}
	c.start, c.data = off, buf[:n]
	return c.data, nil
}

// openObject opens a ranged read of n bytes of o from the value's byte
// off.
func (r *Reader) openObject(o objRef, off, n int64) (io.ReadCloser, error) {
	rc, err := r.eng.ReadValue(r.ctx, ReadValueParams{Key: r.key, Object: o.name, At: o.at, Size: o.size, Off: off - o.at, N: n})
	if err != nil {
		return nil, r.objectErr(o, off, err)
	}
	return rc, nil
}

// objectErr is the error of a failed read of o at the value's byte off.
// An object not found while its blob still names it (or its chunk set)
// is missing from the bucket (removed behind the store's back): the
// stored bytes are lost, ErrCorrupt.
func (r *Reader) objectErr(o objRef, off int64, err error) error {
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return fmt.Errorf("blob read %s at %d: %w: object %s ends before its %d bytes", r.key, off, steaderr.ErrCorrupt, o.name, o.size)
	case errors.Is(err, steaderr.ErrNotFound):
		if st, gerr := r.eng.Get(r.ctx, r.key); gerr == nil && (st.Object == o.name && o.name == r.object.name || r.set != 0 && st.Chunks == r.set) {
			return fmt.Errorf("blob read %s at %d: %w: its object %s is missing from the bucket", r.key, off, steaderr.ErrCorrupt, o.name)
		}
		return fmt.Errorf("blob read %s at %d: deleted while being read: %w", r.key, off, err)
	}
	return fmt.Errorf("blob read %s at %d: %w", r.key, off, err)
}

// ReadAt implements io.ReaderAt, fetching only the chunks that hold
// [off, off+len(p)) (of an object value: one ranged read of those bytes).
// It does not verify.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("blob read %s: %w: negative offset %d", r.key, steaderr.ErrInvalidArgument, off)
	}
	n := 0
	for n < len(p) {
		if off >= r.size {
			return n, io.EOF
		}
		var o objRef
		var data []byte
		var err error
		if r.set == 0 && r.object.name == "" {
			data = r.inline[off:]
		} else {
			r.mu.Lock()
			o, data, err = r.locate(off)
			r.mu.Unlock()
		}
		if err != nil {
			return n, err
		}
		var k int
		if o.name != "" {
			k, err = r.readObjectAt(o, p[n:min(int64(len(p)), int64(n)+o.at+o.size-off)], off)
			if err != nil {
				return n + k, err
			}
		} else {
			k = copy(p[n:], data)
		}
		n += k
		off += int64(k)
	}
	return n, nil
}

// readObjectAt reads len(p) bytes of o, all within it, from the value's
// byte off with a ranged read of its own, so that concurrent ReadAt calls
// share neither a ranged read nor a buffer.
func (r *Reader) readObjectAt(o objRef, p []byte, off int64) (int, error) {
	rc, err := r.openObject(o, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p)
	if err != nil {
		return n, r.objectErr(o, off+int64(n), err)
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
	r.chunk.data, r.buffered.data = nil, nil
	if r.stream != nil {
		_ = r.stream.Close()
		r.stream = nil
	}
	r.mu.Unlock()
	return nil
}
