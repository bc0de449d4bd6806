package blob

import "context"

// Engine is what a storage engine does for blobs: mechanics only. The
// portable Store validates every argument, hashes values and enforces size
// limits before calling it, so an engine may trust its inputs. Every method
// returns steaderr.ErrClosed once the engine is closed.
type Engine interface {
	// Put stores value under key unless key is already stored: the first
	// writer wins and a repeat is a successful no-op, never an overwrite.
	// value is only valid until Put returns. An error means the put may or
	// may not have taken effect, never partially: key is then either absent
	// or stored whole, and retrying is safe. A context already ended when
	// Put is called stores nothing.
	Put(ctx context.Context, key Key, value []byte) error
	// Get returns a copy of the value stored under key, or an error
	// wrapping steaderr.ErrNotFound.
	Get(ctx context.Context, key Key) ([]byte, error)
	// Stat returns key's size without reading its value, or an error
	// wrapping steaderr.ErrNotFound.
	Stat(ctx context.Context, key Key) (Info, error)
	// List calls yield for each stored blob whose key is greater than after
	// (the zero Key: every blob), in ascending key order, at most limit
	// times (limit <= 0: no limit), all from one consistent snapshot. It
	// stops when yield returns false. Memory use must not grow with the
	// number of blobs listed.
	List(ctx context.Context, after Key, limit int, yield func(Info) bool) error
	// Delete removes key, or returns an error wrapping steaderr.ErrNotFound.
	Delete(ctx context.Context, key Key) error
}

// Info describes a stored blob.
type Info struct {
	Key  Key
	Size int64
}
