// Package steaderr defines the sentinel errors that every stead layer and
// engine returns. Check them with errors.Is; errors from a driver stay in
// the chain, reachable with errors.As. The root package re-exports them.
package steaderr

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound: the blob, record or lock does not exist.
	ErrNotFound = errors.New("stead: not found")
	// ErrConflict: a compare-and-swap lost: the stored version is not the
	// one the caller read, a create met an existing id, or an update met an
	// absent one.
	ErrConflict = errors.New("stead: conflict")
	// ErrInvalidKey: a blob key is not "sha256:" followed by 64 lowercase
	// hex digits.
	ErrInvalidKey = errors.New("stead: invalid key")
	// ErrInvalidName: a name (lock, owner, group, tenant, schema) is empty,
	// too long or holds bytes outside its allowed set.
	ErrInvalidName = errors.New("stead: invalid name")
	// ErrInvalidArgument: an argument other than a key or a name is out of
	// range, such as a non-positive TTL or a negative limit.
	ErrInvalidArgument = errors.New("stead: invalid argument")
	// ErrDigestMismatch: content does not hash to the key it was claimed or
	// stored under.
	ErrDigestMismatch = errors.New("stead: digest mismatch")
	// ErrTooLarge: a value exceeds the configured maximum size.
	ErrTooLarge = errors.New("stead: too large")
	// ErrProtected: a delete was refused because something protects the
	// blob: a live pin, a ref, a stored blob referencing it, or a liveness
	// source (blob.Store.Delete).
	ErrProtected = errors.New("stead: protected")
	// ErrUnknownGroup: a record names a group that was never registered.
	ErrUnknownGroup = errors.New("stead: unknown group")
	// ErrWrongGroup: an operation scoped to one group met a record of another.
	ErrWrongGroup = errors.New("stead: wrong group")
	// ErrLeased: another owner holds a live lease.
	ErrLeased = errors.New("stead: leased by another owner")
	// ErrLost: a held lease (a lock kept by Hold) lapsed, or was taken or
	// released by someone else, before its holder released it.
	ErrLost = errors.New("stead: lease lost")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("stead: closed")
	// ErrSchema: the database schema is missing, or newer than this binary.
	ErrSchema = errors.New("stead: schema")
	// ErrUnavailable: the database cannot serve now — the connection was
	// refused, reset or dropped, the server is shutting down or starting
	// up, or (SQLite) another process held the database past the busy
	// timeout. Retrying later may succeed. A write that failed with it
	// after its statement reached the server may or may not have taken
	// effect: read back before assuming either.
	ErrUnavailable = errors.New("stead: unavailable")
	// ErrChildrenFixed: a put of stored content declared children the
	// content was not stored with; a blob's children are fixed by the put
	// that stored it. It wraps ErrConflict.
	ErrChildrenFixed = fmt.Errorf("%w: a blob's children are fixed by the put that stored it", ErrConflict)
	// ErrCorrupt: a read found a stored value's bytes lost or changed —
	// they no longer hash to its key, or its bucket object is missing or
	// of another size. The store is at fault, not the caller. It wraps
	// ErrDigestMismatch.
	ErrCorrupt error = corrupt{}
)

// corrupt is ErrCorrupt: its own words, wrapping ErrDigestMismatch.
type corrupt struct{}

func (corrupt) Error() string { return "stead: corrupt" }
func (corrupt) Unwrap() error { return ErrDigestMismatch }
