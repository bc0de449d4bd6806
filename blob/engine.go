package blob

import (
	"context"
	"time"
)

// Engine is what a storage engine does for blobs: mechanics only. The
// portable Store validates every argument, hashes values and enforces size
// limits before calling it, so an engine may trust its inputs. Every method
// returns steaderr.ErrClosed once the engine is closed.
//
// A value is stored in one of two forms: inline, whole in its blob row, or
// as a chunk set, written chunk by chunk under an upload and then published
// under its key (docs/decisions/0011-large-blobs.md).
type Engine interface {
	// Put stores value inline under key unless key is already stored: the
	// first writer wins and a repeat is a successful no-op, never an
	// overwrite. value is only valid until Put returns. A failed or
	// cancelled Put leaves nothing behind.
	Put(ctx context.Context, key Key, value []byte) error
	// Get returns the stored form of key's value: its size and either the
	// inline value (a copy) or its chunk set. An absent key is an error
	// wrapping steaderr.ErrNotFound.
	Get(ctx context.Context, key Key) (Stored, error)
	// Stat returns key's size without reading its value, or an error
	// wrapping steaderr.ErrNotFound.
	Stat(ctx context.Context, key Key) (Info, error)
	// List calls yield for each stored blob whose key is greater than after
	// (the zero Key: every blob), in ascending key order, at most limit
	// times (limit <= 0: no limit), all from one consistent snapshot. It
	// stops when yield returns false. Memory use must not grow with the
	// number of blobs listed.
	List(ctx context.Context, after Key, limit int, yield func(Info) bool) error
	// Delete removes key and its chunks, or returns an error wrapping
	// steaderr.ErrNotFound.
	Delete(ctx context.Context, key Key) error

	// BeginUpload draws a fresh chunk set id for an upload. It stores
	// nothing an abort would have to undo.
	BeginUpload(ctx context.Context) (ChunkSet, error)
	// WriteChunk stores data as the chunk starting at byte off of the
	// upload's value, in one short transaction. The first chunk (off 0)
	// starts the upload with a lease of the given length; each later one
	// renews it, and once it lapses ReapUploads may discard the upload.
	// data is only valid until WriteChunk returns. A later chunk of an
	// upload already published, aborted or reaped is an error wrapping
	// steaderr.ErrLost.
	WriteChunk(ctx context.Context, set ChunkSet, off int64, data []byte, lease time.Duration) error
	// Publish ends the upload atomically: key becomes visible with size
	// bytes read from the chunk set, or, when key is already stored, the
	// staged chunks are discarded (first writer wins). An upload already
	// reaped is an error wrapping steaderr.ErrLost and publishes nothing.
	Publish(ctx context.Context, set ChunkSet, key Key, size int64) error
	// AbortUpload discards an unpublished upload and its chunks; an upload
	// already gone is not an error.
	AbortUpload(ctx context.Context, set ChunkSet) error
	// ReapUploads discards every upload whose lease has lapsed, with its
	// chunks, and reports how many it discarded.
	ReapUploads(ctx context.Context) (int, error)
	// ReadChunk returns the published chunk of set that holds byte off:
	// its first byte's offset and a copy of its data. A chunk set no longer
	// stored (its blob was deleted) is an error wrapping
	// steaderr.ErrNotFound.
	ReadChunk(ctx context.Context, set ChunkSet, off int64) (start int64, data []byte, err error)
}

// ChunkSet identifies the chunks of one chunked value, first staged under
// an upload, then published. Engines never reuse an id, so a reader of a
// deleted value finds nothing rather than another value's bytes.
type ChunkSet int64

// Stored is the stored form of one value.
type Stored struct {
	Size int64
	// Value is the whole value when it is stored inline.
	Value []byte
	// Chunks is the value's chunk set, or 0 when it is stored inline.
	Chunks ChunkSet
}

// Info describes a stored blob.
type Info struct {
	Key  Key
	Size int64
}
