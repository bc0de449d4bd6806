// Package record holds lease-fenced, versioned records: checkpoints of
// units of work (workflow instances, jobs) that one owner at a time holds
// under a lease and that another node recovers after a crash. It defines
// the value types, the mechanics an engine provides (Backend) and the
// portable Store, which validates input and holds the policy.
//
// Two fences keep a lapsed owner (a "zombie") from overwriting the new one:
// every write bumps Version and Save is a compare-and-swap on it, and every
// claim raises Lease.Incarnation, which never goes down, so work done under
// a lease can be tagged with its incarnation downstream.
package record

import (
	"math"
	"time"
)

// Status is where a record's unit of work stands. The vocabulary is
// append-only and stored as text without a database constraint: a status
// this package does not name is stored, loaded and (being neither terminal
// nor suspended) listed as claimable like Active.
type Status string

// The statuses stead names.
const (
	// Active: work to do; claimable when no live lease is held on it.
	Active Status = "active"
	// Suspended: waiting for something outside (a timer, a signal); never
	// claimable until saved with another status. Claim by id resumes it.
	Suspended Status = "suspended"
	// Completed, Failed and Canceled are terminal: the work is over.
	Completed Status = "completed"
	Failed    Status = "failed"
	Canceled  Status = "canceled"
)

// Terminal reports whether s ends the work: Completed, Failed or Canceled.
func (s Status) Terminal() bool {
	return s == Completed || s == Failed || s == Canceled
}

// Parked reports whether a record in status s is never claimable, whatever
// its lease: s is terminal or Suspended. This is the one place statuses are
// classified; engines store its answer beside the status.
func (s Status) Parked() bool {
	return s.Terminal() || s == Suspended
}

// Lease is the claim one owner holds on a record. An empty Owner means no
// lease is held; Incarnation and Expiry are then kept as stored.
type Lease struct {
	// Owner names the holder, typically a node or worker id.
	Owner string
	// Incarnation counts the claims of the record: every Claim adds one
	// and no write lowers it, so it tells the holders apart downstream.
	// A create refuses one above MaxIncarnation.
	Incarnation int64
	// Expiry is when the lease lapses: it is expired at exactly this
	// instant.
	Expiry time.Time
}

// MaxIncarnation is the largest Lease.Incarnation a create may give. It leaves
// room for 2^62 claims above it, so a claim never overflows the counter
// (docs/decisions/0013-incarnation-and-tenant-rules.md).
const MaxIncarnation = math.MaxInt64 / 2

// Held reports whether the lease is held at now: it has an owner and has
// not expired (now is before Expiry).
func (l Lease) Held(now time.Time) bool {
	return l.Owner != "" && now.Before(l.Expiry)
}

// Record is one checkpointed unit of work.
type Record struct {
	// ID names the record; ids are unique across groups.
	ID string
	// Group scopes claiming: claimers of one group never see another's
	// records. Never empty; a process working alone uses its instance id.
	Group string
	// Tenant partitions a group's records; "" is the group's default
	// tenant. Tenants are created on first use.
	Tenant string
	// Status says where the work stands; see Status.
	Status Status
	// Payload is the checkpoint itself, opaque to stead.
	Payload []byte
	// Version is the version the caller last read (0: the record is new).
	// Every write adds one; Save succeeds only if it still matches.
	Version int64
	// Lease is the claim held on the record, if any.
	Lease Lease
	// UpdatedAt is when the record was last saved or claimed; set by the
	// store.
	UpdatedAt time.Time
}

// Claimable reports whether r may be claimed at now: its status is not
// parked (terminal or suspended) and no lease is held on it.
func (r Record) Claimable(now time.Time) bool {
	return !r.Status.Parked() && !r.Lease.Held(now)
}

// timestamp returns t as every engine stores it: in UTC, truncated to the
// microsecond, so a time loads back exactly as it was saved.
func timestamp(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}
