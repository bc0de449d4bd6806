package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// gcMetrics count the sweeps the server runs: through the API and on
// its interval (Options.GCInterval).
type gcMetrics struct {
	sweeps      *prometheus.CounterVec
	deletions   prometheus.Counter
	bytesFreed  prometheus.Counter
	staged      prometheus.Counter
	orphans     prometheus.Counter
	duration    prometheus.Histogram
	lastSuccess prometheus.Gauge
	// stored* and pending* are what the store held after the last sweep
	// that read it (gc.Report.Stored).
	storedBlobs, storedBytes, pendingBlobs, pendingBytes prometheus.Gauge
	// collectErrors counts the front ends' collections that failed.
	collectErrors prometheus.Counter
}

func newGCMetrics(reg prometheus.Registerer) *gcMetrics {
	m := &gcMetrics{
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stead_gc_sweeps_total", Help: "Garbage-collection sweeps this server ran (through the API or on its interval), by result: done, dry_run, busy (another sweep held the lease), no_liveness (the store declares none, so nothing was deleted) or error.",
		}, []string{"result"}),
		deletions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_gc_deletions_total", Help: "Blobs deleted by this server's sweeps and the arbitrations run through the API.",
		}),
		bytesFreed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_gc_bytes_freed_total", Help: "Bytes of blobs deleted by this server's sweeps and the arbitrations run through the API.",
		}),
		staged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_gc_staged_total", Help: "Blobs this server's sweeps found unreferenced and staged for deletion after a grace.",
		}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_gc_orphans_deleted_total", Help: "Bytes-tier objects no blob names that this server's sweeps deleted.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "stead_gc_sweep_duration_seconds", Help: "Time this server's sweeps that ran (done) took.",
			Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600},
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stead_gc_last_success_timestamp_seconds", Help: "When this server's last sweep that ran (done) ended, in Unix seconds; 0 before the first.",
		}),
		storedBlobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stead_gc_stored_blobs", Help: "Blobs the store held after this server's last sweep; 0 before the first.",
		}),
		storedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stead_gc_stored_bytes", Help: "Bytes of the blobs the store held after this server's last sweep (each blob once, by its size); 0 before the first.",
		}),
		pendingBlobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stead_gc_pending_blobs", Help: "Stored blobs staged for deletion (garbage pending) after this server's last sweep; 0 before the first.",
		}),
		pendingBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stead_gc_pending_bytes", Help: "Bytes of the stored blobs staged for deletion (garbage pending) after this server's last sweep; 0 before the first.",
		}),
		collectErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stead_gc_collect_errors_total", Help: "Front ends' own collections (the registry's policies) that failed before a background sweep.",
		}),
	}
	reg.MustRegister(m.sweeps, m.deletions, m.bytesFreed, m.staged, m.orphans, m.duration, m.lastSuccess,
		m.storedBlobs, m.storedBytes, m.pendingBlobs, m.pendingBytes, m.collectErrors)
	return m
}

// verdicts counts the deletions of an arbitration run through the API.
func (m *gcMetrics) verdicts(vs []blob.Verdict) {
	for _, v := range vs {
		if v.Outcome == blob.Deleted {
			m.deletions.Inc()
			m.bytesFreed.Add(float64(v.Size))
		}
	}
}

// sweep counts a sweep that ended at end.
func (m *gcMetrics) sweep(rep gc.Report, err error, end time.Time) {
	switch {
	case errors.Is(err, gc.ErrNoLiveness):
		m.sweeps.WithLabelValues("no_liveness").Inc()
	case err != nil:
		m.sweeps.WithLabelValues("error").Inc()
	case rep.Aborted != "":
		m.sweeps.WithLabelValues("busy").Inc()
	case rep.DryRun:
		m.sweeps.WithLabelValues("dry_run").Inc()
	default:
		m.sweeps.WithLabelValues("done").Inc()
		m.deletions.Add(float64(rep.Deleted))
		m.bytesFreed.Add(float64(rep.BytesFreed))
		m.staged.Add(float64(rep.Staged))
		m.orphans.Add(float64(rep.Orphans))
		m.duration.Observe(rep.Duration.Seconds())
		m.lastSuccess.Set(float64(end.UnixNano()) / 1e9)
	}
	if st := rep.Stored; err == nil && st != nil {
		m.storedBlobs.Set(float64(st.Blobs))
		m.storedBytes.Set(float64(st.Bytes))
		m.pendingBlobs.Set(float64(st.PendingBlobs))
		m.pendingBytes.Set(float64(st.PendingBytes))
	}
}

// noteSweep counts a sweep that ended at end and keeps it for the
// console's chart.
func (s *Server) noteSweep(rep gc.Report, err error, end time.Time) {
	s.gcMetrics.sweep(rep, err, end)
	result := "done"
	switch {
	case err != nil:
		result = "error"
	case rep.Aborted != "":
		result = "busy"
	case rep.DryRun:
		result = "dry run"
	}
	p := sweepPoint{End: end, Result: result, Deleted: rep.Deleted, BytesFreed: rep.BytesFreed, Staged: rep.Staged, Duration: rep.Duration}
	if err == nil && rep.Stored != nil {
		p.Stored, p.Measured = *rep.Stored, true
	}
	s.sweeps.add(p)
}

// sweep runs one garbage-collection sweep of the server's store: POST
// /v1/gc/sweep, 200 with the report. Another sweep holding the lease is
// an answer (aborted: SweeperBusy), not an error.
func (s *Server) sweep(w http.ResponseWriter, r *http.Request) {
	var req wire.SweepRequest
	if r.ContentLength != 0 {
		if err := s.readJSON(w, r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	// A sweep takes as long as the window is deep: its answer may wait.
	s.wait(w, maxSweep)
	rep, err := s.gc.Sweep(r.Context(), gc.SweepOptions{DryRun: req.DryRun, AllUnreferenced: req.AllUnreferenced})
	s.noteSweep(rep, err, time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.SweepReport{
		DryRun: rep.DryRun, Aborted: rep.Aborted, Reaped: rep.Reaped, ReapedRefs: rep.ReapedRefs, Uploads: rep.Uploads, Taken: rep.Taken, Deleted: rep.Deleted,
		Rescued: rep.Rescued, Absent: rep.Absent, BytesFreed: rep.BytesFreed, Staged: rep.Staged,
		Covered: rep.Covered, Wrapped: rep.Wrapped, NextPass: rep.NextPass, Duration: wire.Duration(rep.Duration),
	}
	if rep.Stored != nil {
		out.Stored = wireStored(*rep.Stored)
	}
	writeJSON(w, http.StatusOK, out)
}

// maxSweep is how long a sweep's answer may take before the connection's
// deadlines cut it.
const maxSweep = time.Hour

func wirePin(p gc.PinInfo, now time.Time) wire.Pin {
	return wire.Pin{Key: p.Key.String(), Owner: p.Owner, Expiry: p.Expiry, Live: p.Expiry.After(now)}
}

// explain says why a blob is kept or not: GET /v1/gc/explain/{key},
// judged at the query's now when the server allows client clocks.
func (s *Server) explain(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	var now time.Time
	if err == nil {
		now, err = s.queryNow(r)
	}
	var x gc.Explanation
	switch {
	case err != nil:
	case now.IsZero():
		x, err = s.gc.Explain(r.Context(), key)
	default:
		x, err = s.eng.GC().Explain(r.Context(), gc.ExplainParams{Key: key, Now: now.Truncate(time.Microsecond)})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.Explanation{Key: key.String(), Stored: x.Stored, Size: x.Size, Object: x.Object, Pins: []wire.Pin{}, Sources: x.Sources,
		Refs: []wire.RefPin{}, Parents: []string{}, Staged: x.Staged, VisibleAfter: x.VisibleAfter, Now: x.Now, Verdict: x.Verdict()}
	if out.Sources == nil {
		out.Sources = []string{}
	}
	for _, r := range x.Refs {
		out.Refs = append(out.Refs, wire.RefPin{Name: r.Name, Expiry: r.Expiry, Live: r.Live(x.Now), Weak: r.Weak})
	}
	for _, p := range x.Parents {
		out.Parents = append(out.Parents, p.String())
	}
	for _, p := range x.Pins {
		out.Pins = append(out.Pins, wirePin(p, x.Now))
	}
	writeJSON(w, http.StatusOK, out)
}

// listPins answers every pin, live or not, and every window row: GET
// /v1/pins. Both are small by design (pins expire, the window drains),
// but each is bounded by maxListLimit; a longer one is an error that
// says so.
func (s *Server) listPins(w http.ResponseWriter, r *http.Request) {
	now, err := s.queryNow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now = now.Truncate(time.Microsecond)
	out := wire.PinsPage{Now: now, Pins: []wire.Pin{}, Window: []wire.Candidate{}}
	if now.IsZero() {
		out.Now = time.Now().UTC().Truncate(time.Microsecond)
	}
	over := false
	err = s.eng.GC().Pins(r.Context(), gc.PinsParams{Now: now}, func(p gc.PinInfo) bool {
		out.Pins = append(out.Pins, wirePin(p, out.Now))
		over = len(out.Pins) > maxListLimit
		return !over
	})
	if err == nil && !over {
		err = s.gc.Window(r.Context(), func(c gc.Candidate) bool {
			out.Window = append(out.Window, wire.Candidate{Key: c.Key.String(), VisibleAfter: c.VisibleAfter})
			over = len(out.Window) > maxListLimit
			return !over
		})
	}
	if err == nil && over {
		err = fmt.Errorf("%w: more than %d pins or window rows: list them with stead pins against the database", steaderr.ErrTooLarge, maxListLimit)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// errFuncSource: a Go function cannot cross the wire.
var errFuncSource = fmt.Errorf("%w: a Go-function liveness source runs in the process that registers it and cannot be registered over HTTP: register it with Store.GC.RegisterSource in the server's process, or use a SQL source on PostgreSQL", steaderr.ErrInvalidArgument)

// readSource reads a SQL source from the request body; an engine that
// cannot consult SQL sources refuses it at registration.
func (s *Server) readSource(w http.ResponseWriter, r *http.Request) (gc.Source, bool) {
	var req struct {
		wire.Source
		Name string `json:"name,omitempty"`
	}
	err := s.readJSON(w, r, &req)
	if err == nil && req.Name != "" {
		err = errFuncSource
	}
	if err != nil {
		s.fail(w, r, err)
		return gc.Source{}, false
	}
	return gc.Source{Schema: req.Schema, Table: req.Table, Column: req.Column}, true
}

// registerSource records a SQL liveness source: PUT /v1/gc/sources, 204.
func (s *Server) registerSource(w http.ResponseWriter, r *http.Request) {
	src, ok := s.readSource(w, r)
	if !ok {
		return
	}
	if err := s.gc.RegisterSource(r.Context(), src); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// unregisterSource removes a SQL liveness source: DELETE /v1/gc/sources
// with the source as the body, 204 (an unknown one too).
func (s *Server) unregisterSource(w http.ResponseWriter, r *http.Request) {
	src, ok := s.readSource(w, r)
	if !ok {
		return
	}
	if err := s.gc.UnregisterSource(r.Context(), src); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listSources lists the liveness sources: GET /v1/gc/sources.
func (s *Server) listSources(w http.ResponseWriter, r *http.Request) {
	srcs, err := s.gc.Sources(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.Sources{Sources: []wire.Source{}}
	for _, src := range srcs {
		if src.IsSQL() {
			out.Sources = append(out.Sources, wire.Source{Schema: src.Schema, Table: src.Table, Column: src.Column})
		} else {
			out.Funcs = append(out.Funcs, src.Name)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
