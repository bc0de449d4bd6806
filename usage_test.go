package stead_test

import (
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
)

// TestUsageActivity: NotePush and NotePull give Usage its last push and
// pull; a pull within half of PullResolution of the one recorded writes
// nothing, from the same Store (its memory) or another (it reads first);
// a key not stored notes nothing, without error.
func TestUsageActivity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := "sqlite://" + t.TempDir() + "/stead.db"
	st, err := stead.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, err := st.Blobs.Put(ctx, strings.NewReader("manifest"))
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "oci/app/_"
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if u, err := st.Usage(ctx, prefix); err != nil || !u.LastPush.IsZero() || !u.LastPull.IsZero() {
		t.Fatalf("usage before any note = %+v, %v; want no activity", u, err)
	}
	if err := st.NotePush(ctx, prefix, k, t0); err != nil {
		t.Fatal(err)
	}
	if err := st.NotePull(ctx, prefix, k, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	version := func() int64 {
		t.Helper()
		r, err := st.Refs.Get(ctx, "_activity/"+prefix+"@")
		if err != nil {
			t.Fatal(err)
		}
		return r.Version
	}
	v := version()
	other, err := stead.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	soon := t0.Add(time.Minute + stead.PullResolution/2 - time.Second)
	for _, s := range []*stead.Store{st, other} {
		if err := s.NotePull(ctx, prefix, k, soon); err != nil {
			t.Fatal(err)
		}
	}
	if version() != v {
		t.Fatal("a pull within half the resolution wrote the activity ref")
	}
	later := t0.Add(2 * stead.PullResolution)
	if err := other.NotePull(ctx, prefix, k, later); err != nil {
		t.Fatal(err)
	}
	u, err := st.Usage(ctx, prefix)
	if err != nil || !u.LastPush.Equal(t0) || !u.LastPull.Equal(later) {
		t.Fatalf("usage = %+v, %v; want last push %v, last pull %v", u, err, t0, later)
	}
	if u.Refs != 0 {
		t.Fatalf("usage counts %d refs: the activity ref is outside the prefix", u.Refs)
	}
	absent := blob.KeyOf([]byte("never stored"))
	if err := st.NotePush(ctx, "oci/other/_", absent, t0); err != nil {
		t.Fatalf("note of a key not stored = %v, want nil", err)
	}
	if u, err := st.Usage(ctx, "oci/other/_"); err != nil || !u.LastPush.IsZero() {
		t.Fatalf("usage after a note of a key not stored = %+v, %v; want none", u, err)
	}
	if u, err := st.Usage(ctx, "bad//prefix"); err != nil || !u.LastPush.IsZero() {
		t.Fatalf("usage of a prefix no activity ref can name = %+v, %v", u, err)
	}
}
