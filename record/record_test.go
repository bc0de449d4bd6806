package record

import (
	"testing"
	"time"
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
	got := timestamp(in)
	if !got.Equal(time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.UTC)) || got.Location() != time.UTC {
		t.Fatalf("timestamp(%v) = %v, want the instant in UTC, truncated to the microsecond", in, got)
	}
	if !timestamp(time.Time{}).IsZero() {
		t.Fatal("Timestamp of the zero time is not zero")
	}
}
