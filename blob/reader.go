package blob

import (
	"bytes"
	"io"
)

// Reader reads one blob's value. It is an io.ReadSeekCloser, an
// io.ReaderAt and an io.WriterTo (so io.Copy needs no buffer); Size reports the whole value's length whatever has been
// read. A Reader is not safe for concurrent Read and Seek; ReadAt is.
type Reader struct {
	key Key
	r   *bytes.Reader
}

var (
	_ io.ReadSeekCloser = (*Reader)(nil)
	_ io.ReaderAt       = (*Reader)(nil)
	_ io.WriterTo       = (*Reader)(nil)
)

func newReader(key Key, value []byte) *Reader {
	return &Reader{key: key, r: bytes.NewReader(value)}
}

// Key returns the key of the blob being read.
func (r *Reader) Key() Key { return r.key }

// Size returns the blob's size in bytes.
func (r *Reader) Size() int64 { return r.r.Size() }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) { return r.r.Read(p) }

// WriteTo implements io.WriterTo: it writes the rest of the value to w.
func (r *Reader) WriteTo(w io.Writer) (int64, error) { return r.r.WriteTo(w) }

// ReadAt implements io.ReaderAt.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) { return r.r.ReadAt(p, off) }

// Seek implements io.Seeker.
func (r *Reader) Seek(offset int64, whence int) (int64, error) { return r.r.Seek(offset, whence) }

// Close releases the reader. It never fails.
func (r *Reader) Close() error { return nil }
