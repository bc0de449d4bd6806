package record

import (
	"context"
	"time"
)

// Backend is what a storage engine does for records: mechanics only; the
// rules of its conditional writes are in package record/check. The
// portable Store validates every argument before calling it, so an engine
// may trust its inputs: names are valid, times are in UTC and whole
// microseconds, TTLs are whole microseconds, at least one, and counts are
// not negative.
//
// Every method returns an error wrapping steaderr.ErrClosed once the engine
// is closed, and steaderr.ErrSchema for a write to a database never
// migrated (reads answer absent or empty). A failed or cancelled call
// changes nothing. Now in a params struct is the instant leases are judged
// at and writes are stamped with; the zero time means the engine's clock
// (the database's on a shared database, time.Now otherwise).
type Backend interface {
	// RegisterGroup creates group; registering an existing group is a
	// successful no-op.
	RegisterGroup(ctx context.Context, group string) error
	// GroupExists reports whether group is registered.
	GroupExists(ctx context.Context, group string) (bool, error)

	// Save writes p.Record as a compare-and-swap on its Version and
	// returns the record as stored: Version one higher, UpdatedAt set to
	// now, Payload the caller's slice.
	//
	// Version 0 creates the record with every field as given; an existing
	// id (in any group) is steaderr.ErrConflict. Otherwise the stored
	// record must have that version and rec's Group, and rec.Lease must
	// either name the stored grant (same Owner and Incarnation) — the
	// stored lease is then kept, Expiry included, as Renew may have
	// extended it — or release it (empty Owner: the stored Incarnation is
	// kept, Expiry is as given). An absent id, another version or another
	// lease is steaderr.ErrConflict; another group is
	// steaderr.ErrWrongGroup.
	//
	// A group never registered is steaderr.ErrUnknownGroup. Rec's tenant
	// is created in its group on first use, "" being the group's default
	// tenant.
	Save(ctx context.Context, p SaveParams) (Record, error)
	// SaveAll saves each of p.Records as Save would, in order, and
	// returns each one's outcome: several at once share one round trip
	// and one commit where the engine can. A failure of the whole call
	// (ctx, a closed engine) is every record's error.
	SaveAll(ctx context.Context, p SaveAllParams) []SaveResult
	// Load returns the record stored under id, its Payload a copy never
	// nil, or an error wrapping steaderr.ErrNotFound.
	Load(ctx context.Context, id string) (Record, error)
	// Delete removes the record stored under id, if any.
	Delete(ctx context.Context, id string) error

	// ListClaimable returns up to p.Limit records of p.Group that are
	// claimable at p.Now (Record.Claimable), in ascending id order (byte
	// order), from one snapshot. A group never registered has none.
	ListClaimable(ctx context.Context, p ListParams) ([]Record, error)
	// ListLeased returns up to p.Limit records of p.Group that are not
	// parked and whose lease is held at p.Now (Lease.Held): the records
	// being worked on, which with the claimable ones make up every record
	// not parked. Only ids after p.After ("": from the first) are listed,
	// in ascending id order (byte order), from one snapshot; p.Limit is at
	// least one. A group never registered has none.
	ListLeased(ctx context.Context, p ListLeasedParams) ([]Record, error)
	// Claim takes a lease on record p.ID for p.Owner until now+p.TTL,
	// whatever its status, adding one to its Version and its Incarnation,
	// and returns the record as stored. It fails with an error wrapping
	// steaderr.ErrNotFound for an absent id, steaderr.ErrWrongGroup for a
	// record of another group, and steaderr.ErrLeased while another
	// owner's lease is held at now. An owner may claim again a record it
	// holds: the new grant fences the old.
	Claim(ctx context.Context, p ClaimParams) (Record, error)
	// ClaimNext claims, as Claim does, up to p.N records that are
	// claimable in p.Group at now: first those whose lease expired,
	// earliest expiry (then id) first, then those without a lease, in id
	// order, passing over any a concurrent claimer is taking: claimers
	// never wait for each other and never claim the same record. It
	// returns them in id order, as stored.
	ClaimNext(ctx context.Context, p ClaimNextParams) ([]Record, error)
	// Renew extends the lease p.Owner holds as grant p.Incarnation to
	// now+p.TTL and returns it; Version and UpdatedAt are unchanged. It
	// fails with steaderr.ErrNotFound for an absent id,
	// steaderr.ErrWrongGroup for a record of another group,
	// steaderr.ErrLeased while another grant is held at now, and
	// steaderr.ErrConflict when the grant was released or superseded.
	Renew(ctx context.Context, p RenewParams) (Lease, error)

	// Probe reports whether p.Group has a claimable record at p.Now and,
	// if not, how long until the earliest lease held on a record that is
	// not parked expires.
	Probe(ctx context.Context, p ProbeParams) (Probe, error)
	// WatchClaimable starts watching group for commits that may make a
	// record claimable at once (a new active record, a released lease).
	// The channel receives, coalesced, after such a commit and whenever
	// the engine may have missed one; live reports that every such commit
	// after WatchClaimable returns, by any process, will send on it.
	// Otherwise (an engine that cannot see every commit, or one not
	// listening yet) the Store polls, and the channel, possibly nil, only
	// hurries it. stop ends the watch and is never nil. It has the shape
	// of lock.Backend's WatchReleases.
	WatchClaimable(ctx context.Context, group string) (wake <-chan struct{}, live bool, stop func(), err error)
}

// SaveParams are Save's parameters.
type SaveParams struct {
	Record Record
	Now    time.Time
}

// SaveAllParams are SaveAll's parameters.
type SaveAllParams struct {
	Records []Record
	Now     time.Time
}

// SaveResult is the outcome of saving one record of several: the record
// as stored, or the error that left it unsaved.
type SaveResult struct {
	Record Record
	Err    error
}

// ListParams are ListClaimable's parameters.
type ListParams struct {
	Group string
	Now   time.Time
	Limit int
}

// ListLeasedParams are ListLeased's parameters.
type ListLeasedParams struct {
	Group, After string
	Now          time.Time
	Limit        int
}

// ClaimParams are Claim's parameters.
type ClaimParams struct {
	ID, Group, Owner string
	TTL              time.Duration
	Now              time.Time
}

// ClaimNextParams are ClaimNext's parameters.
type ClaimNextParams struct {
	Group, Owner string
	TTL          time.Duration
	N            int
	Now          time.Time
}

// RenewParams are Renew's parameters.
type RenewParams struct {
	ID, Group, Owner string
	Incarnation      int64
	TTL              time.Duration
	Now              time.Time
}

// ProbeParams are Probe's parameters.
type ProbeParams struct {
	Group string
	Now   time.Time
}

// Probe is what Backend.Probe found.
type Probe struct {
	// Claimable: the group has a claimable record.
	Claimable bool
	// Until is how long until the earliest lease held on a record of the
	// group that is not parked expires; 0 when no such lease is held.
	Until time.Duration
}
