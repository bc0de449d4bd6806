package ref

import (
	"context"
	"time"

	"github.com/steadkit/stead/blob"
)

// Backend is what a storage engine does for refs: mechanics only. The
// portable Store validates every argument before calling it: names are
// valid (CheckName), keys are not zero, annotations are at most
// MaxAnnotation bytes, TTLs are positive whole microseconds, and Now, when
// set, is a whole microsecond (zero: the engine's clock). A ref whose
// expiry is at or before now is expired: it protects nothing and every
// method treats it as absent. Every method returns steaderr.ErrClosed once
// the engine is closed.
//
// A ref protects its key from garbage collection while it is live, unless
// it is weak: a weak ref protects nothing, and the arbitration that
// deletes its key deletes it too. Set, weak or not, takes the same row
// lock on the key's blob that a put or a pin takes, so it cannot
// interleave with an arbitration of the key: either the ref commits first
// (and a strong one keeps the key), or the key is deleted first and Set
// fails with an error wrapping steaderr.ErrNotFound. So every ref names a
// stored blob. Touch takes that lock too, so a renewal never extends a ref
// whose key an arbitration has just judged unprotected.
type Backend interface {
	// Set points p.Name at p.Key (weak when p.Weak), with p.Annotation
	// and, when p.TTL > 0, an expiry of p.Now + p.TTL (else none), and
	// returns the ref as stored with a new version, larger than any
	// version the store handed out before, and Created true when no live
	// ref had the name. p.Cond says when it may:
	// unconditionally, only if the name is absent (or expired), or only if
	// its live version is p.Version; else it fails with an error wrapping
	// steaderr.ErrConflict and changes nothing. A key not stored fails it with steaderr.ErrNotFound.
	Set(ctx context.Context, p SetParams) (Ref, error)
	// Get returns the live ref p.Name, or an error wrapping
	// steaderr.ErrNotFound.
	Get(ctx context.Context, p GetParams) (Ref, error)
	// Touch renews the live, expiring ref p.Name to expire at p.Now +
	// p.TTL, keeping its version, and returns it; a ref without expiry is
	// returned unchanged. With p.Lazy it renews only a ref with less than
	// half of p.TTL left at p.Now (zero: the engine's clock), and returns
	// any other unchanged, writing nothing. An absent or expired ref is an
	// error wrapping steaderr.ErrNotFound: a renewal never resurrects one.
	Touch(ctx context.Context, p TouchParams) (Ref, error)
	// Resolve returns the live ref p.Name and the stored form of the blob
	// it names, read from one snapshot, so the form is never another
	// key's nor one a sweep removed before the ref was read. With p.TTL > 0
	// it renews the ref as a lazy Touch does: only a ref with less than
	// half of p.TTL left writes. An absent or expired ref, or one whose
	// blob is not stored (which no committed state holds: a weak ref goes
	// with its key), is an error wrapping steaderr.ErrNotFound.
	Resolve(ctx context.Context, p ResolveParams) (Ref, blob.Stored, error)
	// Delete removes the live ref p.Name, only if its version is p.Version
	// when p.Version is not 0 (else steaderr.ErrConflict). An absent or
	// expired ref is an error wrapping steaderr.ErrNotFound.
	Delete(ctx context.Context, p DeleteParams) error
	// PutSet stores p as blob.Backend.Put stores an inline value (p.Chunks
	// is 0, p.Children empty: an engine may refuse either with
	// steaderr.ErrInvalidArgument), with its pin, and applies sets (at
	// least one, at most MaxPutRefs, names distinct, each Key p.Key) as
	// Set does, all in one commit, and returns created as Put reports it
	// and the refs as stored, in sets' order. It is all or nothing: a set
	// whose condition fails fails the call with a *RefusedError naming it,
	// wrapping steaderr.ErrConflict, and
	// neither blob nor pin nor any ref is stored (a blob stored already
	// stays, unpinned by this call). An error otherwise means what Put's
	// does: all of it committed or none.
	PutSet(ctx context.Context, p blob.PutParams, sets []SetParams) (created bool, refs []Ref, err error)
	// List calls yield for each live ref whose name starts with p.Prefix
	// and is greater than p.After, in byte order of names, at most p.Limit
	// (at least 1) times, all from one consistent snapshot, until yield
	// returns false. yield must not call back into the engine.
	List(ctx context.Context, p ListParams, yield func(Ref) bool) error
}

// Cond is when a Set may write.
type Cond uint8

const (
	// Always sets the ref whatever it holds.
	Always Cond = iota
	// IfAbsent sets the ref only if no live ref has the name.
	IfAbsent
	// IfVersion sets the ref only if the live ref's version is
	// SetParams.Version.
	IfVersion
)

// SetParams are the arguments of Backend.Set.
type SetParams struct {
	Name       string
	Key        blob.Key
	Annotation []byte
	TTL        time.Duration
	Cond       Cond
	Version    int64
	Weak       bool
	Now        time.Time
}

// GetParams are the arguments of Backend.Get.
type GetParams struct {
	Name string
	Now  time.Time
}

// TouchParams are the arguments of Backend.Touch.
type TouchParams struct {
	Name string
	TTL  time.Duration
	Now  time.Time
	Lazy bool
}

// DeleteParams are the arguments of Backend.Delete.
type DeleteParams struct {
	Name    string
	Version int64
	Now     time.Time
}

// ListParams are the arguments of Backend.List.
type ListParams struct {
	Prefix, After string
	Limit         int
	Now           time.Time
}
