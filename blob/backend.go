package blob

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/steadkit/stead/steaderr"
)

// Backend is what a storage engine does for blobs: mechanics only. The
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
//
// A value is stored in one of three forms: inline, whole in its blob row;
// as a chunk set, appended chunk by chunk under an upload and then
// published under its key by Put (docs/decisions/0011-large-blobs.md); or,
// on an engine with a bytes tier (Streamer), as one bucket object: an
// upload whose one chunk is an object is published as that object
// (docs/decisions/0027-bytes-tier.md). On such an engine a chunk set's
// chunks may be objects too (docs/decisions/0045-durable-uploads.md).
// Streamer is part of the seam, so that an engine wrapping another passes
// the tier on by embedding it (docs/decisions/0036-objects-over-http.md).
type Backend interface {
	Streamer

	// Put stores p.Value under p.Key unless the key is already stored (the
	// first writer wins and a repeat is a successful no-op, never an
	// overwrite), and pins the key for (p.Owner) until at least p.Now +
	// p.TTL, in the same commit that publishes the blob (a pin's expiry is
	// only ever extended by a put). p.Value is only valid until Put returns.
	// An error means the put may or may not have taken effect, never
	// partially: blob and pin are then both absent or both stored, and
	// retrying is safe. A context already ended when Put is called stores
	// nothing.
	//
	// With p.Children set, the value references those blobs: Put locks
	// their rows as a pin does, in the same commit, and records an edge
	// from p.Key to each, so that they are kept while p.Key is stored (a
	// blob's edges are deleted with it). A child not stored fails the put
	// with an error wrapping steaderr.ErrNotFound naming it, and nothing is
	// stored or pinned. A blob's children are fixed by the put that stored
	// it: a put of a stored key declaring a child it was not stored with
	// fails with an error wrapping steaderr.ErrChildrenFixed and changes nothing, so
	// an edge always points at a blob older than its parent and the graph
	// has no cycle.
	//
	// With p.Chunks set, Put publishes that upload's chunks as the value
	// (p.Size bytes, p.Value unused) and ends the upload in the same
	// commit; when the key is already stored the staged chunks are
	// discarded instead. An upload already ended (published, aborted or
	// reaped) is an error wrapping steaderr.ErrLost, and staged chunks that
	// do not cover [0, p.Size) exactly, each byte once, an error wrapping
	// steaderr.ErrInvalidArgument: then nothing is published, pinned or
	// discarded (the upload stays, to be aborted); an upload whose size is
	// not p.Size (another writer appended since) an error wrapping
	// steaderr.ErrConflict, the upload left as it is. An upload whose chunks
	// are one object chunk is published as that object (Stored.Object),
	// its chunk row gone; chunks discarded take their objects with them
	// once the commit is done.
	//
	// Put reports created when this call stored the blob, false when the
	// key was stored already: of concurrent puts of one key, at most one
	// reports true (and again after a delete), and exactly one unless a
	// group-committed batch that stored the key was cut short by another
	// caller's cancellation and run again, when none may.
	Put(ctx context.Context, p PutParams) (created bool, err error)
	// Get returns the stored form of key's value: its size and either the
	// inline value (a copy) or its chunk set. An absent key is an error
	// wrapping steaderr.ErrNotFound.
	Get(ctx context.Context, key Key) (Stored, error)
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
	// Delete arbitrates p.Keys (sorted, distinct, at most MaxDeleteBatch)
	// like a garbage-collection sweep, in one transaction, waiting for a
	// row a put or pin holds instead of skipping it, and removes (with
	// their chunks) those no live pin or liveness source protects. It
	// returns one Verdict per key, in p.Keys' order: Deleted, Protected or
	// Absent. An error means nothing was deleted.
	Delete(ctx context.Context, p DeleteParams) ([]Verdict, error)
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

	// BeginUpload starts an upload under a fresh chunk set id, drawn at
	// random (so that an id tells nothing of another upload's), owned by
	// p.Owner, with the state p.State, leased until p.Now + p.Lease; once
	// the lease lapses without a chunk write renewing it, ReapUploads may
	// discard the upload. An upload's owner, size and state are durable:
	// any process over the same store continues it (UploadStatus).
	BeginUpload(ctx context.Context, p BeginUploadParams) (ChunkSet, error)
	// UploadStatus returns the live upload set's owner, size (the bytes its
	// committed chunks hold, all of [0, size)) and state, as of its last
	// committed chunk. A set with no live upload (never begun, published,
	// aborted or reaped) is an error wrapping steaderr.ErrLost.
	UploadStatus(ctx context.Context, set ChunkSet) (UploadStatus, error)
	// WriteChunk appends p.Data to the upload p.Set as the chunk starting
	// at byte p.Off, which must be the upload's size, and in the same
	// commit sets its size to p.Off + len(p.Data), its state to p.State and
	// its lease to p.Now + p.Lease. p.Data holds a byte at least (an empty
	// chunk is refused with steaderr.ErrInvalidArgument) and is only valid
	// until WriteChunk returns. A chunk set with no live upload (never begun, published,
	// aborted or reaped: an upload once ended never takes a chunk again)
	// is an error wrapping steaderr.ErrLost; an offset other than the
	// upload's size (another writer appended first) an error wrapping
	// steaderr.ErrConflict. A failed WriteChunk stores nothing.
	WriteChunk(ctx context.Context, p WriteChunkParams) error
	// AbortUpload discards an unpublished upload and its chunks (their
	// objects after the deletion commits); an upload already gone
	// (published, aborted or reaped) is not an error, and a published
	// set's chunks are never touched.
	AbortUpload(ctx context.Context, set ChunkSet) error
	// ReapUploads discards every upload whose lease has lapsed at p.Now,
	// with its chunks, and reports how many it discarded.
	ReapUploads(ctx context.Context, p ReapUploadsParams) (int, error)
	// ReadChunk returns the committed chunk of set, published or staged,
	// that holds byte off: a copy of its data, or, for a chunk kept as an
	// object of the bytes tier (Streamer.WriteValue), that object's name
	// (read with ReadValue). A chunk set no longer stored (its blob was
	// deleted, its upload ended) is an error wrapping steaderr.ErrNotFound.
	ReadChunk(ctx context.Context, set ChunkSet, off int64) (Chunk, error)
}

// Chunk is one committed chunk of a chunk set: the bytes [Start,
// Start+Size) of its value, held in Data, or, when Object is set, in that
// bucket object (Data nil).
type Chunk struct {
	Start, Size int64
	Data        []byte
	Object      string
}

// UploadStatus is the durable state of an upload in progress.
type UploadStatus struct {
	// Owner is who may continue the upload, as BeginUpload recorded it.
	Owner string
	// Size is how many bytes the upload's committed chunks hold.
	Size int64
	// State is what the last committed chunk (or BeginUpload) recorded
	// with it: the running hash of those Size bytes, for the Store.
	State []byte
}

// MaxUploadState bounds UploadStatus.State, and MaxUploadOwner an owner,
// in bytes.
const (
	MaxUploadState = 1024
	MaxUploadOwner = 1024
)

// ChunkSet identifies the chunks of one chunked value, first staged under
// an upload, then published. Engines draw ids at random from 2^63 and
// never draw one an upload or a stored value holds, so a reader of a
// deleted value finds nothing rather than another value's bytes (barring
// a one in 2^63 draw).
type ChunkSet int64

// Stored is the stored form of one value.
type Stored struct {
	Size int64
	// Value is the whole value when it is stored inline.
	Value []byte
	// Chunks is the value's chunk set, or 0 when it is stored inline.
	Chunks ChunkSet
	// Object names the bucket object holding the value when the engine
	// keeps it in its bytes tier (Streamer); "" otherwise.
	Object string
}

// Inline reports whether the value is stored whole in st.Value.
func (st Stored) Inline() bool { return st.Chunks == 0 && st.Object == "" }

// PutParams are the arguments of Backend.Put.
type PutParams struct {
	Key   Key
	Value []byte
	// Chunks, when not 0, is the upload whose chunks are the value, and
	// Size its size; Value is then nil.
	Chunks ChunkSet
	Size   int64
	// Children are the blobs the value references, sorted and distinct,
	// not p.Key, at most MaxChildren.
	Children []Key
	// Owner and TTL name the pin the put takes.
	Owner string
	TTL   time.Duration
	// Now is the instant the pin's TTL runs from. Zero means the engine's
	// clock: the database's now() on PostgreSQL, the system clock
	// elsewhere.
	Now time.Time
}

// PinParams are the arguments of Backend.Pin and Backend.RenewPin.
type PinParams struct {
	Key   Key
	Owner string
	TTL   time.Duration
	// Now is the instant the pin is judged at and its TTL runs from; zero:
	// the engine's clock.
	Now time.Time
}

// UnpinParams are the arguments of Backend.Unpin.
type UnpinParams struct {
	Key   Key
	Owner string
}

// BeginUploadParams are the arguments of Backend.BeginUpload.
type BeginUploadParams struct {
	// Owner is who may continue the upload ("" for anyone), at most
	// MaxUploadOwner bytes; the engine stores it, the Store checks it.
	Owner string
	// State is the upload's state before its first byte, at most
	// MaxUploadState bytes.
	State []byte
	// Lease is how long the upload lasts without a chunk write, at least
	// a microsecond.
	Lease time.Duration
	// Now is the instant the lease runs from; zero: the engine's clock.
	Now time.Time
}

// WriteChunkParams are the arguments of Backend.WriteChunk.
type WriteChunkParams struct {
	Set  ChunkSet
	Off  int64
	Data []byte
	// State is the upload's state once the chunk is written, at most
	// MaxUploadState bytes.
	State []byte
	// Lease is how long the upload lasts from Now on, at least a
	// microsecond.
	Lease time.Duration
	// Now is the instant the renewed lease runs from; zero: the engine's
	// clock.
	Now time.Time
}

// ReapUploadsParams are the arguments of Backend.ReapUploads.
type ReapUploadsParams struct {
	// Now is the instant leases are judged at; zero: the engine's clock.
	Now time.Time
}

// DeleteParams are the arguments of Backend.Delete.
type DeleteParams struct {
	Keys []Key
	// Now is the instant pins are judged at; zero: the engine's clock.
	Now time.Time
}

// ChildrenFixedError is the error an engine returns for a put of stored
// key declaring children (extra) it was not stored with:
// steaderr.ErrChildrenFixed naming the key and the first few of them.
func ChildrenFixedError(key string, extra []string) error {
	if len(extra) > 3 {
		return fmt.Errorf("%w: %s was stored without %d of them, %s first", steaderr.ErrChildrenFixed, key, len(extra), strings.Join(extra[:3], ", "))
	}
	return fmt.Errorf("%w: %s was stored without %s", steaderr.ErrChildrenFixed, key, strings.Join(extra, ", "))
}

// MaxChildren bounds the blobs one put may declare it references.
const MaxChildren = 10000

// MaxDeleteBatch bounds the keys of one Backend.Delete and of one
// garbage-collection arbitration: the keys of one transaction.
const MaxDeleteBatch = 10000

// Outcome is what an arbitration found for one key.
type Outcome uint8

const (
	// Deleted: the blob was unprotected and is deleted (in a dry run:
	// would be).
	Deleted Outcome = iota + 1
	// Protected: a live pin or a liveness source references the key.
	Protected
	// Busy: a put or pin held the row, so a sweep, which never waits,
	// skipped it: it is being protected now.
	Busy
	// Absent: no blob is stored under the key.
	Absent
)

var outcomeNames = [...]string{Deleted: "deleted", Protected: "protected", Busy: "busy", Absent: "absent"}

// String names o as the HTTP API does: deleted, protected, busy or absent.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// ParseOutcome reads an Outcome's name; ok is false for any other text.
func ParseOutcome(s string) (o Outcome, ok bool) {
	for i, name := range outcomeNames {
		if name != "" && name == s {
			return Outcome(i), true
		}
	}
	return 0, false
}

// Verdict is the outcome of one key's arbitration.
type Verdict struct {
	Key     Key
	Outcome Outcome
	// Size is the deleted (or, in a dry run, deletable) blob's size.
	Size int64
}

// Err is the error a Delete of the key returns: nil once deleted, an
// error wrapping steaderr.ErrNotFound for an absent blob, and
// steaderr.ErrProtected for a protected one (or one a put holds).
func (v Verdict) Err() error {
	switch v.Outcome {
	case Deleted:
		return nil
	case Absent:
		return steaderr.ErrNotFound
	}
	return steaderr.ErrProtected
}

// Info describes a stored blob.
type Info struct {
	Key  Key
	Size int64
}
