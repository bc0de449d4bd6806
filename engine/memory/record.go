package memory

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/record/check"
	"github.com/steadkit/stead/steaderr"
)

type records struct {
	e *Engine
	// mu guards groups and recs; like blobs, every method checks for Close
	// while holding it.
	mu sync.Mutex
	// groups maps each registered group to the set of its tenants ("": the
	// default tenant).
	groups map[string]map[string]bool
	recs   map[string]record.Record
	// deleted maps a group to the highest version a record of it had when
	// deleted: a create starts above it, so versions of an id never repeat
	// (docs/decisions/0013-incarnation-and-tenant-rules.md).
	deleted map[string]int64
}

func (r *records) init(e *Engine) {
	r.e = e
	r.groups = make(map[string]map[string]bool)
	r.recs = make(map[string]record.Record)
	r.deleted = make(map[string]int64)
}

// lock takes mu and checks the engine is open and ctx alive; on success the
// caller must unlock.
func (r *records) lock(ctx context.Context) error {
	r.mu.Lock()
	if err := r.e.check(ctx); err != nil {
		r.mu.Unlock()
		return err
	}
	return nil
}

// stored returns a copy of rec whose payload the caller may keep.
func stored(rec record.Record) record.Record {
	rec.Payload = append([]byte{}, rec.Payload...)
	return rec
}

func (r *records) RegisterGroup(ctx context.Context, group string) error {
	if err := r.lock(ctx); err != nil {
		return err
	}
	defer r.mu.Unlock()
	if r.groups[group] == nil {
		r.groups[group] = make(map[string]bool)
	}
	return nil
}

func (r *records) GroupExists(ctx context.Context, group string) (bool, error) {
	if err := r.lock(ctx); err != nil {
		return false, err
	}
	defer r.mu.Unlock()
	return r.groups[group] != nil, nil
}

func (r *records) Save(ctx context.Context, p record.SaveParams) (record.Record, error) {
	if err := r.lock(ctx); err != nil {
		return record.Record{}, err
	}
	defer r.mu.Unlock()
	return r.save(p.Record, clock.OrNow(p.Now))
}

func (r *records) SaveAll(ctx context.Context, p record.SaveAllParams) []record.SaveResult {
	out := make([]record.SaveResult, len(p.Records))
	if err := r.lock(ctx); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer r.mu.Unlock()
	now := clock.OrNow(p.Now)
	for i, rec := range p.Records {
		out[i].Record, out[i].Err = r.save(rec, now)
	}
	return out
}

// save writes rec as Save does; the caller holds mu.
func (r *records) save(rec record.Record, now time.Time) (record.Record, error) {
	tenants := r.groups[rec.Group]
	if tenants == nil {
		return record.Record{}, steaderr.ErrUnknownGroup
	}
	old, exists := r.recs[rec.ID]
	if err := check.Save(rec, old, exists); err != nil {
		return record.Record{}, err
	}
	if rec.Version > 0 {
		if rec.Lease.Owner == "" {
			rec.Lease.Incarnation = old.Lease.Incarnation
		} else {
			rec.Lease = old.Lease
		}
	}
	tenants[rec.Tenant] = true
	if rec.Version == 0 {
		rec.Version = r.deleted[rec.Group]
	}
	rec.Version++
	rec.UpdatedAt = now
	r.recs[rec.ID] = stored(rec)
	return rec, nil
}

func (r *records) Load(ctx context.Context, id string) (record.Record, error) {
	if err := r.lock(ctx); err != nil {
		return record.Record{}, err
	}
	defer r.mu.Unlock()
	rec, ok := r.recs[id]
	if !ok {
		return record.Record{}, steaderr.ErrNotFound
	}
	return stored(rec), nil
}

func (r *records) Delete(ctx context.Context, id string) error {
	if err := r.lock(ctx); err != nil {
		return err
	}
	defer r.mu.Unlock()
	if rec, ok := r.recs[id]; ok {
		r.deleted[rec.Group] = max(r.deleted[rec.Group], rec.Version)
		delete(r.recs, id)
	}
	return nil
}

// claimable returns up to limit records of group claimable at now, in id
// order. The caller holds mu.
func (r *records) claimable(group string, now time.Time, limit int) []record.Record {
	var out []record.Record
	for _, rec := range r.recs {
		if rec.Group == group && rec.Claimable(now) {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, byID)
	return out[:min(limit, len(out))]
}

func (r *records) ListClaimable(ctx context.Context, p record.ListParams) ([]record.Record, error) {
	if err := r.lock(ctx); err != nil {
		return nil, err
	}
	defer r.mu.Unlock()
	out := r.claimable(p.Group, clock.OrNow(p.Now), p.Limit)
	for i := range out {
		out[i] = stored(out[i])
	}
	return out, nil
}

func (r *records) ListLeased(ctx context.Context, p record.ListLeasedParams) ([]record.Record, error) {
	if err := r.lock(ctx); err != nil {
		return nil, err
	}
	defer r.mu.Unlock()
	now := clock.OrNow(p.Now)
	var out []record.Record
	for _, rec := range r.recs {
		if rec.Group == p.Group && rec.ID > p.After && !rec.Status.Parked() && rec.Lease.Held(now) {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, byID)
	out = out[:min(p.Limit, len(out))]
	for i := range out {
		out[i] = stored(out[i])
	}
	return out, nil
}

// claim leases rec to owner; the caller holds mu.
func (r *records) claim(rec record.Record, owner string, ttl time.Duration, now time.Time) record.Record {
	rec.Version++
	rec.Lease = record.Lease{Owner: owner, Incarnation: rec.Lease.Incarnation + 1, Expiry: now.Add(ttl)}
	rec.UpdatedAt = now
	r.recs[rec.ID] = rec
	return stored(rec)
}

func (r *records) Claim(ctx context.Context, p record.ClaimParams) (record.Record, error) {
	if err := r.lock(ctx); err != nil {
		return record.Record{}, err
	}
	defer r.mu.Unlock()
	now := clock.OrNow(p.Now)
	rec, exists := r.recs[p.ID]
	if err := check.Claim(p.Group, p.Owner, now, rec, exists); err != nil {
		return record.Record{}, err
	}
	return r.claim(rec, p.Owner, p.TTL, now), nil
}

func (r *records) ClaimNext(ctx context.Context, p record.ClaimNextParams) ([]record.Record, error) {
	if err := r.lock(ctx); err != nil {
		return nil, err
	}
	defer r.mu.Unlock()
	now := clock.OrNow(p.Now)
	// Expired leases first, earliest expiry first; then no lease, by id.
	var expired, free []record.Record
	for _, rec := range r.recs {
		switch {
		case rec.Group != p.Group || !rec.Claimable(now):
		case rec.Lease.Owner == "":
			free = append(free, rec)
		default:
			expired = append(expired, rec)
		}
	}
	slices.SortFunc(expired, func(a, b record.Record) int {
		return cmp.Or(a.Lease.Expiry.Compare(b.Lease.Expiry), strings.Compare(a.ID, b.ID))
	})
	slices.SortFunc(free, byID)
	out := append(expired, free...)
	out = out[:min(p.N, len(out))]
	for i, rec := range out {
		out[i] = r.claim(rec, p.Owner, p.TTL, now)
	}
	slices.SortFunc(out, byID)
	return out, nil
}

func byID(a, b record.Record) int { return strings.Compare(a.ID, b.ID) }

func (r *records) Renew(ctx context.Context, p record.RenewParams) (record.Lease, error) {
	if err := r.lock(ctx); err != nil {
		return record.Lease{}, err
	}
	defer r.mu.Unlock()
	p.Now = clock.OrNow(p.Now)
	rec, exists := r.recs[p.ID]
	if err := check.Renew(p, rec, exists); err != nil {
		return record.Lease{}, err
	}
	rec.Lease.Expiry = p.Now.Add(p.TTL)
	r.recs[rec.ID] = rec
	return rec.Lease, nil
}

func (r *records) Probe(ctx context.Context, p record.ProbeParams) (record.Probe, error) {
	if err := r.lock(ctx); err != nil {
		return record.Probe{}, err
	}
	defer r.mu.Unlock()
	now := clock.OrNow(p.Now)
	var probe record.Probe
	for _, rec := range r.recs {
		switch {
		case rec.Group != p.Group || rec.Status.Parked():
		case !rec.Lease.Held(now):
			return record.Probe{Claimable: true}, nil
		case probe.Until == 0 || rec.Lease.Expiry.Sub(now) < probe.Until:
			probe.Until = rec.Lease.Expiry.Sub(now)
		}
	}
	return probe, nil
}

// WatchClaimable returns a nil channel: the memory engine has none, so waiters
// poll.
func (r *records) WatchClaimable(ctx context.Context, _ string) (<-chan struct{}, bool, func(), error) {
	return nil, false, func() {}, r.e.check(ctx)
}
