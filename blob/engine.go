package blob

import "context"

// Engine is what a storage engine does for blobs: mechanics only. The
// portable Store validates every argument, hashes values and enforces size
// limits before calling it, so an engine may trust its inputs. Every method
// returns steaderr.ErrClosed once the engine is closed.
type Engine interface {
	// Put stores value under key unless key is already stored: the first
	// writer wins and a repeat is a successful no-op, never an overwrite.
	// value is only valid until Put returns. A failed or cancelled Put
	// leaves nothing behind.
	Put(ctx context.Context, key Key, value []byte) error
	// Get returns a copy of the value stored under key, or an error
	// wrapping steaderr.ErrNotFound.
	Get(ctx context.Context, key Key) ([]byte, error)
	// Stat returns key's size without reading its value, or an error
	// wrapping steaderr.ErrNotFound.
	Stat(ctx context.Context, key Key) (Info, error)
	// List calls yield for each stored blob whose key is greater than after
	// (the zero Key: every blob), in ascending key order, at most limit
	// times, all from one consistent snapshot. limit is at least 1: longer
	// listings are walked a page at a time by Store.All, and an engine may
	// refuse a limit below 1 with steaderr.ErrInvalidArgument. It stops when
	// yield returns false. yield may run while the engine holds a connection
	// or a snapshot; it must not call back into the engine.
	List(ctx context.Context, after Key, limit int, yield func(Info) bool) error
	// Delete removes key, or returns an error wrapping steaderr.ErrNotFound.
	Delete(ctx context.Context, key Key) error
}

// Info describes a stored blob.
type Info struct {
	Key  Key
	Size int64
}
