package enginetest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/steaderr"
)

// testLock covers the named-lock rules through the portable lock.Store and
// the engine seam. Leases are measured against a fake clock the tests move,
// so no test sleeps for a lease to lapse; Hold's renewal cadence is real
// time, a third of holdTTL.
func testLock(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"Exclusion", lockExclusion},
		{"Expiry", lockExpiry},
		{"Release", lockRelease},
		{"ReleaseAfterLapse", lockReleaseAfterLapse},
		{"SameOwner", lockSameOwner},
		{"Renew", lockRenew},
		{"StaleHandle", lockStaleHandle},
		{"Tokens", lockTokens},
		{"Names", lockNames},
		{"Validation", lockValidation},
		{"ListHeld", lockListHeld},
		{"ListHeldValidation", lockListHeldValidation},
		{"Closed", lockClosed},
		{"CloseWakesWaiters", lockCloseWakesWaiters},
		{"Cancelled", lockCancelled},
		{"Virgin", lockVirgin},
		{"Seam", lockSeam},
		{"SeamNew", lockSeamNew},
		{"SeamNewConcurrent", lockSeamNewConcurrent},
		{"Concurrent", lockConcurrent},
		{"WaitForRelease", lockWaitForRelease},
		{"WaitForExpiry", lockWaitForExpiry},
		{"WaitCancelled", lockWaitCancelled},
		{"Hold", lockHold},
		{"HoldLostOnExpiry", lockHoldLostOnExpiry},
		{"HoldLostOnSteal", lockHoldLostOnSteal},
		{"HoldLateRenewal", lockHoldLateRenewal},
		{"HoldReleaseRetry", lockHoldReleaseRetry},
		{"Metamorphic", lockMetamorphic},
	})
}

const (
	// ttl is the lease of most tests, on the fake clock.
	ttl = time.Minute
	// holdTTL is the lease of Hold tests: short, since Hold renews every
	// third of it in real time.
	holdTTL = 90 * time.Millisecond
)

// wholeMicroStart is where lock and pin tests' clocks start: a whole
// microsecond, as the lock and blob seams require of Now.
var wholeMicroStart = time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC)

// spyLocks wraps a lock.Backend, counting acquire attempts and running
// afterRenew (if set before use) after each successful renewal.
type spyLocks struct {
	lock.Backend
	acquires   atomic.Int64
	afterRenew func()
}

func (s *spyLocks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	s.acquires.Add(1)
	return s.Backend.Acquire(ctx, p)
}

func (s *spyLocks) Renew(ctx context.Context, p lock.RenewParams) (time.Time, bool, error) {
	expiry, ok, err := s.Backend.Renew(ctx, p)
	if ok && s.afterRenew != nil {
		s.afterRenew()
	}
	return expiry, ok, err
}

// lockBundle is what lock tests start from: a fresh engine, its lock seam
// behind a spy, a fake clock and a store measuring leases against it.
type lockBundle struct {
	eng   engine.Engine
	spy   *spyLocks
	clock *clock.Fake
	store *lock.Store
}

func setupLocks(t *testing.T, h Harness) *lockBundle {
	t.Helper()
	return lockBundleOf(newEngine(t, h))
}

func lockBundleOf(eng engine.Engine) *lockBundle {
	b := &lockBundle{eng: eng, spy: &spyLocks{Backend: eng.Locks()}, clock: clock.NewFake(wholeMicroStart)}
	b.store = lock.NewStore(b.spy, lock.Options{Now: b.clock.Now})
	return b
}

func mustTryLock(t *testing.T, s *lock.Store, name, owner string, ttl time.Duration) *lock.Lock {
	t.Helper()
	lk, ok, err := s.TryLock(t.Context(), name, owner, ttl)
	if err != nil || !ok || lk == nil {
		t.Fatalf("TryLock(%q, %q) = %v, %v, %v; want a grant", name, owner, lk, ok, err)
	}
	if lk.Name() != name || lk.Owner() != owner {
		t.Fatalf("TryLock(%q, %q) granted %q to %q", name, owner, lk.Name(), lk.Owner())
	}
	return lk
}

// wantBusy checks that TryLock refuses name to owner, as contention.
func wantBusy(t *testing.T, s *lock.Store, name, owner string) {
	t.Helper()
	lk, ok, err := s.TryLock(t.Context(), name, owner, ttl)
	if err != nil || ok || lk != nil {
		t.Fatalf("TryLock(%q, %q) of a held lock = %v, %v, %v; want nil, false, nil", name, owner, lk, ok, err)
	}
}

// wantGrant checks a handle's token and expiry.
func wantGrant(t *testing.T, lk *lock.Lock, token int64, expiry time.Time) {
	t.Helper()
	if lk.Token() != token || !lk.Expiry().Equal(expiry) {
		t.Fatalf("grant of %q to %q: token %d, expiry %v; want token %d, expiry %v", lk.Name(), lk.Owner(), lk.Token(), lk.Expiry(), token, expiry)
	}
	if g := lk.Grant(); g.Name != lk.Name() || g.Owner != lk.Owner() || g.Token != token || !g.Expiry.Equal(expiry) {
		t.Fatalf("Grant() = %+v, want the handle's name, owner, token %d and expiry %v", g, token, expiry)
	}
}

func wantReleased(t *testing.T, lk *lock.Lock, want bool) {
	t.Helper()
	got, err := lk.Release(t.Context())
	if err != nil || got != want {
		t.Fatalf("Release of %q token %d = %v, %v; want %v, nil", lk.Name(), lk.Token(), got, err, want)
	}
}

func wantRenewed(t *testing.T, lk *lock.Lock, ttl time.Duration, want bool) {
	t.Helper()
	got, err := lk.Renew(t.Context(), ttl)
	if err != nil || got != want {
		t.Fatalf("Renew of %q token %d = %v, %v; want %v, nil", lk.Name(), lk.Token(), got, err, want)
	}
}

func lockExclusion(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	alice := mustTryLock(t, b.store, "job", "alice", ttl)
	wantGrant(t, alice, 1, b.clock.Now().Add(ttl))
	wantBusy(t, b.store, "job", "bob")
	wantGrant(t, mustTryLock(t, b.store, "other job", "bob", ttl), 1, b.clock.Now().Add(ttl))
	wantReleased(t, alice, true)
	wantGrant(t, mustTryLock(t, b.store, "job", "bob", ttl), 2, b.clock.Now().Add(ttl))
	wantBusy(t, b.store, "job", "alice")
}

func lockExpiry(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	mustTryLock(t, b.store, "job", "alice", ttl)
	b.clock.Advance(ttl - time.Microsecond)
	wantBusy(t, b.store, "job", "bob")
	b.clock.Advance(time.Microsecond) // expired at exactly its expiry
	wantGrant(t, mustTryLock(t, b.store, "job", "bob", 2*ttl), 2, b.clock.Now().Add(2*ttl))
}

func lockRelease(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	alice := mustTryLock(t, b.store, "job", "alice", ttl)
	wantReleased(t, alice, true)
	wantReleased(t, alice, false)
	wantRenewed(t, alice, ttl, false)
	again := mustTryLock(t, b.store, "job", "alice", ttl)
	wantGrant(t, again, 2, b.clock.Now().Add(ttl))
	wantReleased(t, alice, false) // the old grant's handle
	wantBusy(t, b.store, "job", "bob")
}

// lockReleaseAfterLapse covers both arms of a release after the lease
// lapsed: still ours when nobody took the lock, not ours when somebody did.
func lockReleaseAfterLapse(t *testing.T, h Harness) {
	t.Run("NotTaken", func(t *testing.T) {
		t.Parallel()
		b := setupLocks(t, h)
		alice := mustTryLock(t, b.store, "job", "alice", ttl)
		b.clock.Advance(2 * ttl)
		wantReleased(t, alice, true)
		wantGrant(t, mustTryLock(t, b.store, "job", "bob", ttl), 2, b.clock.Now().Add(ttl))
	})
	t.Run("Taken", func(t *testing.T) {
		t.Parallel()
		b := setupLocks(t, h)
		alice := mustTryLock(t, b.store, "job", "alice", ttl)
		b.clock.Advance(ttl)
		bob := mustTryLock(t, b.store, "job", "bob", ttl)
		wantReleased(t, alice, false)
		wantBusy(t, b.store, "job", "carol")
		wantGrant(t, bob, 2, b.clock.Now().Add(ttl))
		wantReleased(t, bob, true)
	})
}

// lockSameOwner: a live holder re-acquiring gets its grant back unchanged;
// after a lapse the same owner gets a new grant.
func lockSameOwner(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	first := mustTryLock(t, b.store, "job", "alice", ttl)
	expiry := b.clock.Now().Add(ttl)
	b.clock.Advance(ttl / 2)
	again := mustTryLock(t, b.store, "job", "alice", 10*ttl)
	wantGrant(t, again, 1, expiry) // TTL not refreshed
	wantGrant(t, first, 1, expiry)
	wantBusy(t, b.store, "job", "bob")
	b.clock.Advance(ttl / 2)
	renewed := mustTryLock(t, b.store, "job", "alice", ttl)
	wantGrant(t, renewed, 2, b.clock.Now().Add(ttl))
	// Both earlier handles are the old grant.
	wantRenewed(t, again, ttl, false)
	wantReleased(t, first, false)
	wantReleased(t, renewed, true)
}

func lockRenew(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	alice := mustTryLock(t, b.store, "job", "alice", ttl)
	b.clock.Advance(ttl / 2)
	wantRenewed(t, alice, 2*ttl, true) // a full new window from now
	wantGrant(t, alice, 1, b.clock.Now().Add(2*ttl))
	b.clock.Advance(2*ttl - time.Microsecond)
	wantBusy(t, b.store, "job", "bob")
	b.clock.Advance(time.Microsecond)
	wantRenewed(t, alice, ttl, true) // lapsed, but nobody took it
	wantGrant(t, alice, 1, b.clock.Now().Add(ttl))
	wantBusy(t, b.store, "job", "bob")
	b.clock.Advance(ttl)
	mustTryLock(t, b.store, "job", "bob", ttl)
	before := alice.Expiry()
	wantRenewed(t, alice, ttl, false)
	wantGrant(t, alice, 1, before)
}

// lockStaleHandle: a handle on an old grant can neither renew nor release a
// newer grant to the same owner string.
func lockStaleHandle(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	stale := mustTryLock(t, b.store, "job", "alice", ttl)
	b.clock.Advance(ttl)
	current := mustTryLock(t, b.store, "job", "alice", ttl)
	wantGrant(t, current, 2, b.clock.Now().Add(ttl))
	b.clock.Advance(ttl / 2)
	wantRenewed(t, stale, ttl, false)
	wantReleased(t, stale, false)
	wantBusy(t, b.store, "job", "bob")
	wantGrant(t, current, 2, b.clock.Now().Add(ttl/2))
	wantRenewed(t, current, ttl, true)
	wantReleased(t, current, true)
}

// lockTokens checks that tokens count a name's grants, across release,
// expiry, re-grant and owners, and that names count separately.
func lockTokens(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	var want int64
	grant := func(name, owner string) *lock.Lock {
		t.Helper()
		lk := mustTryLock(t, b.store, name, owner, ttl)
		if name == "job" {
			want++
		}
		if name == "job" && lk.Token() != want {
			t.Fatalf("grant %d of %q has token %d", want, name, lk.Token())
		}
		return lk
	}
	lk := grant("job", "alice")
	wantReleased(t, lk, true)
	lk = grant("job", "bob")
	b.clock.Advance(ttl)
	lk = grant("job", "alice")
	wantGrant(t, mustTryLock(t, b.store, "job", "alice", ttl), want, lk.Expiry()) // same owner: no new token
	if other := grant("unrelated", "alice"); other.Token() != 1 {
		t.Fatalf("first grant of another name has token %d, want 1", other.Token())
	}
	b.clock.Advance(ttl)
	lk = grant("job", "alice")
	wantReleased(t, lk, true)
	wantReleased(t, lk, false)
	lk = grant("job", "carol")
	if lk.Token() != 5 {
		t.Fatalf("fifth grant has token %d", lk.Token())
	}
}

// lockNames checks that names and owners are opaque bytes: hostile, long
// and near-identical names are all distinct locks.
func lockNames(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	names := []string{
		"a", "A", "a ", " a", "ä", "a\u0301", `quo"te`, "'; DROP TABLE locks; --", "%_*?", "ünïcödé ✓",
		strings.Repeat("n", 255), strings.Repeat("é", 127),
	}
	var held []*lock.Lock
	for _, name := range names {
		lk := mustTryLock(t, b.store, name, name, ttl)
		wantGrant(t, lk, 1, b.clock.Now().Add(ttl))
		held = append(held, lk)
	}
	for _, lk := range held {
		wantBusy(t, b.store, lk.Name(), "someone else")
		wantReleased(t, lk, true)
	}
}

// lockValidation checks that bad arguments fail with the right sentinel
// through every entry point and change nothing.
func lockValidation(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	ctx := t.Context()
	const name, owner = "valid", "owner"
	long := strings.Repeat("x", 256)
	cases := []struct {
		label       string
		name, owner string
		ttl         time.Duration
		want        error
	}{
		{"EmptyName", "", owner, ttl, steaderr.ErrInvalidName},
		{"LongName", long, owner, ttl, steaderr.ErrInvalidName},
		{"NULName", "a\x00b", owner, ttl, steaderr.ErrInvalidName},
		{"NewlineName", "a\nb", owner, ttl, steaderr.ErrInvalidName},
		{"DELName", "a\x7f", owner, ttl, steaderr.ErrInvalidName},
		{"BadUTF8Name", "a\xffb", owner, ttl, steaderr.ErrInvalidName},
		{"EmptyOwner", name, "", ttl, steaderr.ErrInvalidName},
		{"LongOwner", name, long, ttl, steaderr.ErrInvalidName},
		{"ControlOwner", name, "o\tw", ttl, steaderr.ErrInvalidName},
		{"BadUTF8Owner", name, "\xc3", ttl, steaderr.ErrInvalidName},
		{"ZeroTTL", name, owner, 0, steaderr.ErrInvalidArgument},
		{"NegativeTTL", name, owner, -time.Second, steaderr.ErrInvalidArgument},
		{"SubMicrosecondTTL", name, owner, 999 * time.Nanosecond, steaderr.ErrInvalidArgument},
	}
	for _, tc := range cases {
		what := func(call string) string { return fmt.Sprintf("%s(%s)", call, tc.label) }
		lk, ok, err := b.store.TryLock(ctx, tc.name, tc.owner, tc.ttl)
		wantErr(t, err, tc.want, what("TryLock"))
		if lk != nil || ok {
			t.Fatalf("%s = %v, %v alongside its error", what("TryLock"), lk, ok)
		}
		lk, err = b.store.Lock(ctx, tc.name, tc.owner, tc.ttl)
		wantErr(t, err, tc.want, what("Lock"))
		hd, err := b.store.Hold(ctx, tc.name, tc.owner, tc.ttl)
		wantErr(t, err, tc.want, what("Hold"))
		hd2, ok, err := b.store.TryHold(ctx, tc.name, tc.owner, tc.ttl)
		wantErr(t, err, tc.want, what("TryHold"))
		if lk != nil || hd != nil || hd2 != nil || ok {
			t.Fatalf("%s returned a handle alongside its error", tc.label)
		}
	}
	if n := b.spy.acquires.Load(); n != 0 {
		t.Fatalf("bad arguments reached the engine %d times", n)
	}
	lk := mustTryLock(t, b.store, name, owner, ttl)
	wantGrant(t, lk, 1, b.clock.Now().Add(ttl)) // nothing was granted before
	for _, bad := range []time.Duration{0, -ttl, time.Nanosecond} {
		ok, err := lk.Renew(ctx, bad)
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("Renew(%v)", bad))
		if ok {
			t.Fatalf("Renew(%v) = true alongside its error", bad)
		}
	}
	b.clock.Advance(ttl / 2)
	wantGrant(t, lk, 1, b.clock.Now().Add(ttl/2)) // not renewed
	wantBusy(t, b.store, name, "someone else")
}

// listHeld calls b.store.ListHeld, failing the test on an error.
func (b *lockBundle) listHeld(t *testing.T, prefix, after string, limit int) []lock.Grant {
	t.Helper()
	got, err := b.store.ListHeld(t.Context(), prefix, after, limit)
	if err != nil {
		t.Fatalf("ListHeld(%q, after %q, %d): %v", prefix, after, limit, err)
	}
	return got
}

// wantNames checks that grants are exactly those of names, in that order.
func wantNames(t *testing.T, what string, grants []lock.Grant, names ...string) {
	t.Helper()
	got := make([]string, len(grants))
	for i, g := range grants {
		got[i] = g.Name
	}
	if !slices.Equal(got, names) {
		t.Fatalf("%s = %q, want %q", what, got, names)
	}
}

// sameGrant reports whether got is want, its expiry the same instant in
// UTC.
func sameGrant(got, want lock.Grant) bool {
	return got.Name == want.Name && got.Owner == want.Owner && got.Token == want.Token &&
		got.Expiry.Equal(want.Expiry) && got.Expiry.Location() == time.UTC
}

// lockListHeld: the live grants, in name order, a page at a time, under a
// prefix taken literally.
func lockListHeld(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	ctx := t.Context()
	names := []string{"a%", "a%b", "a_b", "a\\b", "axb", "aXb", "job/a", "job/b", "job/c", "job/d", "jobs", "\U0010FFFFx"}
	locks := map[string]*lock.Lock{}
	for _, n := range names {
		locks[n] = mustTryLock(t, b.store, n, "owner of "+n, 2*ttl)
	}
	short := mustTryLock(t, b.store, "job/short", "alice", ttl)
	released := mustTryLock(t, b.store, "job/released", "alice", ttl)
	wantReleased(t, released, true)
	all := slices.Sorted(slices.Values(append(slices.Clone(names), "job/short")))
	wantNames(t, "ListHeld(all)", b.listHeld(t, "", "", 100), all...)
	for _, g := range b.listHeld(t, "", "", 100) {
		lk := locks[g.Name]
		if g.Name == "job/short" {
			lk = short
		}
		if !sameGrant(g, lk.Grant()) {
			t.Fatalf("ListHeld listed %+v, want %+v", g, lk.Grant())
		}
	}
	// A grant is not held at exactly its expiry; another's grant of the
	// name is listed with its token.
	b.clock.Advance(ttl - time.Microsecond)
	wantNames(t, "ListHeld(job/, 1µs before job/short expires)", b.listHeld(t, "job/", "", 100), "job/a", "job/b", "job/c", "job/d", "job/short")
	b.clock.Advance(time.Microsecond)
	wantNames(t, "ListHeld(job/, as job/short expires)", b.listHeld(t, "job/", "", 100), "job/a", "job/b", "job/c", "job/d")
	regrant := mustTryLock(t, b.store, "job/short", "bob", ttl)
	if got := b.listHeld(t, "job/s", "", 100); len(got) != 1 || !sameGrant(got[0], regrant.Grant()) || got[0].Token != 2 {
		t.Fatalf("ListHeld(job/s) after a new grant = %+v, want %+v (token 2)", got, regrant.Grant())
	}
	// Pages of two, each after the last name of the one before.
	var paged []string
	for after := ""; ; {
		page := b.listHeld(t, "job", after, 2)
		if len(page) > 2 {
			t.Fatalf("ListHeld(limit 2) returned %d grants", len(page))
		}
		for _, g := range page {
			paged = append(paged, g.Name)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Name
	}
	if want := []string{"job/a", "job/b", "job/c", "job/d", "job/short", "jobs"}; !slices.Equal(paged, want) {
		t.Fatalf("ListHeld(job) in pages of 2 = %q, want %q", paged, want)
	}
	wantNames(t, "ListHeld(job/, after job/b)", b.listHeld(t, "job/", "job/b", 100), "job/c", "job/d", "job/short")
	wantNames(t, "ListHeld(job/, after an absent name)", b.listHeld(t, "job/", "job/bb", 100), "job/c", "job/d", "job/short")
	wantNames(t, "ListHeld(job/, after one before the prefix)", b.listHeld(t, "job/", "a", 1), "job/a")
	wantNames(t, "ListHeld(job/, after one past the prefix)", b.listHeld(t, "job/", "jobz", 100))
	// No character of a prefix is a pattern.
	wantNames(t, "ListHeld(a%)", b.listHeld(t, "a%", "", 100), "a%", "a%b")
	wantNames(t, "ListHeld(a_)", b.listHeld(t, "a_", "", 100), "a_b")
	wantNames(t, "ListHeld(a\\)", b.listHeld(t, "a\\", "", 100), "a\\b")
	wantNames(t, "ListHeld(aX)", b.listHeld(t, "aX", "", 100), "aXb")
	wantNames(t, "ListHeld(\U0010FFFF)", b.listHeld(t, "\U0010FFFF", "", 100), "\U0010FFFFx")
	wantNames(t, "ListHeld(nothing)", b.listHeld(t, "nothing", "", 100))
	// Released and expired grants are gone from the list; the grants
	// renewed are not.
	for _, n := range []string{"job/a", "job/b"} {
		wantRenewed(t, locks[n], 2*ttl, true)
	}
	wantReleased(t, locks["job/b"], true)
	b.clock.Advance(ttl)
	wantNames(t, "ListHeld(job/, after renewals and expiry)", b.listHeld(t, "job/", "", 100), "job/a")
	if got, err := b.eng.Locks().ListHeld(ctx, lock.ListParams{Prefix: "job/", Limit: 10, Now: b.clock.Now()}); err != nil || len(got) != 1 || !sameGrant(got[0], locks["job/a"].Grant()) {
		t.Fatalf("engine ListHeld(job/) = %+v, %v; want %+v", got, err, locks["job/a"].Grant())
	}
}

// lockListHeldValidation: a bad prefix, cursor or limit is refused
// before the engine sees it.
func lockListHeldValidation(t *testing.T, h Harness) {
	eng := newEngine(t, h)
	calls := 0
	spy := &listSpy{Backend: eng.Locks(), calls: &calls}
	s := lock.NewStore(spy, lock.Options{})
	long := strings.Repeat("x", 256)
	for _, bad := range []string{long, "a\x00b", "a\nb", "a\x7f", "a\xffb"} {
		_, err := s.ListHeld(t.Context(), bad, "", 10)
		wantErr(t, err, steaderr.ErrInvalidName, fmt.Sprintf("ListHeld(prefix %q)", bad))
		_, err = s.ListHeld(t.Context(), "", bad, 10)
		wantErr(t, err, steaderr.ErrInvalidName, fmt.Sprintf("ListHeld(after %q)", bad))
	}
	for _, limit := range []int{0, -1, lock.MaxList + 1, math.MaxInt} {
		_, err := s.ListHeld(t.Context(), "", "", limit)
		wantErr(t, err, steaderr.ErrInvalidArgument, fmt.Sprintf("ListHeld(limit %d)", limit))
	}
	if calls != 0 {
		t.Fatalf("bad arguments reached the engine %d times", calls)
	}
	if got, err := s.ListHeld(t.Context(), "", "", lock.MaxList); err != nil || len(got) != 0 || calls != 1 {
		t.Fatalf("ListHeld(limit MaxList) on an empty store = %v, %v (%d engine calls); want none", got, err, calls)
	}
}

// listSpy counts ListHeld calls.
type listSpy struct {
	lock.Backend
	calls *int
}

func (s *listSpy) ListHeld(ctx context.Context, p lock.ListParams) ([]lock.Grant, error) {
	*s.calls++
	return s.Backend.ListHeld(ctx, p)
}

// lockClosed checks that every lock call on a closed engine fails with
// ErrClosed, including a held lock's renewal.
func lockClosed(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	ctx := t.Context()
	lk := mustTryLock(t, b.store, "job", "alice", ttl)
	hd, ok, err := b.store.TryHold(ctx, "held", "alice", holdTTL)
	if err != nil || !ok {
		t.Fatalf("TryHold = %v, %v", ok, err)
	}
	if err := b.eng.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, _, err = b.store.TryLock(ctx, "job", "bob", ttl)
	wantErr(t, err, steaderr.ErrClosed, "TryLock after Close")
	_, err = b.store.Lock(ctx, "job", "bob", ttl)
	wantErr(t, err, steaderr.ErrClosed, "Lock after Close")
	_, err = b.store.Hold(ctx, "new", "bob", ttl)
	wantErr(t, err, steaderr.ErrClosed, "Hold after Close")
	_, _, err = b.store.TryHold(ctx, "new", "bob", ttl)
	wantErr(t, err, steaderr.ErrClosed, "TryHold after Close")
	_, err = lk.Renew(ctx, ttl)
	wantErr(t, err, steaderr.ErrClosed, "Renew after Close")
	_, err = lk.Release(ctx)
	wantErr(t, err, steaderr.ErrClosed, "Release after Close")
	_, _, _, err = b.eng.Locks().WatchReleases(ctx, "job")
	wantErr(t, err, steaderr.ErrClosed, "engine WatchReleases after Close")
	_, err = b.store.ListHeld(ctx, "", "", 10)
	wantErr(t, err, steaderr.ErrClosed, "ListHeld after Close")
	select {
	case <-hd.Lost():
	case <-time.After(testkit.Timeout):
		t.Fatalf("Held.Lost not closed %v after Close", testkit.Timeout)
	}
	wantErr(t, hd.Err(), steaderr.ErrLost, "Held.Err after Close")
	wantErr(t, hd.Err(), steaderr.ErrClosed, "Held.Err after Close")
	wantErr(t, hd.Release(ctx), steaderr.ErrLost, "Held.Release after Close")
}

// lockCloseWakesWaiters closes the engine under a waiter whose holder's
// lease, on the engine's clock, runs for an hour: the waiter returns
// ErrClosed at once rather than at the expiry.
func lockCloseWakesWaiters(t *testing.T, h Harness) {
	eng := newEngine(t, h)
	spy := &spyLocks{Backend: eng.Locks()}
	s := lock.NewStore(spy, lock.Options{})
	if _, ok, err := s.TryLock(t.Context(), "job", "alice", time.Hour); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Lock(t.Context(), "job", "bob", time.Hour)
		done <- err
	}()
	testkit.Until(t, "Lock to be refused", func() bool { return spy.acquires.Load() >= 2 })
	if err := eng.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		wantErr(t, err, steaderr.ErrClosed, "Lock waiting through Close")
	case <-time.After(testkit.Timeout):
		t.Fatalf("Lock still waiting %v after Close", testkit.Timeout)
	}
}

// lockCancelled checks that a cancelled context fails every call and
// changes nothing.
func lockCancelled(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	ctx := cancelled(t)
	lk := mustTryLock(t, b.store, "held", "alice", ttl)
	_, _, err := b.store.TryLock(ctx, "job", "alice", ttl)
	wantErr(t, err, context.Canceled, "TryLock with a cancelled context")
	_, err = b.store.Lock(ctx, "job", "alice", ttl)
	wantErr(t, err, context.Canceled, "Lock with a cancelled context")
	_, err = b.store.Hold(ctx, "job", "alice", ttl)
	wantErr(t, err, context.Canceled, "Hold with a cancelled context")
	_, err = lk.Renew(ctx, 2*ttl)
	wantErr(t, err, context.Canceled, "Renew with a cancelled context")
	_, err = lk.Release(ctx)
	wantErr(t, err, context.Canceled, "Release with a cancelled context")

	seam := b.eng.Locks()
	_, err = seam.Acquire(ctx, lock.AcquireParams{Name: "job", Owner: "alice", TTL: ttl, Now: b.clock.Now()})
	wantErr(t, err, context.Canceled, "engine Acquire with a cancelled context")
	_, _, err = seam.Renew(ctx, lock.RenewParams{Name: "held", Owner: "alice", Token: 1, TTL: 2 * ttl, Now: b.clock.Now()})
	wantErr(t, err, context.Canceled, "engine Renew with a cancelled context")
	_, err = seam.Release(ctx, lock.ReleaseParams{Name: "held", Owner: "alice", Token: 1})
	wantErr(t, err, context.Canceled, "engine Release with a cancelled context")
	_, _, stop, err := seam.WatchReleases(ctx, "job")
	wantErr(t, err, context.Canceled, "engine WatchReleases with a cancelled context")
	stop()
	_, err = b.store.ListHeld(ctx, "", "", 10)
	wantErr(t, err, context.Canceled, "ListHeld with a cancelled context")
	_, err = seam.ListHeld(ctx, lock.ListParams{Limit: 10, Now: b.clock.Now()})
	wantErr(t, err, context.Canceled, "engine ListHeld with a cancelled context")

	wantGrant(t, mustTryLock(t, b.store, "job", "bob", ttl), 1, b.clock.Now().Add(ttl))
	wantGrant(t, lk, 1, b.clock.Now().Add(ttl))
	wantBusy(t, b.store, "held", "bob")
	b.clock.Advance(ttl)
	wantGrant(t, mustTryLock(t, b.store, "held", "bob", ttl), 2, b.clock.Now().Add(ttl)) // not renewed
}

// lockVirgin checks that lock calls on a database never migrated fail with
// ErrSchema, and work once it is.
func lockVirgin(t *testing.T, h Harness) {
	if h.Virgin == nil {
		t.Skip("the engine has no schema (Harness.Virgin is nil)")
	}
	eng := h.Virgin(t)
	t.Cleanup(func() { _ = eng.Close() })
	b := lockBundleOf(eng)
	ctx := t.Context()
	_, _, err := b.store.TryLock(ctx, "job", "alice", ttl)
	wantSchemaErr(t, err, "TryLock on a virgin database")
	_, _, err = eng.Locks().Renew(ctx, lock.RenewParams{Name: "job", Owner: "alice", Token: 1, TTL: ttl})
	wantSchemaErr(t, err, "engine Renew on a virgin database")
	_, err = eng.Locks().Release(ctx, lock.ReleaseParams{Name: "job", Owner: "alice", Token: 1})
	wantSchemaErr(t, err, "engine Release on a virgin database")
	if got, err := b.store.ListHeld(ctx, "", "", 10); err != nil || len(got) != 0 {
		t.Fatalf("ListHeld on a virgin database = %v, %v; want none, nil", got, err)
	}
	mustMigrate(t, eng, "a virgin database")
	wantGrant(t, mustTryLock(t, b.store, "job", "alice", ttl), 1, b.clock.Now().Add(ttl))
}

// lockSeam checks the engine seam directly: Now is honoured, the holder
// hint, and the engine's own clock.
func lockSeam(t *testing.T, h Harness) {
	seam := newEngine(t, h).Locks()
	ctx := t.Context()
	now := clock.NewFake(wholeMicroStart).Now()
	res, err := seam.Acquire(ctx, lock.AcquireParams{Name: "job", Owner: "alice", TTL: ttl, Now: now})
	want := lock.Grant{Name: "job", Owner: "alice", Token: 1, Expiry: now.Add(ttl)}
	if err != nil || !res.Granted || res.Grant != want || !res.Now.Equal(now) {
		t.Fatalf("Acquire = %+v, %v; want granted %+v at %v", res, err, want, now)
	}
	res, err = seam.Acquire(ctx, lock.AcquireParams{Name: "job", Owner: "bob", TTL: ttl, Now: now.Add(time.Second)})
	if err != nil || res.Granted || !res.Now.Equal(now.Add(time.Second)) {
		t.Fatalf("contended Acquire = %+v, %v; want not granted at %v", res, err, now.Add(time.Second))
	}
	if res.Grant.Token != 0 && res.Grant != want {
		t.Fatalf("contended Acquire's holder hint = %+v, want %+v or zero", res.Grant, want)
	}
	expiry, ok, err := seam.Renew(ctx, lock.RenewParams{Name: "job", Owner: "alice", Token: 1, TTL: 2 * time.Second, Now: now.Add(time.Second)})
	if err != nil || !ok || !expiry.Equal(now.Add(3*time.Second)) {
		t.Fatalf("Renew = %v, %v, %v; want %v", expiry, ok, err, now.Add(3*time.Second))
	}
	for _, p := range []lock.RenewParams{
		{Name: "job", Owner: "alice", Token: 2, TTL: ttl, Now: now},
		{Name: "job", Owner: "bob", Token: 1, TTL: ttl, Now: now},
		{Name: "absent", Owner: "alice", Token: 1, TTL: ttl, Now: now},
	} {
		if _, ok, err := seam.Renew(ctx, p); ok || err != nil {
			t.Fatalf("Renew(%+v) of no current grant = %v, %v; want false, nil", p, ok, err)
		}
		if ok, err := seam.Release(ctx, lock.ReleaseParams{Name: p.Name, Owner: p.Owner, Token: p.Token}); ok || err != nil {
			t.Fatalf("Release(%+v) of no current grant = %v, %v; want false, nil", p, ok, err)
		}
	}
	if ok, err := seam.Release(ctx, lock.ReleaseParams{Name: "job", Owner: "alice", Token: 1}); !ok || err != nil {
		t.Fatalf("Release = %v, %v; want true", ok, err)
	}
	// The engine's own clock: a TTL from the engine's now.
	res, err = seam.Acquire(ctx, lock.AcquireParams{Name: "clock", Owner: "alice", TTL: ttl})
	if err != nil || !res.Granted || res.Now.IsZero() || res.Grant.Expiry.Sub(res.Now) != ttl {
		t.Fatalf("Acquire on the engine's clock = %+v, %v; want granted with expiry = now + %v", res, err, ttl)
	}
	expiry, ok, err = seam.Renew(ctx, lock.RenewParams{Name: "clock", Owner: "alice", Token: 1, TTL: 2 * ttl})
	if err != nil || !ok || expiry.Before(res.Grant.Expiry.Add(ttl)) {
		t.Fatalf("Renew on the engine's clock = %v, %v, %v; want at least %v", expiry, ok, err, res.Grant.Expiry.Add(ttl))
	}
}

// lockSeamNew checks AcquireResult.New: true for a grant the call made,
// false for a grant its owner already held, however its expiry compares
// with the call's Now and TTL, and false for a refusal.
func lockSeamNew(t *testing.T, h Harness) {
	seam := newEngine(t, h).Locks()
	now := clock.NewFake(wholeMicroStart).Now()
	for i, step := range []struct {
		owner    string
		at, ttl  time.Duration
		granted  bool
		new      bool
		token    int64
		release  bool
		noClock  bool
		whatever string
	}{
		{owner: "alice", ttl: ttl, granted: true, new: true, token: 1, whatever: "first grant"},
		{owner: "alice", ttl: ttl, granted: true, token: 1, whatever: "re-acquire at the same instant, same TTL"},
		{owner: "alice", at: time.Second, ttl: ttl - time.Second, granted: true, token: 1, whatever: "re-acquire landing on the same expiry"},
		{owner: "alice", at: 2 * time.Second, ttl: time.Hour, granted: true, token: 1, whatever: "re-acquire with a longer TTL"},
		{owner: "bob", at: 3 * time.Second, ttl: ttl, whatever: "refused"},
		{owner: "bob", at: ttl, ttl: ttl, granted: true, new: true, token: 2, whatever: "grant after expiry"},
		{owner: "bob", at: ttl, ttl: ttl, granted: true, token: 2, release: true, whatever: "re-acquire at the grant's instant"},
		{owner: "bob", at: ttl, ttl: ttl, granted: true, new: true, token: 3, whatever: "grant after release, same instant and TTL"},
		{owner: "carol", ttl: ttl, granted: true, new: true, token: 1, noClock: true, whatever: "engine clock: first grant"},
		{owner: "carol", ttl: ttl, granted: true, token: 1, noClock: true, whatever: "engine clock: re-acquire"},
	} {
		p := lock.AcquireParams{Name: "job", Owner: step.owner, TTL: step.ttl, Now: now.Add(step.at)}
		if step.noClock {
			p.Name, p.Now = "clock", time.Time{}
		}
		res, err := seam.Acquire(t.Context(), p)
		if err != nil || res.Granted != step.granted || res.New != step.new || (step.granted && res.Grant.Token != step.token) {
			t.Fatalf("step %d, %s: Acquire(%+v) = %+v, %v; want granted %v, new %v, token %d", i, step.whatever, p, res, err, step.granted, step.new, step.token)
		}
		if step.release {
			if ok, err := seam.Release(t.Context(), lock.ReleaseParams{Name: p.Name, Owner: p.Owner, Token: res.Grant.Token}); !ok || err != nil {
				t.Fatalf("step %d: Release = %v, %v", i, ok, err)
			}
		}
	}
}

// lockSeamNewConcurrent races acquires of a name never granted before, by
// one owner and by many: exactly one call reports a new grant, and every
// other call of its owner gets that grant back.
func lockSeamNewConcurrent(t *testing.T, h Harness) {
	seam := newEngine(t, h).Locks()
	now := clock.NewFake(wholeMicroStart).Now()
	const calls = 8
	for round, owners := range []int{1, calls, 2} {
		name := fmt.Sprint("fresh ", round)
		results := make([]lock.AcquireResult, calls)
		var wg sync.WaitGroup
		for c := range calls {
			wg.Go(func() {
				p := lock.AcquireParams{Name: name, Owner: fmt.Sprint("owner ", c%owners), TTL: ttl, Now: now}
				res, err := seam.Acquire(t.Context(), p)
				if err != nil {
					t.Errorf("Acquire(%+v): %v", p, err)
				}
				results[c] = res
			})
		}
		wg.Wait()
		var fresh []lock.AcquireResult
		for _, res := range results {
			if res.New {
				fresh = append(fresh, res)
			}
		}
		if len(fresh) != 1 || !fresh[0].Granted || fresh[0].Grant.Token != 1 {
			t.Fatalf("%d owners: new grants %+v; want exactly one, token 1", owners, fresh)
		}
		for c, res := range results {
			same := res.Granted && res.Grant == fresh[0].Grant
			if mine := fmt.Sprint("owner ", c%owners) == fresh[0].Grant.Owner; mine != same {
				t.Fatalf("%d owners: call %d got %+v; the new grant is %+v", owners, c, res, fresh[0])
			}
		}
	}
}

// lockConcurrent races many owners for one name, round after round: each
// round exactly one wins, with the round's token.
func lockConcurrent(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	const owners, rounds = 12, 10
	for round := int64(1); round <= rounds; round++ {
		var winners []*lock.Lock
		var mu sync.Mutex
		var wg sync.WaitGroup
		for o := range owners {
			wg.Go(func() {
				lk, ok, err := b.store.TryLock(t.Context(), "contended", fmt.Sprint("owner ", o), ttl)
				if err != nil {
					t.Errorf("TryLock: %v", err)
				}
				if ok {
					mu.Lock()
					winners = append(winners, lk)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d owners got the lock, want exactly 1", round, len(winners))
		}
		wantGrant(t, winners[0], round, b.clock.Now().Add(ttl))
		wantReleased(t, winners[0], true)
	}
}

// lockResult is what a background Lock call returns.
type lockResult struct {
	lk  *lock.Lock
	err error
}

// lockInBackground starts Lock(name, owner) and waits until it has been
// refused at least twice, so it is really waiting.
func lockInBackground(t *testing.T, ctx context.Context, b *lockBundle, name, owner string) <-chan lockResult {
	t.Helper()
	before := b.spy.acquires.Load()
	done := make(chan lockResult, 1)
	go func() {
		lk, err := b.store.Lock(ctx, name, owner, ttl)
		done <- lockResult{lk, err}
	}()
	testkit.Until(t, "Lock to make two attempts", func() bool { return b.spy.acquires.Load() >= before+2 })
	select {
	case r := <-done:
		t.Fatalf("Lock of a held lock returned %v, %v", r.lk, r.err)
	default:
	}
	return done
}

func waitLock(t *testing.T, done <-chan lockResult) lockResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(testkit.Timeout):
		t.Fatalf("Lock did not return within %v", testkit.Timeout)
		return lockResult{}
	}
}

func lockWaitForRelease(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	alice := mustTryLock(t, b.store, "job", "alice", ttl)
	done := lockInBackground(t, t.Context(), b, "job", "bob")
	wantReleased(t, alice, true)
	r := waitLock(t, done)
	if r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	wantGrant(t, r.lk, 2, b.clock.Now().Add(ttl))
}

func lockWaitForExpiry(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	mustTryLock(t, b.store, "job", "alice", ttl)
	done := lockInBackground(t, t.Context(), b, "job", "bob")
	b.clock.Advance(ttl)
	r := waitLock(t, done)
	if r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	if r.lk.Token() != 2 {
		t.Fatalf("Lock after expiry got token %d, want 2", r.lk.Token())
	}
}

func lockWaitCancelled(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	alice := mustTryLock(t, b.store, "job", "alice", ttl)
	ctx, cancel := context.WithCancel(t.Context())
	done := lockInBackground(t, ctx, b, "job", "bob")
	cancel()
	r := waitLock(t, done)
	wantErr(t, r.err, context.Canceled, "Lock cancelled while waiting")
	if r.lk != nil {
		t.Fatalf("cancelled Lock returned a handle, token %d", r.lk.Token())
	}
	wantReleased(t, alice, true)
	wantGrant(t, mustTryLock(t, b.store, "job", "carol", ttl), 2, b.clock.Now().Add(ttl))
}

func mustHold(t *testing.T, b *lockBundle, name, owner string) *lock.Held {
	t.Helper()
	hd, err := b.store.Hold(t.Context(), name, owner, holdTTL)
	if err != nil {
		t.Fatalf("Hold(%q, %q): %v", name, owner, err)
	}
	t.Cleanup(func() { _ = hd.Release(context.WithoutCancel(t.Context())) })
	return hd
}

func wantLost(t *testing.T, hd *lock.Held) {
	t.Helper()
	select {
	case <-hd.Lost():
	case <-time.After(testkit.Timeout):
		t.Fatalf("Held.Lost not closed within %v", testkit.Timeout)
	}
	wantErr(t, hd.Err(), steaderr.ErrLost, "Held.Err")
	wantErr(t, hd.Release(t.Context()), steaderr.ErrLost, "Held.Release of a lost lock")
}

func wantNotLost(t *testing.T, hd *lock.Held) {
	t.Helper()
	select {
	case <-hd.Lost():
		t.Fatalf("Held.Lost closed: %v", hd.Err())
	default:
	}
	if err := hd.Err(); err != nil {
		t.Fatalf("Held.Err of a held lock = %v", err)
	}
}

// lockHold moves the clock in steps of a third of the TTL, well past the
// first lease: the lock is alive only because Hold renews it.
func lockHold(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	hd := mustHold(t, b, "job", "alice")
	if _, ok, err := b.store.TryHold(t.Context(), "job", "bob", holdTTL); err != nil || ok {
		t.Fatalf("TryHold of a held lock = %v, %v; want false, nil", ok, err)
	}
	for range 6 {
		b.clock.Advance(holdTTL / 3)
		want := b.clock.Now().Add(holdTTL)
		testkit.Until(t, "Hold to renew", func() bool { return hd.Grant().Expiry.Equal(want) })
		wantNotLost(t, hd)
	}
	if g := hd.Grant(); g.Name != "job" || g.Owner != "alice" || g.Token != 1 {
		t.Fatalf("Held.Grant() = %+v", g)
	}
	wantBusy(t, b.store, "job", "bob")
	if err := hd.Release(t.Context()); err != nil {
		t.Fatalf("Held.Release: %v", err)
	}
	if err := hd.Release(t.Context()); err != nil {
		t.Fatalf("second Held.Release: %v, want the first's nil", err)
	}
	wantNotLost(t, hd)
	wantGrant(t, mustTryLock(t, b.store, "job", "bob", ttl), 2, b.clock.Now().Add(ttl))
}

func lockHoldLostOnExpiry(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	hd := mustHold(t, b, "job", "alice")
	b.clock.Advance(holdTTL)
	wantLost(t, hd)
	wantGrant(t, mustTryLock(t, b.store, "job", "bob", ttl), 2, b.clock.Now().Add(ttl))
}

// lockHoldLostOnSteal has another owner take the lock on a clock far ahead
// of the holder's: the holder's next renewal is refused.
func lockHoldLostOnSteal(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	hd := mustHold(t, b, "job", "alice")
	later := b.clock.Now().Add(time.Hour)
	res, err := b.eng.Locks().Acquire(t.Context(), lock.AcquireParams{Name: "job", Owner: "mallory", TTL: time.Hour, Now: later})
	if err != nil || !res.Granted || res.Grant.Token != 2 {
		t.Fatalf("Acquire an hour ahead = %+v, %v; want granted, token 2", res, err)
	}
	wantLost(t, hd)
	res, err = b.eng.Locks().Acquire(t.Context(), lock.AcquireParams{Name: "job", Owner: "carol", TTL: ttl, Now: later})
	if err != nil || res.Granted {
		t.Fatalf("the lost holder's release freed the thief's grant: Acquire = %+v, %v", res, err)
	}
}

// lockHoldLateRenewal lets the first renewal succeed only after the clock
// passed the lease's expiry: a late renewal counts as lost.
func lockHoldLateRenewal(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	var once sync.Once
	b.spy.afterRenew = func() { once.Do(func() { b.clock.Advance(holdTTL) }) }
	hd := mustHold(t, b, "job", "alice")
	wantLost(t, hd)
}

// lockHoldReleaseRetry releases a held lock with an ended context: nothing
// is released, and a retry with a live context releases. (That renewal
// stops is lock's own test.)
func lockHoldReleaseRetry(t *testing.T, h Harness) {
	b := setupLocks(t, h)
	hd := mustHold(t, b, "job", "alice")
	wantErr(t, hd.Release(cancelled(t)), context.Canceled, "Held.Release with a cancelled context")
	wantBusy(t, b.store, "job", "bob")
	wantNotLost(t, hd)
	if err := hd.Release(t.Context()); err != nil {
		t.Fatalf("Held.Release retried: %v", err)
	}
	if err := hd.Release(cancelled(t)); err != nil {
		t.Fatalf("Held.Release after a release ran = %v, want its nil", err)
	}
	wantGrant(t, mustTryLock(t, b.store, "job", "bob", ttl), 2, b.clock.Now().Add(ttl))
}
