package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// testRecord covers the record rules (docs/design.md §6), through the portable
// store with an injected clock, so no test waits for time to pass.
func testRecord(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"RoundTrip", recordRoundTrip},
		{"CreateExisting", recordCreateExisting},
		{"UpdateAbsent", recordUpdateAbsent},
		{"CAS", recordCAS},
		{"SaveLease", recordSaveLease},
		{"Isolation", recordIsolation},
		{"Delete", recordDelete},
		{"Groups", recordGroups},
		{"Tenants", recordTenants},
		{"ListClaimable", recordListClaimable},
		{"ListLeased", recordListLeased},
		{"Order", recordOrder},
		{"Claim", recordClaim},
		{"ClaimNext", recordClaimNext},
		{"ClaimNextConcurrent", recordClaimNextConcurrent},
		{"Renew", recordRenew},
		{"IncarnationLimit", recordIncarnationLimit},
		{"LeaseEndOfTime", recordLeaseEndOfTime},
		{"SaveStress", recordSaveStress},
		{"SaveAll", recordSaveAll},
		{"Zombie", recordZombie},
		{"ZombieAcrossRecreate", recordZombieAcrossRecreate},
		{"DatabaseClock", recordDatabaseClock},
		{"Wait", recordWait},
		{"BadInput", recordBadInput},
		{"Cancelled", recordCancelled},
		{"Closed", recordClosed},
		{"Virgin", recordVirgin},
		{"Linearizable", recordLinearizable},
		{"Metamorphic", recordMetamorphic},
	})
}

// recBundle is what record tests start from: a fresh engine, its record
// seam and a store over it on a test clock.
type recBundle struct {
	eng   engine.Engine
	recs  record.Backend
	store *record.Store
	clock *clock.Fake
}

func recSetup(t *testing.T, h Harness) *recBundle {
	t.Helper()
	return recBundleOf(newEngine(t, h))
}

func recBundleOf(eng engine.Engine) *recBundle {
	c := clock.NewFake(clock.FakeStart)
	return &recBundle{eng: eng, recs: eng.Records(), store: record.NewStore(eng.Records(), record.Options{Now: c.Now}), clock: c}
}

// stamp returns t as stores keep it: in UTC, truncated to the microsecond.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// now is the store's time: the clock, truncated as stores truncate.
func (b *recBundle) now() time.Time { return stamp(b.clock.Now()) }

// group registers group and returns it.
func (b *recBundle) group(t *testing.T, group string) string {
	t.Helper()
	if err := b.store.RegisterGroup(t.Context(), group); err != nil {
		t.Fatalf("RegisterGroup(%q): %v", group, err)
	}
	return group
}

// newRecord returns a new active record of group, with a payload.
func newRecord(id, group string) record.Record {
	return record.Record{ID: id, Group: group, Status: record.Active, Payload: testValue("record "+id, 16)}
}

func (b *recBundle) save(t *testing.T, rec record.Record) record.Record {
	t.Helper()
	got, err := b.store.Save(t.Context(), rec)
	if err != nil {
		t.Fatalf("Save(%q, version %d): %v", rec.ID, rec.Version, err)
	}
	return got
}

func (b *recBundle) load(t *testing.T, id string) record.Record {
	t.Helper()
	got, err := b.store.Load(t.Context(), id)
	if err != nil {
		t.Fatalf("Load(%q): %v", id, err)
	}
	return got
}

func (b *recBundle) claim(t *testing.T, group, id, owner string, ttl time.Duration) record.Record {
	t.Helper()
	got, err := b.store.Claim(t.Context(), group, id, owner, ttl)
	if err != nil {
		t.Fatalf("Claim(%q, %q, %q): %v", group, id, owner, err)
	}
	return got
}

func (b *recBundle) claimable(t *testing.T, group string, now time.Time, limit int) []record.Record {
	t.Helper()
	got, err := b.store.ListClaimable(t.Context(), group, now, limit)
	if err != nil {
		t.Fatalf("ListClaimable(%q, %v, %d): %v", group, now, limit, err)
	}
	return got
}

func (b *recBundle) claimNext(t *testing.T, group, owner string, ttl time.Duration, n int) []record.Record {
	t.Helper()
	got, err := b.store.ClaimNext(t.Context(), group, owner, ttl, n)
	if err != nil {
		t.Fatalf("ClaimNext(%q, %q, %d): %v", group, owner, n, err)
	}
	return got
}

// wantAbsent checks that id is not stored.
func (b *recBundle) wantAbsent(t *testing.T, id string) {
	t.Helper()
	_, err := b.store.Load(t.Context(), id)
	wantErr(t, err, steaderr.ErrNotFound, fmt.Sprintf("Load(%q)", id))
}

// diffRecord describes how got differs from want, or returns "". Times
// compare as instants, and got's must be in UTC; got's payload must not be
// nil.
func diffRecord(got, want record.Record) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s %v, want %v", field, g, w)) }
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.Group != want.Group {
		add("Group", got.Group, want.Group)
	}
	if got.Tenant != want.Tenant {
		add("Tenant", fmt.Sprintf("%q", got.Tenant), fmt.Sprintf("%q", want.Tenant))
	}
	if got.Status != want.Status {
		add("Status", got.Status, want.Status)
	}
	if got.Payload == nil || !bytes.Equal(got.Payload, want.Payload) {
		add("Payload", fmt.Sprintf("%x (nil: %v)", got.Payload, got.Payload == nil), fmt.Sprintf("%x", want.Payload))
	}
	if got.Version != want.Version {
		add("Version", got.Version, want.Version)
	}
	if got.Lease.Owner != want.Lease.Owner || got.Lease.Incarnation != want.Lease.Incarnation {
		add("Lease", fmt.Sprintf("%q/%d", got.Lease.Owner, got.Lease.Incarnation), fmt.Sprintf("%q/%d", want.Lease.Owner, want.Lease.Incarnation))
	}
	for _, tm := range []struct {
		name      string
		got, want time.Time
	}{{"Lease.Expiry", got.Lease.Expiry, want.Lease.Expiry}, {"UpdatedAt", got.UpdatedAt, want.UpdatedAt}} {
		if !tm.got.Equal(tm.want) || tm.got.Location() != time.UTC {
			add(tm.name, tm.got.Format(time.RFC3339Nano), tm.want.Format(time.RFC3339Nano))
		}
	}
	return strings.Join(d, "; ")
}

func wantRecord(t *testing.T, what string, got, want record.Record) {
	t.Helper()
	if d := diffRecord(got, want); d != "" {
		t.Fatalf("%s: %s", what, d)
	}
}

// wantIDs checks that recs are exactly the records ids, in that order.
func wantIDs(t *testing.T, what string, recs []record.Record, ids ...string) {
	t.Helper()
	got := make([]string, len(recs))
	for i, r := range recs {
		got[i] = r.ID
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("%s = %q, want %q", what, got, ids)
	}
}

func recordRoundTrip(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "round trip")
	// Every field set, the expiry in another zone and with nanoseconds:
	// it loads back as the same instant, in UTC, truncated to the
	// microsecond.
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	full := record.Record{
		ID: "full", Group: g, Tenant: "acme", Status: record.Suspended,
		Payload: []byte{0, 1, 2, 0xff, 0},
		Lease:   record.Lease{Owner: "node-1", Incarnation: 7, Expiry: time.Date(2030, 5, 6, 7, 8, 9, 987654321, zone)},
	}
	bare := record.Record{ID: "bare", Group: g, Status: record.Active} // default tenant, nil payload, no lease
	for _, rec := range []record.Record{full, bare} {
		got := b.save(t, rec)
		want := rec
		want.Version = 1
		want.UpdatedAt = b.now()
		want.Lease.Expiry = stamp(rec.Lease.Expiry)
		if want.Payload == nil {
			want.Payload = []byte{}
		}
		wantRecord(t, fmt.Sprintf("Save(%q) returned", rec.ID), got, want)
		wantRecord(t, fmt.Sprintf("Load(%q)", rec.ID), b.load(t, rec.ID), want)
		if got := b.load(t, rec.ID); got.UpdatedAt.Nanosecond()%1000 != 0 || got.Lease.Expiry.Nanosecond()%1000 != 0 {
			t.Fatalf("Load(%q): times %v, %v are not whole microseconds", rec.ID, got.UpdatedAt, got.Lease.Expiry)
		}
	}
	// The zero expiry and an expiry at the edge of the range round trip.
	edge := newRecord("edge", g)
	edge.Lease = record.Lease{Expiry: time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)}
	wantRecord(t, "Load of a far expiry", b.load(t, b.save(t, edge).ID), withSaved(edge, 1, b.now()))
	if got := b.load(t, "bare"); !got.Lease.Expiry.IsZero() {
		t.Fatalf("Load of a zero expiry = %v, want the zero time", got.Lease.Expiry)
	}
}

// withSaved returns rec as a save at now to version leaves it.
func withSaved(rec record.Record, version int64, now time.Time) record.Record {
	rec.Version = version
	rec.UpdatedAt = now
	rec.Lease.Expiry = stamp(rec.Lease.Expiry)
	if rec.Payload == nil {
		rec.Payload = []byte{}
	}
	return rec
}

func recordCreateExisting(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g, other := b.group(t, "g"), b.group(t, "other")
	stored := b.save(t, newRecord("r", g))
	b.clock.Advance(time.Second)
	for _, rec := range []record.Record{newRecord("r", g), newRecord("r", other)} {
		rec.Payload = []byte("overwrite")
		_, err := b.store.Save(t.Context(), rec)
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("create of an existing id, in group %q", rec.Group))
	}
	wantRecord(t, "Load after refused creates", b.load(t, "r"), stored)
}

func recordUpdateAbsent(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	for _, v := range []int64{1, 5} {
		rec := newRecord("absent", g)
		rec.Version = v
		_, err := b.store.Save(t.Context(), rec)
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("update of an absent record at version %d", v))
	}
	b.wantAbsent(t, "absent")
}

func recordCAS(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	v1 := b.save(t, newRecord("r", g))
	b.clock.Advance(time.Millisecond)
	next := v1
	next.Payload = []byte("second")
	next.Status = record.Failed
	v2 := b.save(t, next)
	wantRecord(t, "second save", v2, withSaved(next, 2, b.now()))

	// A save from version 1 lost the race: refused, store unchanged.
	for _, stale := range []int64{1, 3} {
		lost := v1
		lost.Version = stale
		lost.Payload = []byte("lost update")
		_, err := b.store.Save(t.Context(), lost)
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("save at version %d over version 2", stale))
	}
	wantRecord(t, "Load after refused saves", b.load(t, "r"), v2)

	// The same record saved again and again: versions count up by one.
	cur := v2
	for i := range 5 {
		cur.Payload = fmt.Appendf(nil, "step %d", i)
		cur = b.save(t, cur)
		if cur.Version != int64(3+i) {
			t.Fatalf("save %d returned version %d, want %d", i, cur.Version, 3+i)
		}
	}
}

func recordSaveLease(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.save(t, newRecord("r", g))
	held := b.claim(t, g, "r", "owner", time.Minute)

	// The holder renews, then saves the record it had before renewing:
	// the renewed expiry stays.
	b.clock.Advance(10 * time.Second)
	renewed, err := b.store.Renew(t.Context(), held, time.Minute)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	held.Payload = []byte("checkpoint")
	saved := b.save(t, held)
	want := withSaved(held, held.Version+1, b.now())
	want.Lease = renewed
	wantRecord(t, "save carrying the lease before Renew", saved, want)

	// A lease that is not the stored one is refused: another owner, a
	// lower incarnation, a higher one.
	for _, lease := range []record.Lease{
		{Owner: "intruder", Incarnation: saved.Lease.Incarnation, Expiry: saved.Lease.Expiry},
		{Owner: "owner", Incarnation: saved.Lease.Incarnation - 1, Expiry: saved.Lease.Expiry},
		{Owner: "owner", Incarnation: saved.Lease.Incarnation + 1, Expiry: saved.Lease.Expiry},
	} {
		rec := saved
		rec.Lease = lease
		_, err := b.store.Save(t.Context(), rec)
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("save with lease %+v over %+v", lease, saved.Lease))
	}
	wantRecord(t, "Load after refused lease changes", b.load(t, "r"), saved)

	// An empty owner releases: the incarnation is kept even when the
	// caller zeroed it, the expiry is as given, and the record is
	// claimable at once.
	release := saved
	release.Lease = record.Lease{}
	released := b.save(t, release)
	want = withSaved(release, saved.Version+1, b.now())
	want.Lease.Incarnation = saved.Lease.Incarnation
	wantRecord(t, "release", released, want)
	wantRecord(t, "Load after release", b.load(t, "r"), want)
	wantIDs(t, "ListClaimable after release", b.claimable(t, g, time.Time{}, 10), "r")
	if again := b.claim(t, g, "r", "next", time.Minute); again.Lease.Incarnation != saved.Lease.Incarnation+1 {
		t.Fatalf("claim after release: incarnation %d, want %d", again.Lease.Incarnation, saved.Lease.Incarnation+1)
	}
}

func recordIsolation(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	payload := []byte("original")
	rec := newRecord("r", g)
	rec.Payload = payload
	b.save(t, rec)
	want := withSaved(newRecord("r", g), 1, b.now())
	want.Payload = []byte("original")
	payload[0] = 'X' // the caller's slice, which Save returned too
	wantRecord(t, "Load after changing the saved slice", b.load(t, "r"), want)

	loaded := b.load(t, "r")
	loaded.Payload[0] = 'Y'
	listed := b.claimable(t, g, time.Time{}, 1)
	listed[0].Payload[0] = 'Z'
	wantRecord(t, "Load after changing loaded and listed payloads", b.load(t, "r"), want)

	claimed := b.claim(t, g, "r", "o", time.Minute)
	claimed.Payload[1] = 'Q'
	if got := b.load(t, "r"); !bytes.Equal(got.Payload, want.Payload) {
		t.Fatalf("Load after changing a claimed payload = %q, want %q", got.Payload, want.Payload)
	}
}

func recordDelete(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.save(t, newRecord("r", g))
	for i := range 2 {
		if err := b.store.Delete(t.Context(), "r"); err != nil {
			t.Fatalf("Delete %d: %v", i+1, err)
		}
		b.wantAbsent(t, "r")
	}
	if err := b.store.Delete(t.Context(), "never stored"); err != nil {
		t.Fatalf("Delete of an absent id: %v", err)
	}
	wantIDs(t, "ListClaimable after Delete", b.claimable(t, g, time.Time{}, 10))
	// The id is free again: a create succeeds, above every version the
	// id had (see recordZombieAcrossRecreate).
	if got := b.save(t, newRecord("r", g)); got.Version <= 1 {
		t.Fatalf("create after Delete: version %d, want above 1", got.Version)
	}
}

func recordGroups(t *testing.T, h Harness) {
	b := recSetup(t, h)
	ctx := t.Context()
	exists := func(group string) bool {
		t.Helper()
		ok, err := b.store.GroupExists(ctx, group)
		if err != nil {
			t.Fatalf("GroupExists(%q): %v", group, err)
		}
		return ok
	}
	if exists("g") {
		t.Fatal("GroupExists before RegisterGroup = true")
	}
	_, err := b.store.Save(ctx, newRecord("r", "g"))
	wantErr(t, err, steaderr.ErrUnknownGroup, "Save into an unregistered group")
	b.wantAbsent(t, "r")
	wantIDs(t, "ListClaimable of an unregistered group", b.claimable(t, "g", time.Time{}, 10))
	wantIDs(t, "ClaimNext of an unregistered group", b.claimNext(t, "g", "o", time.Minute, 10))

	b.group(t, "g")
	b.group(t, "g") // idempotent
	if !exists("g") || exists("G") {
		t.Fatal("GroupExists after RegisterGroup(\"g\"): want g registered, G not")
	}
	other := b.group(t, "other")
	saved := b.save(t, newRecord("r", "g"))
	b.save(t, newRecord("o", other))

	// Group scoping: listing and claiming see one group only.
	wantIDs(t, "ListClaimable(g)", b.claimable(t, "g", time.Time{}, 10), "r")
	wantIDs(t, "ListClaimable(other)", b.claimable(t, other, time.Time{}, 10), "o")
	wantIDs(t, "ClaimNext(other)", b.claimNext(t, other, "o", time.Minute, 10), "o")
	wantIDs(t, "ListClaimable(g) after claiming other", b.claimable(t, "g", time.Time{}, 10), "r")

	// An update naming another group is refused loud; so is a claim.
	moved := saved
	moved.Group = other
	_, err = b.store.Save(ctx, moved)
	wantErr(t, err, steaderr.ErrWrongGroup, "Save of a record into another group")
	_, err = b.store.Claim(ctx, other, "r", "o", time.Minute)
	wantErr(t, err, steaderr.ErrWrongGroup, "Claim of a record of another group")
	_, err = b.store.Claim(ctx, "unregistered", "r", "o", time.Minute)
	wantErr(t, err, steaderr.ErrWrongGroup, "Claim naming an unregistered group")
	moved.Group = "unregistered"
	_, err = b.store.Save(ctx, moved)
	wantErr(t, err, steaderr.ErrUnknownGroup, "Save naming an unregistered group")
	wantRecord(t, "Load after refused moves", b.load(t, "r"), saved)
}

func recordTenants(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g1, g2 := b.group(t, "g1"), b.group(t, "g2")
	// The same tenant names in two groups: keyed per group.
	var want []record.Record
	for _, g := range []string{g1, g2} {
		for _, tenant := range []string{"", "acme", "Acme", "globex"} {
			rec := newRecord(g+"/"+tenant, g)
			rec.Tenant = tenant
			want = append(want, withSaved(rec, 1, b.now()))
			b.save(t, rec)
		}
	}
	for _, w := range want {
		wantRecord(t, fmt.Sprintf("Load(%q)", w.ID), b.load(t, w.ID), w)
	}
	// A record moves between tenants of its group.
	moved := b.load(t, g1+"/acme")
	moved.Tenant = "initech"
	moved = b.save(t, moved)
	moved.Tenant = ""
	moved = b.save(t, moved)
	wantRecord(t, "Load after moving to the default tenant", b.load(t, moved.ID), moved)

	// The default tenant of a fresh group is created on first use, once,
	// whoever gets there first.
	g3 := b.group(t, "g3")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := b.store.Save(t.Context(), newRecord(fmt.Sprintf("concurrent-%d", i), g3)); err != nil {
				t.Errorf("concurrent first save in the default tenant: %v", err)
			}
		})
	}
	wg.Wait()
	for i := range 8 {
		if got := b.load(t, fmt.Sprintf("concurrent-%d", i)); got.Tenant != "" {
			t.Fatalf("Load(concurrent-%d).Tenant = %q, want \"\"", i, got.Tenant)
		}
	}
}

func recordListClaimable(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g, other := b.group(t, "g"), b.group(t, "other")
	now := b.now()
	type row struct {
		id        string
		status    record.Status
		lease     record.Lease
		claimable bool
	}
	rows := []row{
		{"active", record.Active, record.Lease{}, true},
		{"unknown-status", "retrying", record.Lease{}, true}, // out of the vocabulary: claimable by exclusion
		{"suspended", record.Suspended, record.Lease{}, false},
		{"completed", record.Completed, record.Lease{}, false},
		{"failed", record.Failed, record.Lease{}, false},
		{"canceled", record.Canceled, record.Lease{}, false},
		{"held", record.Active, record.Lease{Owner: "o", Incarnation: 1, Expiry: now.Add(time.Microsecond)}, false},
		{"expires-now", record.Active, record.Lease{Owner: "o", Incarnation: 1, Expiry: now}, true},
		{"expired", record.Active, record.Lease{Owner: "o", Incarnation: 1, Expiry: now.Add(-time.Hour)}, true},
		{"no-owner-future-expiry", record.Active, record.Lease{Expiry: now.Add(time.Hour)}, true},
		{"suspended-expired", record.Suspended, record.Lease{Owner: "o", Expiry: now.Add(-time.Hour)}, false},
	}
	var want []string
	for _, r := range rows {
		rec := newRecord(r.id, g)
		rec.Status, rec.Lease = r.status, r.lease
		b.save(t, rec)
		b.save(t, newRecord(r.id+"@other", other))
		if r.claimable {
			want = append(want, r.id)
		}
	}
	slices.Sort(want)
	wantIDs(t, "ListClaimable(now)", b.claimable(t, g, now, 100), want...)
	wantIDs(t, "ListClaimable(zero: the store's clock)", b.claimable(t, g, time.Time{}, 100), want...)
	wantIDs(t, "ListClaimable(limit 3)", b.claimable(t, g, now, 3), want[:3]...)
	wantIDs(t, "ListClaimable(limit 0)", b.claimable(t, g, now, 0))
	// A microsecond later "held" has expired too; an hour earlier
	// "expired" and "expires-now" were still held.
	wantIDs(t, "ListClaimable(now+1µs)", b.claimable(t, g, now.Add(time.Microsecond), 100), sortedPlus(want, "held")...)
	wantIDs(t, "ListClaimable(now-1µs)", b.claimable(t, g, now.Add(-time.Microsecond), 100), sortedMinus(want, "expires-now")...)
	// The listing is the records as stored.
	for _, got := range b.claimable(t, g, now, 100) {
		wantRecord(t, "listed "+got.ID, got, b.load(t, got.ID))
	}
	// An unknown status round trips.
	if got := b.load(t, "unknown-status"); got.Status != "retrying" {
		t.Fatalf("Load(unknown-status).Status = %q, want %q", got.Status, "retrying")
	}
}

// recordListLeased: the records of a group being worked on (not parked,
// lease held), a page at a time; with the claimable ones they are every
// record not parked.
func recordListLeased(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g, other := b.group(t, "g"), b.group(t, "other")
	now := b.now()
	held := func(expiry time.Time) record.Lease { return record.Lease{Owner: "o", Incarnation: 1, Expiry: expiry} }
	rows := []struct {
		id     string
		status record.Status
		lease  record.Lease
		leased bool
	}{
		{"free", record.Active, record.Lease{}, false},
		{"held-a", record.Active, held(now.Add(time.Microsecond)), true},
		{"held-b", "retrying", held(now.Add(time.Hour)), true},
		{"held-c", record.Active, held(now.Add(time.Minute)), true},
		{"held-d", record.Active, held(now.Add(2 * time.Minute)), true},
		{"expires-now", record.Active, held(now), false},
		{"expired", record.Active, held(now.Add(-time.Hour)), false},
		{"no-owner-future-expiry", record.Active, record.Lease{Expiry: now.Add(time.Hour)}, false},
		{"suspended-held", record.Suspended, held(now.Add(time.Hour)), false},
		{"completed-held", record.Completed, held(now.Add(time.Hour)), false},
	}
	var want []string
	for _, r := range rows {
		rec := newRecord(r.id, g)
		rec.Status, rec.Lease = r.status, r.lease
		b.save(t, rec)
		theirs := newRecord(r.id+"@other", other)
		theirs.Lease = held(now.Add(time.Hour))
		b.save(t, theirs)
		if r.leased {
			want = append(want, r.id)
		}
	}
	// A claim leases; a save that releases the lease ends it.
	b.save(t, newRecord("claimed", g))
	b.save(t, newRecord("released", g))
	b.claim(t, g, "claimed", "w", time.Minute)
	rel := b.claim(t, g, "released", "w", time.Minute)
	rel.Lease.Owner = ""
	b.save(t, rel)
	want = sortedPlus(want, "claimed")

	list := func(group, after string, at time.Time, limit int) []record.Record {
		t.Helper()
		got, err := b.store.ListLeased(t.Context(), group, after, at, limit)
		if err != nil {
			t.Fatalf("ListLeased(%q, after %q, %v, %d): %v", group, after, at, limit, err)
		}
		return got
	}
	wantIDs(t, "ListLeased(now)", list(g, "", now, 100), want...)
	wantIDs(t, "ListLeased(zero: the store's clock)", list(g, "", time.Time{}, 100), want...)
	for _, got := range list(g, "", now, 100) {
		wantRecord(t, "listed "+got.ID, got, b.load(t, got.ID))
	}
	// Claimable and leased are every record not parked, and never overlap.
	all := append(b.claimable(t, g, now, 100), list(g, "", now, 100)...)
	slices.SortFunc(all, func(a, b record.Record) int { return strings.Compare(a.ID, b.ID) })
	wantIDs(t, "ListClaimable + ListLeased", all, "claimed", "expired", "expires-now", "free", "held-a", "held-b", "held-c", "held-d", "no-owner-future-expiry", "released")
	// Pages of two, each after the last id of the one before.
	var paged []string
	for after := ""; ; {
		page := list(g, after, now, 2)
		if len(page) > 2 {
			t.Fatalf("ListLeased(limit 2) returned %d records", len(page))
		}
		for _, rec := range page {
			paged = append(paged, rec.ID)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("ListLeased in pages of 2 = %q, want %q", paged, want)
	}
	wantIDs(t, "ListLeased(after held-b)", list(g, "held-b", now, 100), "held-c", "held-d")
	wantIDs(t, "ListLeased(after an absent id)", list(g, "held-bb", now, 100), "held-c", "held-d")
	wantIDs(t, "ListLeased(after the last)", list(g, "held-d", now, 100))
	// A lease is not held at exactly its expiry.
	wantIDs(t, "ListLeased(now+1µs)", list(g, "", now.Add(time.Microsecond), 100), sortedMinus(want, "held-a")...)
	wantIDs(t, "ListLeased(now-1µs)", list(g, "", now.Add(-time.Microsecond), 100), sortedPlus(want, "expires-now")...)
	wantIDs(t, "ListLeased(group never registered)", list(g+"-never", "", now, 100))
	wantIDs(t, "ListLeased(other)", list(other, "", now, 3), "completed-held@other", "expired@other", "expires-now@other")
}

func sortedPlus(ids []string, id string) []string {
	out := append(slices.Clone(ids), id)
	slices.Sort(out)
	return out
}

func sortedMinus(ids []string, id string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(s string) bool { return s == id })
}

// recordOrder checks that listing and claiming go in byte order of id,
// whatever the insertion order and the database's collation.
func recordOrder(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	ids := []string{"b", "B", "a", "a0", "a-", "ä", "Z", "z", "10", "9", "_", "~", "é", "e"}
	for _, id := range ids {
		b.save(t, newRecord(id, g))
	}
	want := slices.Clone(ids)
	slices.Sort(want) // Go compares strings bytewise
	wantIDs(t, "ListClaimable", b.claimable(t, g, time.Time{}, 100), want...)
	var claimed []record.Record
	for range 5 {
		claimed = append(claimed, b.claimNext(t, g, "o", time.Minute, 3)...)
	}
	wantIDs(t, "ClaimNext by threes", claimed, want...)
}

func recordClaim(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	ctx := t.Context()
	saved := b.save(t, newRecord("r", g))

	b.clock.Advance(time.Second)
	a := b.claim(t, g, "r", "a", time.Minute)
	want := saved
	want.Version, want.UpdatedAt = 2, b.now()
	want.Lease = record.Lease{Owner: "a", Incarnation: 1, Expiry: b.now().Add(time.Minute)}
	wantRecord(t, "Claim", a, want)
	wantRecord(t, "Load after Claim", b.load(t, "r"), want)

	// Another owner is refused while a's lease is live, up to its last
	// microsecond.
	b.clock.Advance(time.Minute - time.Microsecond)
	_, err := b.store.Claim(ctx, g, "r", "b", time.Minute)
	wantErr(t, err, steaderr.ErrLeased, "Claim of a live lease by another owner")
	// The holder may claim again: a new grant.
	a2 := b.claim(t, g, "r", "a", time.Minute)
	if a2.Lease.Incarnation != 2 || a2.Version != 3 {
		t.Fatalf("re-claim by the holder: incarnation %d, version %d; want 2, 3", a2.Lease.Incarnation, a2.Version)
	}
	// At exactly its expiry the lease is expired: b takes it.
	b.clock.Advance(time.Minute)
	bRec := b.claim(t, g, "r", "b", 30*time.Second)
	if bRec.Lease.Owner != "b" || bRec.Lease.Incarnation != 3 || bRec.Version != 4 || !bRec.Lease.Expiry.Equal(b.now().Add(30*time.Second)) {
		t.Fatalf("Claim at the expiry instant = %+v, want b's lease, incarnation 3, version 4", bRec)
	}

	_, err = b.store.Claim(ctx, g, "absent", "a", time.Minute)
	wantErr(t, err, steaderr.ErrNotFound, "Claim of an absent record")

	// Claim ignores the status: it is how a suspended record resumes.
	susp := newRecord("suspended", g)
	susp.Status = record.Suspended
	b.save(t, susp)
	if got := b.claim(t, g, "suspended", "a", time.Minute); got.Status != record.Suspended || got.Lease.Owner != "a" {
		t.Fatalf("Claim of a suspended record = %+v", got)
	}
}

func recordClaimNext(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g, other := b.group(t, "g"), b.group(t, "other")
	for _, id := range []string{"r1", "r2", "r3", "r4", "r5"} {
		b.save(t, newRecord(id, g))
	}
	parked := newRecord("r0-completed", g)
	parked.Status = record.Completed
	b.save(t, parked)
	b.save(t, newRecord("r0-other-group", other))
	b.claim(t, g, "r2", "someone", time.Hour)

	b.clock.Advance(time.Second)
	first := b.claimNext(t, g, "a", time.Minute, 2)
	wantIDs(t, "first ClaimNext(2)", first, "r1", "r3")
	for _, got := range first {
		want := withSaved(newRecord(got.ID, g), 2, b.now())
		want.Lease = record.Lease{Owner: "a", Incarnation: 1, Expiry: b.now().Add(time.Minute)}
		wantRecord(t, "claimed "+got.ID, got, want)
		wantRecord(t, "Load of claimed "+got.ID, b.load(t, got.ID), want)
	}
	wantIDs(t, "ClaimNext(0)", b.claimNext(t, g, "b", time.Minute, 0))
	wantIDs(t, "second ClaimNext(10)", b.claimNext(t, g, "b", time.Minute, 10), "r4", "r5")
	wantIDs(t, "third ClaimNext", b.claimNext(t, g, "b", time.Minute, 10))

	// When a's leases expire, c recovers them, a grant later.
	b.clock.Advance(time.Minute)
	again := b.claimNext(t, g, "c", time.Minute, 10)
	wantIDs(t, "ClaimNext after a's leases expired", again, "r1", "r3", "r4", "r5")
	for _, got := range again {
		if got.Lease.Incarnation != 2 || got.Version != 3 {
			t.Fatalf("recovered %s: incarnation %d, version %d; want 2, 3", got.ID, got.Lease.Incarnation, got.Version)
		}
	}

	// Claim order: expired leases first, earliest expiry first, then
	// records without a lease, by id.
	q := b.group(t, "order")
	for _, id := range []string{"a1", "a2", "z0", "z1"} {
		b.save(t, newRecord(id, q))
	}
	b.claim(t, q, "z0", "x", 2*time.Minute)
	b.claim(t, q, "z1", "x", time.Minute)
	b.clock.Advance(2 * time.Minute)
	for _, want := range []string{"z1", "z0", "a1", "a2"} {
		wantIDs(t, "ClaimNext(1) in claim order", b.claimNext(t, q, "y", time.Hour, 1), want)
	}
}

// recordClaimNextConcurrent races claimers: together they claim every
// record exactly once.
func recordClaimNextConcurrent(t *testing.T, h Harness) {
	const records, claimers = 60, 8
	b := recSetup(t, h)
	g := b.group(t, "g")
	for i := range records {
		b.save(t, newRecord(fmt.Sprintf("r%03d", i), g))
	}
	var mu sync.Mutex
	owners := map[string]string{}
	var wg sync.WaitGroup
	for c := range claimers {
		owner := fmt.Sprintf("claimer-%d", c)
		wg.Go(func() {
			for {
				got, err := b.store.ClaimNext(t.Context(), g, owner, time.Hour, 1+c%4)
				if err != nil {
					t.Errorf("%s: ClaimNext: %v", owner, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, rec := range got {
					if prev, dup := owners[rec.ID]; dup {
						t.Errorf("%s claimed %s, already claimed by %s", owner, rec.ID, prev)
					}
					owners[rec.ID] = owner
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(owners) != records {
		t.Fatalf("claimers claimed %d records, want %d", len(owners), records)
	}
	for id, owner := range owners {
		if got := b.load(t, id); got.Lease.Owner != owner || got.Lease.Incarnation != 1 {
			t.Fatalf("Load(%s).Lease = %+v, want %s's, incarnation 1", id, got.Lease, owner)
		}
	}
}

func recordRenew(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g, other := b.group(t, "g"), b.group(t, "other")
	ctx := t.Context()
	b.save(t, newRecord("r", g))
	held := b.claim(t, g, "r", "a", time.Minute)

	b.clock.Advance(50 * time.Second)
	lease, err := b.store.Renew(ctx, held, 2*time.Minute)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	want := held
	want.Lease.Expiry = b.now().Add(2 * time.Minute) // a full window from now
	if lease != want.Lease {
		t.Fatalf("Renew = %+v, want %+v", lease, want.Lease)
	}
	wantRecord(t, "Load after Renew (version and UpdatedAt unchanged)", b.load(t, "r"), want)

	// A lapsed lease nobody took renews: the grant is still the newest.
	b.clock.Advance(3 * time.Minute)
	if _, err := b.store.Renew(ctx, held, time.Minute); err != nil {
		t.Fatalf("Renew of a lapsed lease nobody claimed: %v", err)
	}

	wrongGroup := held
	wrongGroup.Group = other
	_, err = b.store.Renew(ctx, wrongGroup, time.Minute)
	wantErr(t, err, steaderr.ErrWrongGroup, "Renew naming another group")

	// Once another owner claimed it, the old grant is lost: leased while
	// the new lease is live, a conflict once it is released.
	b.clock.Advance(time.Minute)
	bRec := b.claim(t, g, "r", "b", time.Minute)
	_, err = b.store.Renew(ctx, held, time.Minute)
	wantErr(t, err, steaderr.ErrLeased, "Renew of a grant another owner superseded")
	aAgain := b.claim(t, g, "r", "b", time.Minute) // b re-claims: b's old grant is stale
	_, err = b.store.Renew(ctx, bRec, time.Minute)
	wantErr(t, err, steaderr.ErrLeased, "Renew of a grant the same owner superseded")
	aAgain.Lease.Owner = ""
	b.save(t, aAgain)
	_, err = b.store.Renew(ctx, held, time.Minute)
	wantErr(t, err, steaderr.ErrConflict, "Renew of a released lease")

	if err := b.store.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	_, err = b.store.Renew(ctx, held, time.Minute)
	wantErr(t, err, steaderr.ErrNotFound, "Renew of a deleted record")
}

// recordIncarnationLimit saves records at the edge of the incarnation
// range: above record.MaxIncarnation a save is refused and changes
// nothing; at it, the record claims like any other and never holds up its
// group.
func recordIncarnationLimit(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	ctx := t.Context()
	for _, inc := range []int64{record.MaxIncarnation + 1, math.MaxInt64} {
		rec := newRecord("over", g)
		rec.Lease = record.Lease{Owner: "o", Incarnation: inc, Expiry: b.now().Add(-time.Minute)}
		_, err := b.store.Save(ctx, rec)
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprint("Save create, incarnation ", inc))
		b.wantAbsent(t, "over")
	}
	// At the limit, with an expired lease (recovery work first) and beside
	// a record without one.
	top := newRecord("top", g)
	top.Lease = record.Lease{Owner: "o", Incarnation: record.MaxIncarnation, Expiry: b.now().Add(-time.Minute)}
	b.save(t, top)
	b.save(t, newRecord("plain", g))
	got := b.claimNext(t, g, "p", time.Minute, 2)
	wantIDs(t, "ClaimNext beside a record at the limit", got, "plain", "top")
	if got[1].Lease.Incarnation != record.MaxIncarnation+1 {
		t.Fatalf("claimed incarnation %d, want %d", got[1].Lease.Incarnation, int64(record.MaxIncarnation)+1)
	}
	// The holder checkpoints with its incarnation, now above the limit a
	// create may give, and releases the lease: updates carrying the stored
	// grant are not refused.
	held := got[1]
	held.Payload = []byte("checkpoint")
	held = b.save(t, held)
	held.Lease.Owner = ""
	b.save(t, held)
	// A version at the top of its type is merely stale.
	maxed := held
	maxed.Version = math.MaxInt64
	_, err := b.store.Save(ctx, maxed)
	wantErr(t, err, steaderr.ErrConflict, "Save at version MaxInt64")
	res := b.store.SaveAll(ctx, []record.Record{maxed})
	wantErr(t, res[0].Err, steaderr.ErrConflict, "SaveAll at version MaxInt64")
	again := b.claim(t, g, "top", "q", time.Minute)
	if again.Lease.Incarnation != record.MaxIncarnation+2 {
		t.Fatalf("claimed again: incarnation %d, want %d", again.Lease.Incarnation, int64(record.MaxIncarnation)+2)
	}
	if loaded := b.load(t, "top"); loaded.Lease.Incarnation != again.Lease.Incarnation {
		t.Fatalf("Load: incarnation %d, want %d", loaded.Lease.Incarnation, again.Lease.Incarnation)
	}
}

// recordZombie plays the lapsed owner: its checkpoint, from the version it
// read before another owner claimed the record, never lands.
func recordZombie(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.save(t, newRecord("r", g))
	a := b.claim(t, g, "r", "a", time.Minute)
	a.Payload = []byte("a: step 1")
	a = b.save(t, a)

	b.clock.Advance(time.Minute) // a pauses; its lease lapses
	bRec := b.claimNext(t, g, "b", time.Minute, 1)[0]
	if bRec.Lease.Incarnation != a.Lease.Incarnation+1 {
		t.Fatalf("b's incarnation %d, want a's + 1 = %d", bRec.Lease.Incarnation, a.Lease.Incarnation+1)
	}
	bRec.Payload = []byte("b: step 2")
	bRec = b.save(t, bRec)

	a.Payload = []byte("a: step 2 (zombie)")
	_, err := b.store.Save(t.Context(), a)
	wantErr(t, err, steaderr.ErrConflict, "the lapsed owner's save")
	a.Status = record.Completed
	_, err = b.store.Save(t.Context(), a)
	wantErr(t, err, steaderr.ErrConflict, "the lapsed owner's completion")
	_, err = b.store.Renew(t.Context(), a, time.Minute)
	wantErr(t, err, steaderr.ErrLeased, "the lapsed owner's renewal")
	wantRecord(t, "Load after the zombie's attempts", b.load(t, "r"), bRec)
}

// recordLeaseEndOfTime: a claim or renewal whose lease would end past the
// last storable instant (year 9999) is refused with ErrInvalidArgument and
// changes nothing, rather than storing a lease no save could carry.
func recordLeaseEndOfTime(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.clock.Set(time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC))
	b.save(t, newRecord("free", g))
	b.save(t, newRecord("held", g))
	held := b.claim(t, g, "held", "o", time.Minute)
	free := b.load(t, "free")
	ctx := t.Context()
	for _, ttl := range []time.Duration{2 * time.Hour, math.MaxInt64} {
		_, err := b.store.Claim(ctx, g, "free", "o", ttl)
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("Claim with ttl %v", ttl))
		_, err = b.store.ClaimNext(ctx, g, "o", ttl, 2)
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("ClaimNext with ttl %v", ttl))
		_, err = b.store.Renew(ctx, held, ttl)
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("Renew with ttl %v", ttl))
	}
	wantRecord(t, "the unclaimed record after the refused calls", b.load(t, "free"), free)
	wantRecord(t, "the held record after the refused calls", b.load(t, "held"), held)
	// The lease that fits is stored, and its holder can save.
	held.Payload = []byte("x")
	b.save(t, held)
}

// recordZombieAcrossRecreate plays a lapsed owner whose record was deleted
// and created again under the same id: its release, from a version the old
// record had, must not overwrite the new record, however many saves the new
// one has had. Versions of an id never repeat.
func recordZombieAcrossRecreate(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.save(t, newRecord("r", g))
	a := b.claim(t, g, "r", "a", time.Minute)
	a.Payload = []byte("a: step 1")
	stale := []record.Record{a, b.save(t, a)}
	if err := b.store.Delete(t.Context(), "r"); err != nil {
		t.Fatal(err)
	}
	created := b.save(t, newRecord("r", g))
	if created.Version <= stale[1].Version {
		t.Errorf("create after Delete at version %d, not above the deleted record's %d", created.Version, stale[1].Version)
	}
	cur := b.claim(t, g, "r", "b", time.Minute)
	for range 3 {
		for _, old := range stale {
			old.Payload, old.Status, old.Lease.Owner = []byte("zombie"), record.Completed, ""
			if _, err := b.store.Save(t.Context(), old); !errors.Is(err, steaderr.ErrConflict) {
				t.Fatalf("the deleted record's release at version %d (new record at %d): %v, want ErrConflict", old.Version, cur.Version, err)
			}
		}
		wantRecord(t, "Load after the zombie's release", b.load(t, "r"), cur)
		cur.Payload = append(cur.Payload, 'b')
		cur = b.save(t, cur)
	}
}

// recordDatabaseClock uses a store without a clock: the engine's own
// stamps the write and measures the lease.
func recordDatabaseClock(t *testing.T, h Harness) {
	eng := newEngine(t, h)
	s := record.NewStore(eng.Records(), record.Options{})
	ctx := t.Context()
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, newRecord("r", "g")); err != nil {
		t.Fatal(err)
	}
	held, err := s.Claim(ctx, "g", "r", "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if held.UpdatedAt.IsZero() || !held.Lease.Expiry.Equal(held.UpdatedAt.Add(time.Hour)) {
		t.Fatalf("Claim with the engine's clock: UpdatedAt %v, expiry %v; want the expiry an hour after", held.UpdatedAt, held.Lease.Expiry)
	}
	if got, err := s.ListClaimable(ctx, "g", time.Time{}, 10); err != nil || len(got) != 0 {
		t.Fatalf("ListClaimable(the engine's now) = %d records, %v; want none", len(got), err)
	}
	_, err = s.Claim(ctx, "g", "r", "b", time.Hour)
	wantErr(t, err, steaderr.ErrLeased, "Claim of a live lease, on the engine's clock")
	if got, err := s.ListClaimable(ctx, "g", held.Lease.Expiry, 10); err != nil || len(got) != 1 {
		t.Fatalf("ListClaimable(at the expiry) = %d records, %v; want 1", len(got), err)
	}
}

// probeSignal wraps a record engine to tell when a Probe has returned.
type probeSignal struct {
	record.Backend
	probed chan struct{}
}

func (p probeSignal) Probe(ctx context.Context, params record.ProbeParams) (record.Probe, error) {
	r, err := p.Backend.Probe(ctx, params)
	select {
	case p.probed <- struct{}{}:
	default:
	}
	return r, err
}

// recordWait checks WaitClaimable: it returns at once when a record is
// claimable, when a save (made after the waiter found nothing) makes one
// claimable, when the earliest lease expires, and when ctx ends.
func recordWait(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	ctx := t.Context()
	sig := probeSignal{Backend: b.recs, probed: make(chan struct{}, 1)}
	waiter := record.NewStore(sig, record.Options{Now: b.clock.Now})
	// wait starts a waiter and returns once it has probed once.
	wait := func(ctx context.Context) <-chan error {
		select {
		case <-sig.probed:
		default:
		}
		done := make(chan error, 1)
		go func() { done <- waiter.WaitClaimable(ctx, g) }()
		select {
		case <-sig.probed:
		case err := <-done:
			done <- err
		}
		return done
	}
	waitDone := func(what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("WaitClaimable %s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("WaitClaimable %s: still waiting after 30s", what)
		}
	}

	// Nothing to claim: the wait ends with ctx.
	short, cancel := context.WithCancel(ctx)
	done := wait(short)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitClaimable after cancel = %v, want context.Canceled", err)
	}

	// A new active record wakes the waiter.
	done = wait(ctx)
	b.save(t, newRecord("new", g))
	waitDone("for a new record", done)
	waitDone("with a claimable record", wait(ctx))

	// A released lease wakes the waiter.
	held := b.claimNext(t, g, "a", time.Hour, 1)[0]
	done = wait(ctx)
	held.Lease.Owner = ""
	b.save(t, held)
	waitDone("for a released lease", done)

	// The earliest lease expiry ends the wait: the clock moves past it
	// while the waiter waits.
	b.claimNext(t, g, "a", 100*time.Millisecond, 1)
	done = wait(ctx)
	b.clock.Advance(100 * time.Millisecond)
	waitDone("for a lease expiry", done)
}

// recordBadInput feeds every method bad arguments: each fails with the
// right sentinel and changes nothing.
func recordBadInput(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.save(t, newRecord("r", g))
	held := b.claim(t, g, "r", "o", time.Minute)
	before := snapshot(t, b, g)

	long := strings.Repeat("x", 256)
	badNames := map[string]string{"empty": "", "long": long, "control": "a\x00b", "newline": "a\nb", "utf8": "\xff"}
	ctx := t.Context()
	type call struct {
		name string
		err  error
		run  func() error
	}
	var calls []call
	add := func(name string, target error, run func() error) { calls = append(calls, call{name, target, run}) }
	withRec := func(f func(*record.Record)) record.Record {
		rec := held
		f(&rec)
		return rec
	}
	save := func(rec record.Record) func() error {
		return func() error { _, err := b.store.Save(ctx, rec); return err }
	}
	for label, bad := range badNames {
		add("Save id "+label, steaderr.ErrInvalidName, save(withRec(func(r *record.Record) { r.ID = bad })))
		add("Save group "+label, steaderr.ErrInvalidName, save(withRec(func(r *record.Record) { r.Group = bad })))
		add("Save status "+label, steaderr.ErrInvalidName, save(withRec(func(r *record.Record) { r.Status = record.Status(bad) })))
		if bad != "" { // "" is the default tenant and no lease
			add("Save tenant "+label, steaderr.ErrInvalidName, save(withRec(func(r *record.Record) { r.Tenant = bad })))
			add("Save owner "+label, steaderr.ErrInvalidName, save(withRec(func(r *record.Record) { r.Lease.Owner = bad })))
		}
		add("Load "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.Load(ctx, bad); return err })
		add("Delete "+label, steaderr.ErrInvalidName, func() error { return b.store.Delete(ctx, bad) })
		add("RegisterGroup "+label, steaderr.ErrInvalidName, func() error { return b.store.RegisterGroup(ctx, bad) })
		add("GroupExists "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.GroupExists(ctx, bad); return err })
		add("ListClaimable "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.ListClaimable(ctx, bad, time.Time{}, 1); return err })
		add("ListLeased group "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.ListLeased(ctx, bad, "", time.Time{}, 1); return err })
		if bad != "" { // "" is from the first
			add("ListLeased after "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.ListLeased(ctx, g, bad, time.Time{}, 1); return err })
		}
		add("Claim group "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.Claim(ctx, bad, "r", "o", time.Minute); return err })
		add("Claim id "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.Claim(ctx, g, bad, "o", time.Minute); return err })
		add("Claim owner "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.Claim(ctx, g, "r", bad, time.Minute); return err })
		add("ClaimNext group "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.ClaimNext(ctx, bad, "o", time.Minute, 1); return err })
		add("ClaimNext owner "+label, steaderr.ErrInvalidName, func() error { _, err := b.store.ClaimNext(ctx, g, bad, time.Minute, 1); return err })
		add("Renew owner "+label, steaderr.ErrInvalidName, func() error {
			_, err := b.store.Renew(ctx, withRec(func(r *record.Record) { r.Lease.Owner = bad }), time.Minute)
			return err
		})
		add("WaitClaimable "+label, steaderr.ErrInvalidName, func() error { return b.store.WaitClaimable(ctx, bad) })
	}
	for _, ttl := range []time.Duration{0, -time.Second, time.Nanosecond, 999 * time.Nanosecond} {
		add(fmt.Sprint("Claim ttl ", ttl), steaderr.ErrInvalidArgument, func() error { _, err := b.store.Claim(ctx, g, "r", "o", ttl); return err })
		add(fmt.Sprint("ClaimNext ttl ", ttl), steaderr.ErrInvalidArgument, func() error { _, err := b.store.ClaimNext(ctx, g, "o", ttl, 1); return err })
		add(fmt.Sprint("Renew ttl ", ttl), steaderr.ErrInvalidArgument, func() error { _, err := b.store.Renew(ctx, held, ttl); return err })
	}
	add("ListClaimable limit -1", steaderr.ErrInvalidArgument, func() error { _, err := b.store.ListClaimable(ctx, g, time.Time{}, -1); return err })
	for _, limit := range []int{0, -1, record.MaxListLeased + 1, math.MaxInt} {
		add(fmt.Sprint("ListLeased limit ", limit), steaderr.ErrInvalidArgument, func() error { _, err := b.store.ListLeased(ctx, g, "", time.Time{}, limit); return err })
	}
	add("ListLeased now in year 10000", steaderr.ErrInvalidArgument, func() error {
		_, err := b.store.ListLeased(ctx, g, "", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), 1)
		return err
	})
	add("ClaimNext n -1", steaderr.ErrInvalidArgument, func() error { _, err := b.store.ClaimNext(ctx, g, "o", time.Minute, -1); return err })
	add("ListClaimable now in year 10000", steaderr.ErrInvalidArgument, func() error {
		_, err := b.store.ListClaimable(ctx, g, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), 1)
		return err
	})
	add("Save version -1", steaderr.ErrInvalidArgument, save(withRec(func(r *record.Record) { r.Version = -1 })))
	add("Save incarnation -1", steaderr.ErrInvalidArgument, save(withRec(func(r *record.Record) { r.Lease.Incarnation = -1 })))
	overflowing := newRecord("new", g)
	overflowing.Lease.Incarnation = math.MaxInt64
	add("Save create incarnation MaxInt64", steaderr.ErrInvalidArgument, save(overflowing))
	add("Renew incarnation -1", steaderr.ErrInvalidArgument, func() error {
		_, err := b.store.Renew(ctx, withRec(func(r *record.Record) { r.Lease.Incarnation = -1 }), time.Minute)
		return err
	})
	add("Save expiry in year 0", steaderr.ErrInvalidArgument, save(withRec(func(r *record.Record) { r.Lease.Expiry = time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC) })))
	add("Save expiry in year 10000", steaderr.ErrInvalidArgument, save(withRec(func(r *record.Record) { r.Lease.Expiry = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })))
	add("Save payload too large", steaderr.ErrTooLarge, save(withRec(func(r *record.Record) { r.Payload = make([]byte, record.DefaultMaxPayload+1) })))

	for _, c := range calls {
		wantErr(t, c.run(), c.err, c.name)
	}
	wantSnapshot(t, b, g, before, "after bad input")

	// A store clock outside the range fails every call that reads it.
	bad := record.NewStore(b.recs, record.Options{Now: func() time.Time { return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }})
	_, err := bad.Save(ctx, held)
	wantErr(t, err, steaderr.ErrInvalidArgument, "Save on a clock in year 10000")
	_, err = bad.ClaimNext(ctx, g, "o", time.Minute, 1)
	wantErr(t, err, steaderr.ErrInvalidArgument, "ClaimNext on a clock in year 10000")
	wantSnapshot(t, b, g, before, "after calls on a bad clock")
}

// storeSnapshot is everything recordBadInput and friends may change: the
// records and what is claimable.
type storeSnapshot struct {
	records   map[string]record.Record
	claimable []record.Record
}

func snapshot(t *testing.T, b *recBundle, group string) storeSnapshot {
	t.Helper()
	s := storeSnapshot{records: map[string]record.Record{}}
	for _, id := range []string{"r", "other"} {
		if rec, err := b.store.Load(t.Context(), id); err == nil {
			s.records[id] = rec
		} else if !errors.Is(err, steaderr.ErrNotFound) {
			t.Fatalf("snapshot: Load(%q): %v", id, err)
		}
	}
	s.claimable = b.claimable(t, group, b.now().Add(time.Hour), 100)
	return s
}

func wantSnapshot(t *testing.T, b *recBundle, group string, want storeSnapshot, what string) {
	t.Helper()
	got := snapshot(t, b, group)
	if len(got.records) != len(want.records) || len(got.claimable) != len(want.claimable) {
		t.Fatalf("%s: %d records, %d claimable; want %d, %d", what, len(got.records), len(got.claimable), len(want.records), len(want.claimable))
	}
	for id, w := range want.records {
		wantRecord(t, what+": "+id, got.records[id], w)
	}
	for i := range want.claimable {
		wantRecord(t, what+": claimable", got.claimable[i], want.claimable[i])
	}
	if ok, err := b.store.GroupExists(t.Context(), "new group"); err != nil || ok {
		t.Fatalf("%s: GroupExists(new group) = %v, %v; want false", what, ok, err)
	}
}

// recordCancelled makes every call with a cancelled context: each fails
// with the context's error and changes nothing.
func recordCancelled(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.save(t, newRecord("r", g))
	b.save(t, newRecord("other", g))
	held := b.claim(t, g, "r", "o", time.Minute)
	before := snapshot(t, b, g)
	for name, call := range recordCalls(b.store, g, held) {
		err := call(cancelled(t))
		wantErr(t, err, context.Canceled, name+" with a cancelled context")
	}
	wantSnapshot(t, b, g, before, "after cancelled calls")
}

// recordCalls is one call of every Store method, writes that would
// succeed, against held (a record of group, leased).
func recordCalls(s *record.Store, group string, held record.Record) map[string]func(context.Context) error {
	fresh := newRecord("fresh", group)
	update := held
	update.Payload = []byte("update")
	return map[string]func(context.Context) error{
		"RegisterGroup": func(ctx context.Context) error { return s.RegisterGroup(ctx, "new group") },
		"GroupExists":   func(ctx context.Context) error { _, err := s.GroupExists(ctx, group); return err },
		"SaveCreate":    func(ctx context.Context) error { _, err := s.Save(ctx, fresh); return err },
		"SaveUpdate":    func(ctx context.Context) error { _, err := s.Save(ctx, update); return err },
		"Load":          func(ctx context.Context) error { _, err := s.Load(ctx, held.ID); return err },
		"Delete":        func(ctx context.Context) error { return s.Delete(ctx, held.ID) },
		"ListClaimable": func(ctx context.Context) error { _, err := s.ListClaimable(ctx, group, time.Time{}, 10); return err },
		"ListLeased":    func(ctx context.Context) error { _, err := s.ListLeased(ctx, group, "", time.Time{}, 10); return err },
		"Claim": func(ctx context.Context) error {
			_, err := s.Claim(ctx, group, held.ID, held.Lease.Owner, time.Minute)
			return err
		},
		"ClaimNext":     func(ctx context.Context) error { _, err := s.ClaimNext(ctx, group, "o", time.Minute, 10); return err },
		"Renew":         func(ctx context.Context) error { _, err := s.Renew(ctx, held, time.Minute); return err },
		"WaitClaimable": func(ctx context.Context) error { return s.WaitClaimable(ctx, group) },
	}
}

func recordClosed(t *testing.T, h Harness) {
	b := recSetup(t, h)
	g := b.group(t, "g")
	b.save(t, newRecord("r", g))
	held := b.claim(t, g, "r", "o", time.Minute)
	if err := b.eng.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for name, call := range recordCalls(b.store, g, held) {
		wantErr(t, call(t.Context()), steaderr.ErrClosed, name+" after Close")
	}
}

// recordVirgin covers a database never migrated: reads answer absent or
// empty, writes fail with ErrSchema.
func recordVirgin(t *testing.T, h Harness) {
	if h.Virgin == nil {
		t.Skip("the engine has no schema (Harness.Virgin is nil)")
	}
	eng := h.Virgin(t)
	t.Cleanup(func() { _ = eng.Close() })
	b := recBundleOf(eng)
	ctx := t.Context()
	_, err := b.store.Load(ctx, "r")
	wantErr(t, err, steaderr.ErrNotFound, "Load on a virgin database")
	if ok, err := b.store.GroupExists(ctx, "g"); ok || err != nil {
		t.Fatalf("GroupExists on a virgin database = %v, %v; want false, nil", ok, err)
	}
	wantIDs(t, "ListClaimable on a virgin database", b.claimable(t, "g", time.Time{}, 10))
	if got, err := b.store.ListLeased(ctx, "g", "", time.Time{}, 10); err != nil || len(got) != 0 {
		t.Fatalf("ListLeased on a virgin database = %d records, %v; want none, nil", len(got), err)
	}
	held := newRecord("r", "g")
	held.Version = 1
	held.Lease = record.Lease{Owner: "o", Incarnation: 1}
	for name, call := range recordCalls(b.store, "g", held) {
		switch name {
		case "Load", "GroupExists", "ListClaimable", "ListLeased":
			continue
		case "WaitClaimable":
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := call(ctx)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitClaimable on a virgin database = %v, want it to wait until ctx ends", err)
			}
			continue
		}
		wantSchemaErr(t, call(ctx), name+" on a virgin database")
	}
	if current, _ := schemaVersion(t, eng, "after record calls"); current != 0 {
		t.Fatalf("record calls on a virgin database migrated it to version %d", current)
	}
}
