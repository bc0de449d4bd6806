package server_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/internal/testing/apicheck"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

// gcServer serves a store at url with a 1s grace, on a test clock that
// starts at the system clock's now: its collector and the server's puts
// both read it (TestPutPinsOnTheStoreClock).
func gcServer(t *testing.T, url string) (*stead.Store, *httptest.Server, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Now())
	st, err := stead.Open(context.Background(), url, stead.WithClock(clk.Now), stead.WithGCGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet})))
	t.Cleanup(srv.Close)
	return st, srv, clk
}

func sweepOver(t *testing.T, url, body string) wire.SweepReport {
	t.Helper()
	a := do(t, "POST", url+"/v1/gc/sweep", body, nil)
	if a.status != 200 {
		t.Fatalf("POST /v1/gc/sweep: %d %s", a.status, a.body)
	}
	var rep wire.SweepReport
	if err := json.Unmarshal([]byte(a.body), &rep); err != nil {
		t.Fatalf("sweep report %q: %v", a.body, err)
	}
	return rep
}

// TestGCOverHTTP sweeps, explains and lists pins through the API and
// checks the GC metrics.
func TestGCOverHTTP(t *testing.T) {
	t.Parallel()
	st, srv, clock := gcServer(t, "mem://")
	a := do(t, "PUT", srv.URL+"/v1/blobs", "collect me", nil)
	if a.status != 201 {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	key := blob.KeyOf([]byte("collect me")).String()

	var page wire.PinsPage
	a = do(t, "GET", srv.URL+"/v1/pins", "", nil)
	if err := json.Unmarshal([]byte(a.body), &page); a.status != 200 || err != nil || len(page.Pins) != 1 || page.Pins[0].Key != key || page.Pins[0].Owner != st.InstanceID() {
		t.Fatalf("GET /v1/pins: %d %s (%v)", a.status, a.body, err)
	}

	// No source is registered: a sweep refuses unless told so.
	if a := do(t, "POST", srv.URL+"/v1/gc/sweep", "", nil); a.status != 409 || a.errCode(t) != "protected" || !strings.Contains(a.body, "all-unreferenced") {
		t.Fatalf("sweep of a store with no liveness: %d %s, want 409 protected naming --all-unreferenced", a.status, a.body)
	}
	const all = `{"all_unreferenced":true}`
	if rep := sweepOver(t, srv.URL, all); rep.Staged != 0 || rep.Deleted != 0 {
		t.Fatalf("sweep under a live pin: %+v", rep)
	}
	clock.Advance(blob.DefaultPinTTL + time.Second)
	if rep := sweepOver(t, srv.URL, `{"dry_run":true}`); !rep.DryRun || rep.Reaped != 1 || rep.Staged != 1 {
		t.Fatalf("dry run after the pin expired: %+v", rep)
	}
	if rep := sweepOver(t, srv.URL, all); rep.Reaped != 1 || rep.Staged != 1 || rep.Deleted != 0 {
		t.Fatalf("sweep after the pin expired: %+v", rep)
	}
	var x wire.Explanation
	a = do(t, "GET", srv.URL+"/v1/gc/explain/"+key, "", nil)
	if err := json.Unmarshal([]byte(a.body), &x); a.status != 200 || err != nil || !x.Stored || !x.Staged || len(x.Pins) != 0 || !strings.HasPrefix(x.Verdict, "unprotected") {
		t.Fatalf("GET /v1/gc/explain: %d %s (%v)", a.status, a.body, err)
	}
	a = do(t, "GET", srv.URL+"/v1/pins", "", nil)
	if err := json.Unmarshal([]byte(a.body), &page); err != nil || len(page.Pins) != 0 || len(page.Window) != 1 || page.Window[0].Key != key {
		t.Fatalf("GET /v1/pins with a staged key: %s (%v)", a.body, err)
	}

	// Another sweep holding the lease is an answer, not an error.
	lease, ok, err := st.Engine().GC().AcquireSweep(t.Context(), "test")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep: %v, %v", ok, err)
	}
	if rep := sweepOver(t, srv.URL, all); rep.Aborted != "SweeperBusy" {
		t.Fatalf("sweep while the lease is held: %+v", rep)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	clock.Advance(2 * time.Second)
	if rep := sweepOver(t, srv.URL, all); rep.Deleted != 1 || rep.BytesFreed != int64(len("collect me")) {
		t.Fatalf("sweep past the grace: %+v", rep)
	}
	a = do(t, "GET", srv.URL+"/v1/gc/explain/"+key, "", nil)
	if err := json.Unmarshal([]byte(a.body), &x); a.status != 200 || err != nil || x.Stored || x.Verdict != "not stored" {
		t.Fatalf("explain after deletion: %d %s", a.status, a.body)
	}

	for _, bad := range []struct{ method, path, body, code string }{
		{"GET", "/v1/gc/explain/sha256:nothex", "", "invalid_key"},
		{"POST", "/v1/gc/sweep", `{"dry_run":"yes"}`, "bad_request"},
		{"POST", "/v1/gc/sweep", `{"unknown":1}`, "bad_request"},
		{"PUT", "/v1/gc/sources", `{"schema":"public","table":"t","column":"k"}`, "invalid_argument"},
		{"PUT", "/v1/gc/sources", `{"name":"func"}`, "invalid_argument"},
		{"POST", "/v1/gc/take", `{"limit":-1}`, "invalid_argument"},
		{"POST", "/v1/gc/take", `{"limit":10}`, "bad_request"}, // no lease
		{"POST", "/v1/gc/stage", `{"grace":"-1s"}`, "invalid_argument"},
		{"POST", "/v1/gc/reap", `{"now":"2030-01-01T00:00:00Z"}`, "bad_request"}, // no client clocks here
		{"POST", "/v1/gc/stage", `{"grace":"1000h"}`, "invalid_argument"},        // over gc.MaxGrace
		{"PUT", "/v1/gc/window", `{"keys":["` + key + `"]}`, "bad_request"},      // no lease
		{"POST", "/v1/gc/arbitrate", `{"keys":["` + key + `"]}`, "bad_request"},  // no lease
		{"POST", "/v1/blobs/delete", `{"keys":["sha256:00"]}`, "invalid_key"},
		{"POST", "/v1/blobs/delete", `{"keys":["` + strings.Repeat(key+`","`, 1000) + key + `"]}`, "invalid_argument"}, // 1001 keys
		{"POST", "/v1/gc/lease", `{"holder":""}`, "invalid_name"},
		{"POST", "/v1/gc/lease", `{"holder":"a\u0000b"}`, "invalid_name"},
		{"GET", "/v1/gc/explain/" + key + "?now=2030-01-01T00:00:00Z", "", "bad_request"},
	} {
		a := do(t, bad.method, srv.URL+bad.path, bad.body, nil)
		if a.status != 400 || a.errCode(t) != bad.code {
			t.Errorf("%s %s %s: %d %s, want 400 %s", bad.method, bad.path, bad.body, a.status, a.body, bad.code)
		}
	}
	if a := do(t, "PUT", srv.URL+"/v1/gc/lease/nosuchlease", "", nil); a.status != 409 || a.errCode(t) != "lost" {
		t.Errorf("renewing an unknown sweep lease: %d %s, want 409 lost", a.status, a.body)
	}
	if a := do(t, "DELETE", srv.URL+"/v1/gc/lease/nosuchlease", "", nil); a.status != 204 {
		t.Errorf("releasing an unknown sweep lease: %d %s, want 204", a.status, a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/gc/sources", `{"name":"func"}`, nil); !strings.Contains(a.body, "Go-function") {
		t.Errorf("a Go-function source over HTTP: %s, want an error naming it", a.body)
	}

	a = do(t, "GET", srv.URL+"/metrics", "", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(a.body))
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name, result string) float64 {
		var n float64
		for _, m := range families[name].GetMetric() {
			if result == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == result {
				n += m.GetCounter().GetValue()
			}
		}
		return n
	}
	for _, c := range []struct {
		name, result string
		want         float64
	}{
		{"stead_gc_sweeps_total", "done", 3},
		{"stead_gc_sweeps_total", "dry_run", 1},
		{"stead_gc_sweeps_total", "busy", 1},
		{"stead_gc_deletions_total", "", 1},
		{"stead_gc_bytes_freed_total", "", float64(len("collect me"))},
	} {
		if got := sum(c.name, c.result); got != c.want {
			t.Errorf("%s{result=%q} = %v, want %v", c.name, c.result, got, c.want)
		}
	}
}

// TestSourcesOverHTTP registers, lists and unregisters a SQL liveness
// source on a server over PostgreSQL, and checks that it protects.
func TestSourcesOverHTTP(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st, srv, _ := gcServer(t, db.StoreURL())
	if _, err := db.Admin.Exec(t.Context(), `CREATE TABLE "`+db.Schema+`".app_refs (k text)`); err != nil {
		t.Fatal(err)
	}
	src := `{"schema":"` + db.Schema + `","table":"app_refs","column":"k"}`
	a := do(t, "PUT", srv.URL+"/v1/gc/sources", src, nil)
	if a.status != 204 {
		t.Fatalf("PUT /v1/gc/sources: %d %s", a.status, a.body)
	}
	var list wire.Sources
	a = do(t, "GET", srv.URL+"/v1/gc/sources", "", nil)
	if err := json.Unmarshal([]byte(a.body), &list); err != nil || len(list.Sources) != 1 || list.Sources[0] != (wire.Source{Schema: db.Schema, Table: "app_refs", Column: "k"}) {
		t.Fatalf("GET /v1/gc/sources: %d %s", a.status, a.body)
	}
	srcs, err := st.GC.Sources(t.Context())
	if err != nil || len(srcs) != 1 {
		t.Fatalf("the store's sources: %v, %v", srcs, err)
	}
	if a := do(t, "DELETE", srv.URL+"/v1/gc/sources", src, nil); a.status != 204 {
		t.Fatalf("DELETE /v1/gc/sources: %d %s", a.status, a.body)
	}
	a = do(t, "GET", srv.URL+"/v1/gc/sources", "", nil)
	if err := json.Unmarshal([]byte(a.body), &list); err != nil || len(list.Sources) != 0 {
		t.Fatalf("GET /v1/gc/sources after DELETE: %s", a.body)
	}
	if a := do(t, "PUT", srv.URL+"/v1/gc/sources", `{"schema":"","table":"app_refs","column":"k"}`, nil); a.status != 400 || a.errCode(t) != "invalid_name" {
		t.Fatalf("PUT an empty schema: %d %s", a.status, a.body)
	}
}

// TestSweepReportsUploads: a sweep over HTTP reports the abandoned
// uploads it reaped in its report's uploads field.
func TestSweepReportsUploads(t *testing.T) {
	t.Parallel()
	_, srv, clk := gcServer(t, "mem://")
	id := beginUpload(t, srv.URL, "")
	if a := do(t, "PUT", srv.URL+"/v1/uploads/"+id+"/0?lease=1ms", "abandoned", nil); a.status != 200 {
		t.Fatalf("append = %d %s", a.status, a.body)
	}
	clk.Advance(time.Second) // the upload's lease lapses, on the store's clock
	if rep := sweepOver(t, srv.URL, `{"all_unreferenced":true}`); rep.Uploads != 1 {
		t.Fatalf("sweep report %+v, want uploads 1", rep)
	}
	if a := do(t, "PUT", srv.URL+"/v1/uploads/"+id+"/9?lease=1m", "more", nil); a.status != 409 || a.errCode(t) != "lost" {
		t.Fatalf("an append to the reaped upload = %d %s, want 409 lost", a.status, a.body)
	}
}

// TestWindowFences: only the sweep-lease holder stages, at a deadline
// from now to now + gc.MaxGrace, and only stored keys enter the window.
func TestWindowFences(t *testing.T) {
	t.Parallel()
	st, srv, _ := gcServer(t, "mem://")
	stored, err := st.Blobs.Put(context.Background(), strings.NewReader("staged"))
	if err != nil {
		t.Fatal(err)
	}
	absent := blob.KeyOf([]byte("never stored"))
	stage := func(lease string, at time.Time, keys ...blob.Key) answer {
		t.Helper()
		texts := make([]string, len(keys))
		for i, k := range keys {
			texts[i] = k.String()
		}
		body, _ := json.Marshal(map[string]any{"lease": lease, "keys": texts, "visible_after": at})
		return do(t, "PUT", srv.URL+"/v1/gc/window", string(body), nil)
	}
	soon := time.Now().Add(time.Minute)
	if a := stage("", soon, stored); a.status != 400 {
		t.Fatalf("staging without a lease = %d %s, want 400", a.status, a.body)
	}
	lease := takeLease(t, srv.URL, "fences")
	for _, at := range []time.Time{
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Now().Add(gc.MaxGrace + time.Hour),
		time.Now().Add(-time.Hour),
	} {
		if a := stage(lease, at, stored); a.status != 400 || a.errCode(t) != "invalid_argument" {
			t.Fatalf("staging visible after %v = %d %s, want 400 invalid_argument", at, a.status, a.body)
		}
	}
	if a := stage(lease, soon, stored, absent); a.status != 204 {
		t.Fatalf("staging within the grace = %d %s", a.status, a.body)
	}
	a := do(t, "GET", srv.URL+"/v1/pins", "", nil)
	var page wire.PinsPage
	if err := json.Unmarshal([]byte(a.body), &page); a.status != 200 || err != nil {
		t.Fatalf("GET /v1/pins = %d %s", a.status, a.body)
	}
	if len(page.Window) != 1 || page.Window[0].Key != stored.String() {
		t.Fatalf("window = %+v, want %s alone: a key not stored is not staged", page.Window, stored)
	}
}

// TestPutPinsOnTheStoreClock: a put over HTTP pins on the store's clock
// (stead.WithClock) for the store's pin TTL (stead.WithPinTTL), the ones
// its collector judges pins by, however far that clock is from the
// system's.
func TestPutPinsOnTheStoreClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(clock.FakeStart)
	const ttl = 5 * time.Second
	st, err := stead.Open(t.Context(), "mem://", stead.WithClock(clk.Now), stead.WithPinTTL(ttl), stead.WithGCGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet})))
	t.Cleanup(srv.Close)
	if a := do(t, "PUT", srv.URL+"/v1/blobs", "on the store's clock", nil); a.status != 201 {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	var page wire.PinsPage
	a := do(t, "GET", srv.URL+"/v1/pins", "", nil)
	want := clock.FakeStart.Truncate(time.Microsecond).Add(ttl)
	if err := json.Unmarshal([]byte(a.body), &page); err != nil || len(page.Pins) != 1 || !page.Pins[0].Expiry.Equal(want) {
		t.Fatalf("GET /v1/pins: %s (%v), want one pin expiring at %v", a.body, err, want)
	}
	clk.Advance(ttl)
	if rep := sweepOver(t, srv.URL, `{"all_unreferenced":true}`); rep.Reaped != 1 || rep.Staged != 1 {
		t.Fatalf("sweep at the pin's expiry: %+v, want it reaped and the key staged", rep)
	}
}
