// Package engine is the seam between stead's portable layer and its storage
// engines. Each capability's mechanics are declared by the portable package
// that uses them; Engine composes them with the parts every engine shares:
// migrations, the cluster declaration and Close.
//
// A type named Engine is a whole engine; what an engine does for one
// capability is that capability's Backend:
//
//   - engine.Engine: one storage engine, all capabilities;
//   - blob.Backend, lock.Backend, record.Backend, ref.Backend, gc.Backend:
//     what an engine does for one capability, declared by the portable
//     package (blob, lock, record, ref, gc) whose Store or Collector calls
//     it after validating every argument;
//   - memory.Engine, sqlite.Engine, postgres.Engine, remote.Engine: the
//     implementations, in engine/memory, engine/sqlite, engine/postgres and
//     engine/remote (HTTP to stead serve);
//   - faultengine.Engine: a wrapper for tests that fails chosen calls of
//     any engine (engine/enginetest/faultengine).
//
// An engine is correct when it passes engine/enginetest. docs/design.md
// describes the seam and the rules every method keeps.
package engine

import (
	"context"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
)

// Engine is one storage engine.
type Engine interface {
	// Blobs returns the engine's blob mechanics.
	Blobs() blob.Backend
	// GC returns the engine's garbage-collection mechanics, or nil for an
	// engine whose data is collected elsewhere; the store's GC then
	// reports errors.ErrUnsupported.
	GC() gc.Backend
	// Locks returns the engine's named-lock mechanics.
	Locks() lock.Backend
	// Refs returns the engine's ref mechanics.
	Refs() ref.Backend
	// Records returns the engine's record mechanics.
	Records() record.Backend
	// Migrate brings the schema to the newest version this binary knows. It
	// is a no-op when the schema is current, safe to run concurrently from
	// many processes, and fails with an error wrapping steaderr.ErrSchema
	// when the database is newer than this binary.
	Migrate(ctx context.Context) error
	// SchemaVersion returns the schema version the database is at (0: never
	// migrated) and the newest version this binary knows.
	SchemaVersion(ctx context.Context) (current, latest int, err error)
	// Cluster reports whether processes on many machines may share the
	// engine's data safely, and why.
	Cluster() (shared bool, reason string)
	// Close releases the engine's resources; afterwards every method
	// returns an error wrapping steaderr.ErrClosed. Close is idempotent.
	Close() error
}

// BytesTierChecker is an Engine that may keep large values in a bucket,
// its bytes tier (docs/decisions/0027-bytes-tier.md), or reach one through
// a server (the remote engine), for stead doctor.
type BytesTierChecker interface {
	// CheckBytesTier checks that the store and its bucket belong together
	// and probes the bucket: it writes, reads back, lists and deletes a
	// small object. bucket names it, "" when the store has no tier.
	CheckBytesTier(ctx context.Context) (bucket string, err error)
}

// InstanceClaimer is an Engine whose data other processes may open too
// (PostgreSQL, SQLite), and which can therefore hold an instance id
// exclusively: pins are owned by the id, so two open stores sharing one
// would end each other's pins. stead.Open claims an id given by
// WithInstanceID.
type InstanceClaimer interface {
	// ClaimInstance holds id until Close. While it is held, a claim of id
	// on the same data (the same PostgreSQL schema, the same SQLite file)
	// by another engine, in this process or another, fails with an error
	// wrapping steaderr.ErrLeased that names id. A holder that dies
	// without closing lets the claim go: when its database session ends,
	// or its process exits. When a held claim is lost (its session was
	// ended), the engine calls notify with an error wrapping
	// steaderr.ErrLost, keeps trying to take it back, calls notify with
	// an error wrapping steaderr.ErrLeased while another holds it, and
	// with nil once it holds it again. notify may be nil.
	ClaimInstance(ctx context.Context, id string, notify func(error)) error
}
