package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/record"
)

// recordMetamorphicOps is the length of one random record operation
// sequence.
const recordMetamorphicOps = 400

// recordMetamorphic runs one seeded random sequence of record operations
// against the engine and the in-memory reference, both on one test clock,
// and compares every result: same operations, same results.
func recordMetamorphic(t *testing.T, h Harness) {
	seed := metamorphicSeed()
	fake := clock.NewFake(clock.FakeStart)
	opts := record.Options{Now: fake.Now}
	subjectEng := newEngine(t, h)
	refEng := memory.New()
	t.Cleanup(func() { _ = refEng.Close() })
	subject := recTarget{record.NewStore(subjectEng.Records(), opts), subjectEng.Records()}
	ref := recTarget{record.NewStore(refEng.Records(), opts), refEng.Records()}

	g := &recGen{rng: rand.New(rand.NewPCG(uint64(seed), 0x7ec0)), clock: fake, ref: ref.store}
	runMetamorphic(t, seed, recordMetamorphicOps, func(int) metamorphicStep {
		o := g.next(t.Context())
		if o.advance > 0 {
			fake.Advance(o.advance)
			return metamorphicStep{name: o.name}
		}
		return metamorphicStep{name: o.name, got: o.apply(t.Context(), subject), want: o.apply(t.Context(), ref), compare: true}
	})
}

// recTarget is one side of the comparison.
type recTarget struct {
	store *record.Store
	eng   record.Backend
}

// recOp is one random operation: apply runs it on a target.
type recOp struct {
	name    string
	advance time.Duration // > 0: move the clock instead
	apply   func(ctx context.Context, t recTarget) outcome
}

// recGen generates record operations, reading the reference's state to
// make plausible ones (mostly from the current version, sometimes not).
type recGen struct {
	rng   *rand.Rand
	clock *clock.Fake
	ref   *record.Store
}

var (
	recGenIDs     = []string{"a", "b", "c", "d", "e", "f"}
	recGenGroups  = []string{"g1", "g2", "g3"}
	recGenOwners  = []string{"o1", "o2", "o3"}
	recGenTenants = []string{"", "t1", "t2"}
	recGenStatus  = []record.Status{record.Active, record.Active, record.Suspended, record.Completed, record.Failed, record.Canceled, "custom"}
)

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func (g *recGen) ttl() time.Duration {
	return time.Duration(1+g.rng.IntN(120)) * time.Second
}

func (g *recGen) next(ctx context.Context) recOp {
	id, group, owner := pick(g.rng, recGenIDs), pick(g.rng, recGenGroups), pick(g.rng, recGenOwners)
	switch n := g.rng.IntN(100); {
	case n < 5:
		d := time.Duration(g.rng.IntN(90_000_000)) * time.Microsecond
		return recOp{name: fmt.Sprintf("advance clock %v", d), advance: d}
	case n < 10:
		return recOp{name: fmt.Sprintf("RegisterGroup(%s)", group), apply: func(ctx context.Context, t recTarget) outcome {
			return done(t.store.RegisterGroup(ctx, group))
		}}
	case n < 35:
		rec := g.saveRecord(ctx, id)
		return recOp{name: fmt.Sprintf("Save(%s)", renderRecord(rec)), apply: func(ctx context.Context, t recTarget) outcome {
			got, err := t.store.Save(ctx, rec)
			return result(renderRecord(got), err)
		}}
	case n < 45:
		return recOp{name: fmt.Sprintf("Load(%s)", id), apply: func(ctx context.Context, t recTarget) outcome {
			got, err := t.store.Load(ctx, id)
			return result(renderRecord(got), err)
		}}
	case n < 50:
		return recOp{name: fmt.Sprintf("Delete(%s)", id), apply: func(ctx context.Context, t recTarget) outcome {
			return done(t.store.Delete(ctx, id))
		}}
	case n < 60:
		at := time.Time{}
		if g.rng.IntN(2) == 0 {
			at = g.clock.Now().Add(time.Duration(g.rng.IntN(240)-120) * time.Second)
		}
		limit := g.rng.IntN(5)
		if g.rng.IntN(2) == 0 {
			after := ""
			if g.rng.IntN(2) == 0 {
				after = id
			}
			return recOp{name: fmt.Sprintf("ListLeased(%s, %q, %v, %d)", group, after, at, limit), apply: func(ctx context.Context, t recTarget) outcome {
				got, err := t.store.ListLeased(ctx, group, after, at, limit)
				return result(renderRecords(got), err)
			}}
		}
		return recOp{name: fmt.Sprintf("ListClaimable(%s, %v, %d)", group, at, limit), apply: func(ctx context.Context, t recTarget) outcome {
			got, err := t.store.ListClaimable(ctx, group, at, limit)
			return result(renderRecords(got), err)
		}}
	case n < 72:
		if g.rng.IntN(3) > 0 { // mostly the record's own group
			if rec, err := g.ref.Load(ctx, id); err == nil {
				group = rec.Group
			}
		}
		ttl := g.ttl()
		return recOp{name: fmt.Sprintf("Claim(%s, %s, %s, %v)", group, id, owner, ttl), apply: func(ctx context.Context, t recTarget) outcome {
			got, err := t.store.Claim(ctx, group, id, owner, ttl)
			return result(renderRecord(got), err)
		}}
	case n < 82:
		ttl, count := g.ttl(), g.rng.IntN(4)
		return recOp{name: fmt.Sprintf("ClaimNext(%s, %s, %v, %d)", group, owner, ttl, count), apply: func(ctx context.Context, t recTarget) outcome {
			got, err := t.store.ClaimNext(ctx, group, owner, ttl, count)
			return result(renderRecords(got), err)
		}}
	case n < 92:
		rec, err := g.ref.Load(ctx, id)
		if err != nil {
			rec = record.Record{ID: id, Group: group, Lease: record.Lease{Owner: owner, Incarnation: 1}}
		}
		switch g.rng.IntN(5) {
		case 0:
			rec.Lease.Owner = owner
		case 1:
			rec.Lease.Incarnation = g.rng.Int64N(4)
		}
		if rec.Lease.Owner == "" {
			rec.Lease.Owner = owner
		}
		ttl := g.ttl()
		return recOp{name: fmt.Sprintf("Renew(%s, %q/%d, %v)", id, rec.Lease.Owner, rec.Lease.Incarnation, ttl), apply: func(ctx context.Context, t recTarget) outcome {
			got, err := t.store.Renew(ctx, rec, ttl)
			return result(renderLease(got), err)
		}}
	default:
		at := stamp(g.clock.Now())
		return recOp{name: fmt.Sprintf("Probe(%s)", group), apply: func(ctx context.Context, t recTarget) outcome {
			got, err := t.eng.Probe(ctx, record.ProbeParams{Group: group, Now: at})
			return result(fmt.Sprintf("%+v", got), err)
		}}
	}
}

// saveRecord returns a record to save under id: mostly the stored one,
// changed, sometimes a new or stale one.
func (g *recGen) saveRecord(ctx context.Context, id string) record.Record {
	rec, err := g.ref.Load(ctx, id)
	if err != nil || g.rng.IntN(8) == 0 {
		rec = record.Record{ID: id, Group: pick(g.rng, recGenGroups)}
		if g.rng.IntN(3) == 0 {
			rec.Version = g.rng.Int64N(5) // usually a conflict
		}
		if g.rng.IntN(3) == 0 { // created with a lease
			rec.Lease = record.Lease{
				Owner:       pick(g.rng, recGenOwners),
				Incarnation: g.rng.Int64N(3),
				Expiry:      g.clock.Now().Add(time.Duration(g.rng.IntN(240)-120) * time.Second),
			}
		}
	}
	rec.Tenant = pick(g.rng, recGenTenants)
	rec.Status = pick(g.rng, recGenStatus)
	rec.Payload = fmt.Appendf(nil, "payload %d", g.rng.IntN(1000))
	switch g.rng.IntN(10) {
	case 0:
		rec.Lease.Owner = "" // release
		rec.Lease.Expiry = g.clock.Now()
	case 1:
		rec.Version-- // stale
	case 2:
		rec.Lease.Incarnation++ // not the stored grant
	case 3:
		rec.Group = pick(g.rng, recGenGroups)
	}
	return rec
}

func done(err error) outcome {
	if err != nil {
		return failed(err)
	}
	return succeeded("ok")
}

func result(out string, err error) outcome {
	if err != nil {
		return failed(err)
	}
	return succeeded("%s", out)
}

func renderRecord(r record.Record) string {
	return fmt.Sprintf("{%s %s %q %s %q v%d %s upd %s}", r.ID, r.Group, r.Tenant, r.Status, r.Payload, r.Version,
		renderLease(r.Lease), r.UpdatedAt.Format(time.RFC3339Nano))
}

func renderLease(l record.Lease) string {
	return fmt.Sprintf("lease %q/%d until %s", l.Owner, l.Incarnation, l.Expiry.Format(time.RFC3339Nano))
}

func renderRecords(recs []record.Record) string {
	parts := make([]string, len(recs))
	for i, r := range recs {
		parts[i] = renderRecord(r)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
