package record

import (
	"context"
	"fmt"
	"time"

	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/steaderr"
)

// DefaultMaxPayload is the default for Options.MaxPayload: 16 MiB.
const DefaultMaxPayload = 16 << 20

// Options configures a Store.
type Options struct {
	// Now is the clock leases are judged by and writes are stamped with.
	// Defaults to nil: the engine's clock (the database's now() on
	// PostgreSQL, time.Now elsewhere).
	Now func() time.Time
	// MaxPayload is the largest payload Save accepts, in bytes; a larger
	// one fails with ErrTooLarge. Defaults to DefaultMaxPayload.
	MaxPayload int
}

// Store is the record capability of a stead store. It is safe for
// concurrent use. Every method validates its arguments first: a bad name
// (id, group, tenant, owner, status) is an error wrapping
// steaderr.ErrInvalidName, a bad number or time one wrapping
// steaderr.ErrInvalidArgument, and either changes nothing.
//
// Cancelling ctx: Save and SaveAll report an error only for a write that
// did not take effect. Claim, ClaimNext, Renew and Delete over a network
// engine (PostgreSQL) may have taken effect although cancelled, as the
// server can finish a statement after the caller stopped waiting; Load
// shows what happened. A claim taken that way is harmless: nobody works
// under it, and it lapses after its ttl, when the record is claimable
// again.
type Store struct {
	eng        Backend
	clock      func() time.Time
	maxPayload int
}

// NewStore returns a Store over eng. A non-positive MaxPayload means the
// default.
func NewStore(eng Backend, opts Options) *Store {
	if opts.MaxPayload <= 0 {
		opts.MaxPayload = DefaultMaxPayload
	}
	return &Store{eng: eng, clock: opts.Now, maxPayload: opts.MaxPayload}
}

// RegisterGroup registers group, so records can be saved into it.
// Registering a registered group succeeds and changes nothing.
func (s *Store) RegisterGroup(ctx context.Context, group string) error {
	if err := validate.Name("group", group); err != nil {
		return fmt.Errorf("record register group: %w", err)
	}
	if err := s.eng.RegisterGroup(ctx, group); err != nil {
		return fmt.Errorf("record register group %q: %w", group, err)
	}
	return nil
}

// GroupExists reports whether group is registered.
func (s *Store) GroupExists(ctx context.Context, group string) (bool, error) {
	if err := validate.Name("group", group); err != nil {
		return false, fmt.Errorf("record group exists: %w", err)
	}
	ok, err := s.eng.GroupExists(ctx, group)
	if err != nil {
		return false, fmt.Errorf("record group exists %q: %w", group, err)
	}
	return ok, nil
}

// Save writes rec if rec.Version is the stored version (0: rec is new) and
// returns it as stored, with its new Version and UpdatedAt; on a mismatch
// it returns an error wrapping ErrConflict and changes nothing. A lapsed
// owner's save, carrying the version it read before another owner claimed
// the record, is refused this way. Creating an id that exists (in any
// group) and updating one that does not are conflicts too.
//
// rec.Group must be registered (ErrUnknownGroup) and, on an update, be the
// stored record's group (ErrWrongGroup). The lease is the claimers' to
// move: an update either carries the stored lease, which is kept as stored
// (Renew may have extended it), or releases it with an empty Owner; the
// incarnation is never lowered. A create stores rec.Lease as given; an
// incarnation above MaxIncarnation is ErrInvalidArgument. A nil payload is
// stored empty.
func (s *Store) Save(ctx context.Context, rec Record) (Record, error) {
	if err := s.checkRecord(rec); err != nil {
		return Record{}, fmt.Errorf("record save: %w", err)
	}
	now, err := s.now()
	if err != nil {
		return Record{}, fmt.Errorf("record save %q: %w", rec.ID, err)
	}
	rec.Lease.Expiry = timestamp(rec.Lease.Expiry)
	if rec.Payload == nil {
		rec.Payload = []byte{}
	}
	stored, err := s.eng.Save(ctx, SaveParams{Record: rec, Now: now})
	if err != nil {
		return Record{}, fmt.Errorf("record save %q: %w", rec.ID, err)
	}
	return stored, nil
}

// SaveAll saves each of recs as Save would and returns each one's
// outcome, in the order of recs: the record as stored, or the error that
// left it unsaved (ErrConflict, a bad argument, ...). On SQLite the saves
// share one transaction; on PostgreSQL one statement and commit, so a
// worker that claimed ten records completes them in one round trip. (A
// record given twice, of a tenant this process has not saved into yet, or
// past 4 MiB of payloads, starts a statement of its own, which commits on
// its own.) A record given twice is saved twice, in
// order: the second must carry the first's new version.
func (s *Store) SaveAll(ctx context.Context, recs []Record) []SaveResult {
	out := make([]SaveResult, len(recs))
	now, err := s.now()
	var valid []Record
	var at []int // index in recs of each of valid
	for i, rec := range recs {
		if err == nil {
			if err := s.checkRecord(rec); err != nil {
				out[i].Err = fmt.Errorf("record save: %w", err)
				continue
			}
		}
		if err != nil {
			out[i].Err = fmt.Errorf("record save %q: %w", rec.ID, err)
			continue
		}
		rec.Lease.Expiry = timestamp(rec.Lease.Expiry)
		if rec.Payload == nil {
			rec.Payload = []byte{}
		}
		valid = append(valid, rec)
		at = append(at, i)
	}
	if len(valid) == 0 {
		return out
	}
	for j, res := range s.eng.SaveAll(ctx, SaveAllParams{Records: valid, Now: now}) {
		if res.Err != nil {
			res = SaveResult{Err: fmt.Errorf("record save %q: %w", valid[j].ID, res.Err)}
		}
		out[at[j]] = res
	}
	return out
}

// Load returns the record stored under id, or an error wrapping
// ErrNotFound. The record is a copy: changing its payload changes nothing
// stored.
func (s *Store) Load(ctx context.Context, id string) (Record, error) {
	if err := validate.Name("record id", id); err != nil {
		return Record{}, fmt.Errorf("record load: %w", err)
	}
	rec, err := s.eng.Load(ctx, id)
	if err != nil {
		return Record{}, fmt.Errorf("record load %q: %w", id, err)
	}
	return rec, nil
}

// Delete removes the record stored under id. Deleting an absent record
// succeeds.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := validate.Name("record id", id); err != nil {
		return fmt.Errorf("record delete: %w", err)
	}
	if err := s.eng.Delete(ctx, id); err != nil {
		return fmt.Errorf("record delete %q: %w", id, err)
	}
	return nil
}

// ListClaimable returns up to limit records of group that are claimable at
// now (see Record.Claimable), in ascending id order. A zero now means the
// store's clock. A group never registered has none.
func (s *Store) ListClaimable(ctx context.Context, group string, now time.Time, limit int) ([]Record, error) {
	err := validate.Name("group", group)
	if err == nil {
		err = checkCount("limit", limit)
	}
	if err == nil && !now.IsZero() {
		err = checkTime("now", now)
	}
	if err != nil {
		return nil, fmt.Errorf("record list claimable: %w", err)
	}
	if now.IsZero() {
		if now, err = s.now(); err != nil {
			return nil, fmt.Errorf("record list claimable %q: %w", group, err)
		}
	}
	recs, err := s.eng.ListClaimable(ctx, ListParams{Group: group, Now: timestamp(now), Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("record list claimable %q: %w", group, err)
	}
	return recs, nil
}

// MaxListLeased is the most records one ListLeased call returns.
const MaxListLeased = 1000

// ListLeased returns up to limit records of group that are not parked and
// whose lease is held at now (see Lease.Held), the records claimers are
// working on, with ids after after ("": from the first), in ascending id
// order: pass the last id of one page as after to get the next. A zero
// now means the store's clock. Limit is 1 to MaxListLeased. A group never
// registered has none.
func (s *Store) ListLeased(ctx context.Context, group, after string, now time.Time, limit int) ([]Record, error) {
	err := validate.Name("group", group)
	if err == nil && after != "" {
		err = validate.Name("record id", after)
	}
	if err == nil && (limit < 1 || limit > MaxListLeased) {
		err = fmt.Errorf("%w: limit %d, want 1 to %d", steaderr.ErrInvalidArgument, limit, MaxListLeased)
	}
	if err == nil && !now.IsZero() {
		err = checkTime("now", now)
	}
	if err != nil {
		return nil, fmt.Errorf("record list leased: %w", err)
	}
	if now.IsZero() {
		if now, err = s.now(); err != nil {
			return nil, fmt.Errorf("record list leased %q: %w", group, err)
		}
	}
	recs, err := s.eng.ListLeased(ctx, ListLeasedParams{Group: group, After: after, Now: timestamp(now), Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("record list leased %q: %w", group, err)
	}
	return recs, nil
}

// Claim takes a lease on record id of group for owner, for ttl, and
// returns the record as stored: its Version and Lease.Incarnation one
// higher, the lease expiring ttl from now. It claims whatever the status,
// so it is how a suspended record is resumed. It fails with ErrNotFound
// for an absent record, ErrWrongGroup for a record of another group and
// ErrLeased while another owner holds a live lease.
func (s *Store) Claim(ctx context.Context, group, id, owner string, ttl time.Duration) (Record, error) {
	err := validate.Name("group", group)
	if err == nil {
		err = validate.Name("record id", id)
	}
	if err == nil {
		err = checkLeaseArgs(owner, ttl)
	}
	if err != nil {
		return Record{}, fmt.Errorf("record claim: %w", err)
	}
	now, err := s.leaseStart(ttl)
	if err != nil {
		return Record{}, fmt.Errorf("record claim %q: %w", id, err)
	}
	rec, err := s.eng.Claim(ctx, ClaimParams{ID: id, Group: group, Owner: owner, TTL: ttl.Truncate(time.Microsecond), Now: now})
	if err != nil {
		return Record{}, fmt.Errorf("record claim %q: %w", id, err)
	}
	return rec, nil
}

// ClaimNext claims, as Claim does, up to n records of group that are
// claimable now, in one step, and returns them in id order. Records whose
// lease expired (recovery) go first, earliest expiry first, then records
// without a lease, in id order. Concurrent claimers never wait for one
// another and never claim the same record. A group never registered has
// nothing to claim.
func (s *Store) ClaimNext(ctx context.Context, group, owner string, ttl time.Duration, n int) ([]Record, error) {
	err := validate.Name("group", group)
	if err == nil {
		err = checkLeaseArgs(owner, ttl)
	}
	if err == nil {
		err = checkCount("n", n)
	}
	if err != nil {
		return nil, fmt.Errorf("record claim next: %w", err)
	}
	now, err := s.leaseStart(ttl)
	if err != nil {
		return nil, fmt.Errorf("record claim next %q: %w", group, err)
	}
	recs, err := s.eng.ClaimNext(ctx, ClaimNextParams{Group: group, Owner: owner, TTL: ttl.Truncate(time.Microsecond), N: n, Now: now})
	if err != nil {
		return nil, fmt.Errorf("record claim next %q: %w", group, err)
	}
	return recs, nil
}

// Renew extends the lease rec carries (its owner and incarnation) to ttl
// from now and returns the new lease; the record's Version does not
// change, so the holder's next Save still matches. It fails with
// ErrNotFound when the record is gone, ErrLeased while another owner holds
// it, and ErrConflict when the lease was released or claimed again: in
// every failure the lease is lost and the caller must stop working on the
// record.
func (s *Store) Renew(ctx context.Context, rec Record, ttl time.Duration) (Lease, error) {
	err := validate.Name("record id", rec.ID)
	if err == nil {
		err = validate.Name("group", rec.Group)
	}
	if err == nil {
		err = checkLeaseArgs(rec.Lease.Owner, ttl)
	}
	if err == nil && rec.Lease.Incarnation < 0 {
		err = fmt.Errorf("%w: incarnation %d", steaderr.ErrInvalidArgument, rec.Lease.Incarnation)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("record renew: %w", err)
	}
	now, err := s.leaseStart(ttl)
	if err != nil {
		return Lease{}, fmt.Errorf("record renew %q: %w", rec.ID, err)
	}
	lease, err := s.eng.Renew(ctx, RenewParams{
		ID: rec.ID, Group: rec.Group, Owner: rec.Lease.Owner, Incarnation: rec.Lease.Incarnation, TTL: ttl.Truncate(time.Microsecond), Now: now,
	})
	if err != nil {
		return Lease{}, fmt.Errorf("record renew %q: %w", rec.ID, err)
	}
	return lease, nil
}

// now reads the store's clock: the zero time when it has none, leaving
// the engine to use its own.
func (s *Store) now() (time.Time, error) {
	if s.clock == nil {
		return time.Time{}, nil
	}
	t := s.clock()
	if err := checkTime("clock", t); err != nil {
		return time.Time{}, err
	}
	return timestamp(t), nil
}

// leaseStart returns s.now() for a lease of ttl from now, or
// ErrInvalidArgument if the lease would end past the last storable instant.
// With the database's clock, this process's clock stands in for it.
func (s *Store) leaseStart(ttl time.Duration) (time.Time, error) {
	now, err := s.now()
	if err != nil {
		return now, err
	}
	from := now
	if from.IsZero() {
		from = time.Now()
	}
	if err := checkTime("lease expiry", from.Add(ttl)); err != nil {
		return now, fmt.Errorf("%w (ttl %v)", err, ttl)
	}
	return now, nil
}

func (s *Store) checkRecord(rec Record) error {
	for _, n := range []struct{ what, name string }{
		{"record id", rec.ID}, {"group", rec.Group}, {"status", string(rec.Status)},
	} {
		if err := validate.Name(n.what, n.name); err != nil {
			return err
		}
	}
	for _, n := range []struct{ what, name string }{{"tenant", rec.Tenant}, {"lease owner", rec.Lease.Owner}} {
		if n.name == "" {
			continue // the default tenant; no lease
		}
		if err := validate.Name(n.what, n.name); err != nil {
			return err
		}
	}
	switch {
	case rec.Version < 0:
		return fmt.Errorf("%w: version %d", steaderr.ErrInvalidArgument, rec.Version)
	case rec.Lease.Incarnation < 0 || rec.Version == 0 && rec.Lease.Incarnation > MaxIncarnation:
		return fmt.Errorf("%w: incarnation %d, want 0 to %d", steaderr.ErrInvalidArgument, rec.Lease.Incarnation, int64(MaxIncarnation))
	case len(rec.Payload) > s.maxPayload:
		return fmt.Errorf("%w: payload of %d bytes, limit %d", steaderr.ErrTooLarge, len(rec.Payload), s.maxPayload)
	}
	return checkTime("lease expiry", rec.Lease.Expiry)
}

// minYear and maxYear bound the times stead stores, so every engine can
// represent them exactly. The zero time (year 1) is in range.
const minYear, maxYear = 1, 9999

func checkTime(what string, t time.Time) error {
	if y := t.UTC().Year(); y < minYear || y > maxYear {
		return fmt.Errorf("%w: %s %v is outside years %d to %d", steaderr.ErrInvalidArgument, what, t, minYear, maxYear)
	}
	return nil
}

func checkLeaseArgs(owner string, ttl time.Duration) error {
	if err := validate.Name("owner", owner); err != nil {
		return err
	}
	if ttl < time.Microsecond {
		return fmt.Errorf("%w: ttl %v, want at least 1µs", steaderr.ErrInvalidArgument, ttl)
	}
	return nil
}

func checkCount(what string, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: %s %d, want >= 0", steaderr.ErrInvalidArgument, what, n)
	}
	return nil
}
