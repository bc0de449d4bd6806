package blob

import (
	"context"
	"time"
)

// Engine is what a storage engine does for blobs: mechanics only. The
// portable Store validates every argument, hashes values and enforces size
// limits before calling it, so an engine may trust its inputs: keys are
// valid, owners are valid names, TTLs are positive whole microseconds and
// Now, when set, is a whole microsecond. Every method returns
// steaderr.ErrClosed once the engine is closed.
//
// A pin protects a key from deletion: the row (key, owner) with an expiry.
// It is live while now < expiry and expired from its expiry instant on.
// While a live pin or a liveness source references a key, no delete of it
// (Delete, or a garbage-collection sweep) commits.
type Engine interface {
	// Put stores p.Value under p.Key unless the key is already stored (the
	// first writer wins and a repeat is a successful no-op, never an
	// overwrite), and pins the key for (p.Owner) until at least p.Now +
	// p.TTL, in the same commit that publishes the blob (a pin's expiry is
	// only ever extended by a put). p.Value is only valid until Put returns.
	// An error means the put may or may not have taken effect, never
	// partially: blob and pin are then both absent or both stored, and
	// retrying is safe. A context already ended when Put is called stores
	// nothing.
	Put(ctx context.Context, p PutParams) error
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
	// Delete removes p.Key after arbitrating it like a garbage-collection
	// delete: it fails with an error wrapping steaderr.ErrProtected while a
	// live pin or a liveness source references the key, and with
	// steaderr.ErrNotFound when the key is absent.
	Delete(ctx context.Context, p DeleteParams) error
	// Pin pins the stored key p.Key for p.Owner until at least p.Now +
	// p.TTL, taking the same row lock a put does, so it cannot interleave
	// with an arbitration of the key: either the pin commits first and the
	// key is kept, or the key is deleted first and Pin fails with an error
	// wrapping steaderr.ErrNotFound.
	Pin(ctx context.Context, p PinParams) error
	// RenewPin extends the live pin (p.Key, p.Owner) to at least p.Now +
	// p.TTL and reports true; an expired or absent pin is left alone (never
	// resurrected) and RenewPin reports false.
	RenewPin(ctx context.Context, p PinParams) (bool, error)
	// Unpin removes the pin (p.Key, p.Owner), if any.
	Unpin(ctx context.Context, p UnpinParams) error
}

// PutParams are the arguments of Engine.Put.
type PutParams struct {
	Key   Key
	Value []byte
	// Owner and TTL name the pin the put takes.
	Owner string
	TTL   time.Duration
	// Now is the instant the pin's TTL runs from. Zero means the engine's
	// clock: the database's now() on PostgreSQL, the system clock
	// elsewhere.
	Now time.Time
}

// PinParams are the arguments of Engine.Pin and Engine.RenewPin.
type PinParams struct {
	Key   Key
	Owner string
	TTL   time.Duration
	// Now is the instant the pin is judged at and its TTL runs from; zero:
	// the engine's clock.
	Now time.Time
}

// UnpinParams are the arguments of Engine.Unpin.
type UnpinParams struct {
	Key   Key
	Owner string
}

// DeleteParams are the arguments of Engine.Delete.
type DeleteParams struct {
	Key Key
	// Now is the instant pins are judged at; zero: the engine's clock.
	Now time.Time
}

// Info describes a stored blob.
type Info struct {
	Key  Key
	Size int64
}
