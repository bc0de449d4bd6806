package gc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

func TestParseSource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want gc.Source
		err  error
	}{
		{"app.manifests(layer)", gc.Source{Schema: "app", Table: "manifests", Column: "layer"}, nil},
		{"Ünï.cödé(ê)", gc.Source{Schema: "Ünï", Table: "cödé", Column: "ê"}, nil},
		{"manifests(layer)", gc.Source{}, steaderr.ErrInvalidArgument},
		{"app.manifests", gc.Source{}, steaderr.ErrInvalidArgument},
		{"a.b.c(d)", gc.Source{}, steaderr.ErrInvalidArgument},
		{"a.b(c(d))", gc.Source{}, steaderr.ErrInvalidArgument},
		{"a.b()", gc.Source{}, steaderr.ErrInvalidName},
		{".b(c)", gc.Source{}, steaderr.ErrInvalidName},
		{"a.(c)", gc.Source{}, steaderr.ErrInvalidName},
		{"a.b(" + strings.Repeat("x", 64) + ")", gc.Source{}, steaderr.ErrInvalidName},
		{"a.b(c\x00)", gc.Source{}, steaderr.ErrInvalidName},
		{"", gc.Source{}, steaderr.ErrInvalidArgument},
	}
	for _, tc := range tests {
		got, err := gc.ParseSource(tc.in)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("ParseSource(%q) = %v, want an error wrapping %v", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want.String() || got.Schema != tc.want.Schema || got.Table != tc.want.Table || got.Column != tc.want.Column {
			t.Errorf("ParseSource(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestVerdictErr(t *testing.T) {
	t.Parallel()
	for outcome, want := range map[blob.Outcome]error{blob.Deleted: nil, blob.Absent: steaderr.ErrNotFound, blob.Protected: steaderr.ErrProtected, blob.Busy: steaderr.ErrProtected} {
		if err := (blob.Verdict{Outcome: outcome}).Err(); !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("Verdict{%d}.Err() = %v, want %v", outcome, err, want)
		}
	}
}

func TestProcessLease(t *testing.T) {
	t.Parallel()
	var p gc.ProcessLease
	l, ok := p.TryAcquire()
	if !ok {
		t.Fatal("a free lease was refused")
	}
	if _, ok := p.TryAcquire(); ok {
		t.Fatal("a held lease was granted twice")
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.TryAcquire(); !ok {
		t.Fatal("a released lease was refused")
	}
}

func TestExplanationVerdict(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	key := blob.KeyOf([]byte("x"))
	tests := []struct {
		x    gc.Explanation
		want string
	}{
		{gc.Explanation{Key: key, Now: now}, "not stored"},
		{gc.Explanation{Key: key, Now: now, Stored: true}, "the next staging pass stages it"},
		{gc.Explanation{Key: key, Now: now, Stored: true, Pins: []gc.PinInfo{{Owner: "a", Expiry: now}}}, "the next staging pass stages it"},
		{gc.Explanation{Key: key, Now: now, Stored: true, Pins: []gc.PinInfo{{Owner: "a", Expiry: now.Add(time.Second)}}}, "kept: pinned by a"},
		{gc.Explanation{Key: key, Now: now, Stored: true, Sources: []string{"s.t(c)"}}, "kept: referenced by s.t(c)"},
		{gc.Explanation{Key: key, Now: now, Stored: true, Staged: true, VisibleAfter: now}, "the next sweep deletes it"},
		{gc.Explanation{Key: key, Now: now, Stored: true, Staged: true, VisibleAfter: now.Add(time.Hour)}, "deletable from"},
		{gc.Explanation{Key: key, Now: now, Stored: true, Refs: []gc.RefInfo{{Name: "l", Weak: true}}}, `unprotected: the next staging pass stages it (named by weak ref "l", which keeps nothing)`},
		{gc.Explanation{Key: key, Now: now, Stored: true, Refs: []gc.RefInfo{{Name: "l", Weak: true}, {Name: "t"}}}, `kept: named by ref "t" (named by weak ref "l", which keeps nothing)`},
	}
	for _, tc := range tests {
		if got := tc.x.Verdict(); !strings.Contains(got, tc.want) {
			t.Errorf("Verdict(%+v) = %q, want it to say %q", tc.x, got, tc.want)
		}
	}
	expired := gc.Explanation{Key: key, Now: now, Stored: true, Refs: []gc.RefInfo{{Name: "l", Weak: true, Expiry: now}}}
	if got, want := expired.Verdict(), "unprotected: the next staging pass stages it"; got != want {
		t.Errorf("Verdict of an expired weak ref's key = %q, want %q", got, want)
	}
}

// heldLease stands for a held sweep lease in CheckStage's tests.
type heldLease struct{}

func (heldLease) Renew(context.Context) error   { return nil }
func (heldLease) Release(context.Context) error { return nil }

// TestCheckStage: a stage needs a lease and a deadline from now to now +
// MaxGrace (or none: now).
func TestCheckStage(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	key := []blob.Key{blob.KeyOf([]byte("k"))}
	for _, tc := range []struct {
		name string
		p    gc.StageParams
		ok   bool
	}{
		{"now", gc.StageParams{Keys: key, Lease: heldLease{}}, true},
		{"at now", gc.StageParams{Keys: key, VisibleAfter: now, Lease: heldLease{}}, true},
		{"at the largest grace", gc.StageParams{Keys: key, VisibleAfter: now.Add(gc.MaxGrace), Lease: heldLease{}}, true},
		{"no lease", gc.StageParams{Keys: key, VisibleAfter: now}, false},
		{"past", gc.StageParams{Keys: key, VisibleAfter: now.Add(-time.Microsecond), Lease: heldLease{}}, false},
		{"beyond the largest grace", gc.StageParams{Keys: key, VisibleAfter: now.Add(gc.MaxGrace + time.Microsecond), Lease: heldLease{}}, false},
		{"year 9999", gc.StageParams{Keys: key, VisibleAfter: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), Lease: heldLease{}}, false},
		{"zero key", gc.StageParams{Keys: []blob.Key{{}}, Lease: heldLease{}}, false},
	} {
		err := gc.CheckStage(tc.p, now)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, steaderr.ErrInvalidArgument) && !errors.Is(err, steaderr.ErrInvalidKey) {
			t.Errorf("%s: CheckStage = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// TestReportStored: a report names what the store held after the sweep
// when it was read, and says nothing of it otherwise; a collector over no
// backend cannot tell (errors.ErrUnsupported).
func TestReportStored(t *testing.T) {
	t.Parallel()
	rep := gc.Report{Stored: &gc.Stored{Blobs: 3, Bytes: 300, PendingBlobs: 1, PendingBytes: 10}}
	if s := rep.String(); !strings.Contains(s, "; stored 3 blobs (300 bytes), 1 pending (10 bytes); in ") {
		t.Errorf("Report.String() = %q, want what is stored named", s)
	}
	if s := (gc.Report{}).String(); strings.Contains(s, "stored") {
		t.Errorf("Report.String() without Stored = %q, names it", s)
	}
	if _, err := gc.New(nil, gc.Options{}).Stored(t.Context()); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Stored over no backend = %v, want ErrUnsupported", err)
	}
}
