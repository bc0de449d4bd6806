package server_test

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

// takeLease takes the sweep lease over HTTP for holder and returns its id
// ("" when another sweep holds it).
func takeLease(t *testing.T, url, holder string) string {
	t.Helper()
	a := do(t, "POST", url+"/v1/gc/lease", `{"holder":"`+holder+`"}`, nil)
	var l wire.SweepLease
	if err := json.Unmarshal([]byte(a.body), &l); a.status != 200 || err != nil {
		t.Fatalf("POST /v1/gc/lease: %d %s (%v)", a.status, a.body, err)
	}
	return l.ID
}

// sweepLockKey is the advisory lock key of the sweep lease of schema
// (engine/postgres: fnv-64a of "stead:sweep:" + schema).
func sweepLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("stead:sweep:" + schema))
	return int64(h.Sum64())
}

// TestSweepLeaseFencesSteps: every step of a remote sweep names its lease,
// and once the lease's database session is gone (here terminated, and the
// lease taken by another sweeper), renewing it and every step under it are
// refused with 409 lost; a step naming no lease is refused too.
func TestSweepLeaseFencesSteps(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, srv, _ := gcServer(t, db.StoreURL())
	ctx := context.Background()
	a := takeLease(t, srv.URL, "A")
	if a == "" {
		t.Fatal("A did not get the lease")
	}
	key := sweepLockKey(db.Schema)
	var pid int
	if err := db.Admin.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid::bigint = ($1::bigint >> 32) & 4294967295 AND objid::bigint = $1::bigint & 4294967295`, key).Scan(&pid); err != nil {
		t.Fatalf("finding the lease's backend: %v", err)
	}
	if _, err := db.Admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	var b string
	testkit.Until(t, "B to take the lease A's session held", func() bool { b = takeLease(t, srv.URL, "B"); return b != "" })

	steps := []struct{ method, path, body string }{
		{"PUT", "/v1/gc/lease/" + a, ""},
		{"POST", "/v1/gc/reap", `{"lease":"` + a + `"}`},
		{"POST", "/v1/gc/take", `{"lease":"` + a + `","limit":10}`},
		{"POST", "/v1/gc/stage", `{"lease":"` + a + `","limit":10}`},
		{"POST", "/v1/gc/arbitrate", `{"lease":"` + a + `","keys":[]}`},
	}
	for _, st := range steps {
		if got := do(t, st.method, srv.URL+st.path, st.body, nil); got.status != 409 || got.errCode(t) != "lost" {
			t.Errorf("%s %s under A's dead lease: %d %s, want 409 lost", st.method, st.path, got.status, got.body)
		}
	}
	if got := do(t, "POST", srv.URL+"/v1/gc/arbitrate", `{"keys":[]}`, nil); got.status != 400 {
		t.Errorf("arbitrate without a lease: %d %s, want 400", got.status, got.body)
	}
	// B's lease works.
	if got := do(t, "POST", srv.URL+"/v1/gc/take", `{"lease":"`+b+`","limit":10}`, nil); got.status != 200 {
		t.Errorf("take under B's lease: %d %s", got.status, got.body)
	}
	if got := do(t, "PUT", srv.URL+"/v1/gc/lease/"+b, "", nil); got.status != 204 {
		t.Errorf("renewing B's lease: %d %s", got.status, got.body)
	}
}

// TestSweepLeaseIdle: a remote sweeper that stops renewing (stopped, or
// dead) loses its lease after the server's idle time: its next step is
// refused with 409 lost, and another sweeper may take the lease.
func TestSweepLeaseIdle(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := server.New(st, server.Options{Logger: quiet})
	server.SetSweepLeaseIdle(s, 50*time.Millisecond)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	a := takeLease(t, srv.URL, "A")
	if a == "" {
		t.Fatal("A did not get the lease")
	}
	var b string
	testkit.Until(t, "the idle lease to be released", func() bool { b = takeLease(t, srv.URL, "B"); return b != "" })
	if got := do(t, "POST", srv.URL+"/v1/gc/take", `{"lease":"`+a+`","limit":10}`, nil); got.status != 409 || got.errCode(t) != "lost" {
		t.Errorf("a step of the stopped sweeper: %d %s, want 409 lost", got.status, got.body)
	}
}
