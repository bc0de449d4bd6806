package record

import (
	"errors"
	"testing"
	"time"

	"github.com/steadkit/stead/steaderr"
)

func TestStatusClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status           Status
		terminal, parked bool
	}{
		{Active, false, false},
		{Suspended, false, true},
		{Completed, true, true},
		{Failed, true, true},
		{Canceled, true, true},
		{"retrying", false, false}, // not named: claimable by exclusion
		{"", false, false},
	} {
		if got := tc.status.Terminal(); got != tc.terminal {
			t.Errorf("%q.Terminal() = %v, want %v", tc.status, got, tc.terminal)
		}
		if got := tc.status.Parked(); got != tc.parked {
			t.Errorf("%q.Parked() = %v, want %v", tc.status, got, tc.parked)
		}
	}
}

func TestLeaseExpiresAtItsExpiry(t *testing.T) {
	t.Parallel()
	expiry := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := Lease{Owner: "o", Expiry: expiry}
	if !l.Held(expiry.Add(-time.Nanosecond)) || l.Held(expiry) || l.Held(expiry.Add(time.Nanosecond)) {
		t.Fatal("a lease must be held before its expiry and expired at it")
	}
	if (Lease{Expiry: expiry}).Held(expiry.Add(-time.Hour)) {
		t.Fatal("a lease without an owner is never held")
	}
	rec := Record{Status: Active, Lease: l}
	if rec.Claimable(expiry.Add(-time.Nanosecond)) || !rec.Claimable(expiry) {
		t.Fatal("an active record is claimable exactly when its lease is not held")
	}
	rec.Status = Suspended
	if rec.Claimable(expiry) {
		t.Fatal("a suspended record is never claimable")
	}
}

func TestTimestamp(t *testing.T) {
	t.Parallel()
	zone := time.FixedZone("+2", 7200)
	in := time.Date(2026, 5, 6, 9, 8, 9, 123456789, zone)
	got := Timestamp(in)
	if !got.Equal(time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.UTC)) || got.Location() != time.UTC {
		t.Fatalf("Timestamp(%v) = %v, want the instant in UTC, truncated to the microsecond", in, got)
	}
	if !Timestamp(time.Time{}).IsZero() {
		t.Fatal("Timestamp of the zero time is not zero")
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stored := Record{ID: "r", Group: "g", Version: 3, Lease: Lease{Owner: "a", Incarnation: 2, Expiry: now.Add(time.Minute)}}
	update := stored
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"save create over existing", CheckSave(Record{ID: "r", Group: "g"}, stored, true), steaderr.ErrConflict},
		{"save create", CheckSave(Record{ID: "r", Group: "g"}, Record{}, false), nil},
		{"save update absent", CheckSave(update, Record{}, false), steaderr.ErrConflict},
		{"save update", CheckSave(update, stored, true), nil},
		{"save other group", CheckSave(Record{ID: "r", Group: "h", Version: 3}, stored, true), steaderr.ErrWrongGroup},
		{"save stale", CheckSave(Record{ID: "r", Group: "g", Version: 2, Lease: stored.Lease}, stored, true), steaderr.ErrConflict},
		{"save foreign lease", CheckSave(Record{ID: "r", Group: "g", Version: 3, Lease: Lease{Owner: "b", Incarnation: 2}}, stored, true), steaderr.ErrConflict},
		{"save release", CheckSave(Record{ID: "r", Group: "g", Version: 3}, stored, true), nil},
		{"claim absent", CheckClaim("g", "b", now, Record{}, false), steaderr.ErrNotFound},
		{"claim other group", CheckClaim("h", "b", now, stored, true), steaderr.ErrWrongGroup},
		{"claim leased", CheckClaim("g", "b", now, stored, true), steaderr.ErrLeased},
		{"claim by holder", CheckClaim("g", "a", now, stored, true), nil},
		{"claim at expiry", CheckClaim("g", "b", now.Add(time.Minute), stored, true), nil},
		{"renew", CheckRenew(RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 2, Now: now}, stored, true), nil},
		{"renew lapsed", CheckRenew(RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 2, Now: now.Add(time.Hour)}, stored, true), nil},
		{"renew superseded", CheckRenew(RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 1, Now: now}, stored, true), steaderr.ErrLeased},
		{"renew released", CheckRenew(RenewParams{ID: "r", Group: "g", Owner: "b", Incarnation: 2, Now: now.Add(time.Hour)}, stored, true), steaderr.ErrConflict},
		{"renew absent", CheckRenew(RenewParams{ID: "r", Group: "g", Owner: "a", Incarnation: 2, Now: now}, Record{}, false), steaderr.ErrNotFound},
	} {
		if (tc.want == nil) != (tc.err == nil) || !errors.Is(tc.err, tc.want) && tc.want != nil {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}
