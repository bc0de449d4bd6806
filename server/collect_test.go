package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server"
)

// gathered returns the value of metric name (a counter's, a gauge's or a
// histogram's sample count) summed over the series whose result label is
// result ("" for all).
func gathered(t *testing.T, g prometheus.Gatherer, name, result string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if result != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != result) {
				continue
			}
			switch {
			case m.Counter != nil:
				n += m.GetCounter().GetValue()
			case m.Gauge != nil:
				n += m.GetGauge().GetValue()
			case m.Histogram != nil:
				n += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return n
}

// TestBackgroundSweeps drives the server's interval sweeps with ticks the
// test sends, on a fake clock: a store declaring no liveness is left
// alone, another sweeper's lease makes a tick count busy, and garbage is
// staged by one sweep and deleted by a sweep a grace later, each sweep
// logged and counted in the stead_gc_* metrics, and a front end's usage
// read into the stead_usage_* ones.
func TestBackgroundSweeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, err := stead.Open(ctx, "mem://", stead.WithClock(clk.Now), stead.WithGCGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	// A front end's collection runs before each sweep; a failed one is
	// logged and counted, and the sweep runs anyway.
	var collections int
	front := server.Mount{Prefix: "/front/", Handler: http.NotFoundHandler(), RefPrefix: "ke", Collect: func(context.Context) error {
		collections++
		if collections == 1 {
			return errors.New("front end failed")
		}
		return nil
	}}
	srv := server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg, Gatherer: reg, Mounts: []server.Mount{front}})
	// sweep runs the loop for one tick: the loop ends once ticks closes,
	// which it reads after the tick's sweep ended.
	sweep := func() {
		ticks := make(chan time.Time)
		done := make(chan struct{})
		go func() { defer close(done); server.Collect(srv, ctx, ticks) }()
		ticks <- clk.Now()
		close(ticks)
		<-done
	}

	garbage := []byte("garbage")
	if _, err := st.Blobs.Put(ctx, bytes.NewReader(garbage)); err != nil {
		t.Fatal(err)
	}
	sweep()
	if got := gathered(t, reg, "stead_gc_sweeps_total", "no_liveness"); got != 1 {
		t.Fatalf("a sweep of a store declaring no liveness counted %v no_liveness", got)
	}
	if got := gathered(t, reg, "stead_gc_collect_errors_total", ""); collections != 1 || got != 1 {
		t.Fatalf("after a failed collection: %d collections, stead_gc_collect_errors_total = %v; want 1, 1", collections, got)
	}
	kept, err := st.Blobs.Put(ctx, strings.NewReader("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Refs.Set(ctx, "keep", kept, ref.SetOptions{}); err != nil {
		t.Fatal(err)
	}

	lease, ok, err := st.Engine().GC().AcquireSweep(ctx, "another server")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep: %v, %v", ok, err)
	}
	sweep()
	if got := gathered(t, reg, "stead_gc_sweeps_total", "busy"); got != 1 {
		t.Fatalf("a sweep while another holds the lease counted %v busy", got)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	clk.Advance(blob.DefaultPinTTL + time.Second)
	sweep() // reaps the pins and stages the garbage
	if got := gathered(t, reg, "stead_gc_staged_total", ""); got != 1 {
		t.Fatalf("stead_gc_staged_total = %v after the pins lapsed, want 1", got)
	}
	// What the store holds after it: both blobs, the garbage pending.
	for name, want := range map[string]float64{"stead_gc_stored_blobs": 2, "stead_gc_stored_bytes": float64(len(garbage) + len("kept")),
		"stead_gc_pending_blobs": 1, "stead_gc_pending_bytes": float64(len(garbage))} {
		if got := gathered(t, reg, name, ""); got != want {
			t.Errorf("%s = %v after staging, want %v", name, got, want)
		}
	}
	// The front end's usage after it: the ref "keep" under its prefix.
	for name, want := range map[string]float64{"stead_usage_refs": 1, "stead_usage_blobs": 1, "stead_usage_bytes": float64(len("kept")), "stead_usage_dedup_saved_bytes": 0} {
		if got := gathered(t, reg, name, "ke"); got != want {
			t.Errorf("%s{prefix=\"ke\"} = %v after a sweep, want %v", name, got, want)
		}
	}
	sweep() // within the grace: nothing goes
	if got := gathered(t, reg, "stead_gc_deletions_total", ""); got != 0 {
		t.Fatalf("stead_gc_deletions_total = %v within the grace, want 0", got)
	}
	clk.Advance(2 * time.Second)
	before := time.Now()
	sweep()
	for _, c := range []struct {
		name, result string
		want         float64
	}{
		{"stead_gc_sweeps_total", "done", 3},
		{"stead_gc_sweeps_total", "busy", 1},
		{"stead_gc_sweeps_total", "no_liveness", 1},
		{"stead_gc_deletions_total", "", 1},
		{"stead_gc_bytes_freed_total", "", float64(len(garbage))},
		{"stead_gc_staged_total", "", 1},
		{"stead_gc_orphans_deleted_total", "", 0},
		{"stead_gc_sweep_duration_seconds", "", 3},
		{"stead_gc_stored_blobs", "", 1},
		{"stead_gc_stored_bytes", "", float64(len("kept"))},
		{"stead_gc_pending_blobs", "", 0},
		{"stead_gc_pending_bytes", "", 0},
	} {
		if got := gathered(t, reg, c.name, c.result); got != c.want {
			t.Errorf("%s{result=%q} = %v, want %v", c.name, c.result, got, c.want)
		}
	}
	if last := gathered(t, reg, "stead_gc_last_success_timestamp_seconds", ""); last < float64(before.Unix()) {
		t.Errorf("stead_gc_last_success_timestamp_seconds = %v, before the last sweep (%v)", last, before.Unix())
	}
	if ok, err := st.Blobs.Has(ctx, blob.KeyOf(garbage)); err != nil || ok {
		t.Errorf("the garbage is still stored (%v, %v)", ok, err)
	}
	if ok, err := st.Blobs.Has(ctx, kept); err != nil || !ok {
		t.Errorf("the kept blob is gone (%v, %v)", ok, err)
	}
	if collections != 5 {
		t.Errorf("%d collections for 5 sweeps", collections)
	}
	if !strings.Contains(logs.String(), "front end failed") || !strings.Contains(logs.String(), "gc: swept") || !strings.Contains(logs.String(), "deleted=1") ||
		!strings.Contains(logs.String(), "stored_bytes=4 pending_blobs=0") {
		t.Errorf("the sweeps were not logged:\n%s", logs.String())
	}
}

// TestUsage: GET /v1/usage counts the distinct blobs a prefix's refs name
// once, and what naming them more than once saved; another prefix's refs
// are not counted. The answers are checked against docs/openapi.yaml.
func TestUsage(t *testing.T) {
	t.Parallel()
	st, srv, _ := gcServer(t, "mem://")
	ctx := context.Background()
	put := func(s string) blob.Key {
		k, err := st.Blobs.Put(ctx, strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	layer, config, other := put("a layer of twenty b."), put("cfg"), put("elsewhere")
	for name, k := range map[string]blob.Key{"oci/app/_blobs/l": layer, "oci/app/_tags/v1": layer, "oci/app/_tags/v2": config, "oci/apps/_tags/x": other} {
		if _, err := st.Refs.Set(ctx, name, k, ref.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a := do(t, "GET", srv.URL+"/v1/usage?prefix=oci/app/_", "", nil)
	var u wire.Usage
	if err := json.Unmarshal([]byte(a.body), &u); a.status != 200 || err != nil {
		t.Fatalf("GET /v1/usage: %d %s", a.status, a.body)
	}
	want := wire.Usage{Prefix: "oci/app/_", Refs: 3, Blobs: 2, Bytes: 23, ReferencedBytes: 43, DedupSavedBytes: 20}
	if u != want {
		t.Fatalf("usage = %+v, want %+v", u, want)
	}
	if a := do(t, "GET", srv.URL+"/v1/usage?prefix=nothing/", "", nil); a.status != 200 || !strings.Contains(a.body, `"refs":0`) {
		t.Fatalf("usage of an empty prefix: %d %s", a.status, a.body)
	}
}
