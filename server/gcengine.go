package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/steaderr"
)

// The garbage-collection mechanics a remote engine drives, so that a
// collector in the client (stead gc --db http://…) sweeps the server's
// store with every rule the server's engine decides. Every step of a
// sweep names the sweep lease it runs under; the server renews that lease
// (proving its database session or row alive) before the step, and
// refuses the step with 409 lost once the lease is gone.

// maxKeysBody bounds the body of a step that carries keys: a batch of
// blob.MaxDeleteBatch keys.
const maxKeysBody = 1 << 20

// readStep reads a mechanics request and checks its now. With leased, the
// step must name a lease the server holds, which it renews: the lease is
// returned.
func (s *Server) readStep(w http.ResponseWriter, r *http.Request, leased bool) (wire.GCStep, gc.Lease, bool) {
	var req wire.GCStep
	var lease gc.Lease
	err := s.readJSONLimit(w, r, &req, maxKeysBody)
	if err == nil {
		req.Now, err = s.clock(req.Now)
	}
	if err == nil && req.Limit < 0 {
		err = fmt.Errorf("%w: negative limit", steaderr.ErrInvalidArgument)
	}
	if err == nil {
		err = gc.CheckGrace(time.Duration(req.Grace))
	}
	if err == nil && (leased || req.Lease != "") {
		lease, err = s.leases.renew(r.Context(), req.Lease)
	}
	if err != nil {
		s.fail(w, r, err)
		return req, nil, false
	}
	req.Now = req.Now.Truncate(time.Microsecond)
	req.Grace = wire.Duration(time.Duration(req.Grace).Truncate(time.Microsecond))
	req.VisibleAfter = req.VisibleAfter.Truncate(time.Microsecond)
	return req, lease, true
}

// parseKeys parses a step's keys, which must be as the engine seam takes
// them (gc.CheckKeys).
func parseKeys(texts []string) ([]blob.Key, error) {
	keys := make([]blob.Key, len(texts))
	for i, t := range texts {
		k, err := blob.ParseKey(t)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, gc.CheckKeys(keys)
}

// reapPins: POST /v1/gc/reap.
func (s *Server) reapPins(w http.ResponseWriter, r *http.Request) {
	req, lease, ok := s.readStep(w, r, true)
	if !ok {
		return
	}
	n, err := s.eng.GC().Reap(r.Context(), gc.NowParams{Now: req.Now, DryRun: req.DryRun, Lease: lease})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.GCReaped{Pins: n.Pins, Refs: n.Refs})
}

// declared: GET /v1/gc/declared.
func (s *Server) declared(w http.ResponseWriter, r *http.Request) {
	d, err := s.eng.GC().Declared(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.GCDeclared{Declared: d})
}

// stored answers what the store holds: GET /v1/gc/stored.
func (s *Server) stored(w http.ResponseWriter, r *http.Request) {
	st, err := s.eng.GC().Stored(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wireStored(st))
}

func wireStored(st gc.Stored) *wire.GCStored {
	return &wire.GCStored{Blobs: st.Blobs, Bytes: st.Bytes, PendingBlobs: st.PendingBlobs, PendingBytes: st.PendingBytes}
}

// stageKeys stages keys: PUT /v1/gc/window, under the sweep lease (a
// sweep returns a failed batch to the window this way), visible after a
// deadline from now to now + gc.MaxGrace (none: now), judged on the
// server's clock — or, on a server that allows client clocks, on the
// request's now, whose client may name any now anyway. Keys not stored
// are skipped.
func (s *Server) stageKeys(w http.ResponseWriter, r *http.Request) {
	req, lease, ok := s.readStep(w, r, true)
	if !ok {
		return
	}
	keys, err := parseKeys(req.Keys)
	p := gc.StageParams{Keys: keys, VisibleAfter: req.VisibleAfter, Lease: lease}
	if err == nil && !s.opts.ClientClock {
		err = gc.CheckStage(p, req.Now)
	}
	if err == nil {
		err = s.eng.GC().Stage(r.Context(), p)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stagePass: GET /v1/gc/pass.
func (s *Server) stagePass(w http.ResponseWriter, r *http.Request) {
	pass, err := s.eng.GC().StagePass(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.GCPass{Started: pass.Started}
	if !pass.After.IsZero() {
		out.After = pass.After.String()
	}
	writeJSON(w, http.StatusOK, out)
}

// stageRange: POST /v1/gc/stage.
func (s *Server) stageRange(w http.ResponseWriter, r *http.Request) {
	req, lease, ok := s.readStep(w, r, true)
	if !ok {
		return
	}
	var after blob.Key
	err := gc.CheckLimit(req.Limit, gc.MaxStageRange)
	if err == nil && req.After != "" {
		after, err = blob.ParseKey(req.After)
	}
	var rng gc.StagedRange
	if err == nil {
		rng, err = s.eng.GC().StageRange(r.Context(), gc.StageRangeParams{
			After: after, Limit: req.Limit, Now: req.Now, Grace: time.Duration(req.Grace), DryRun: req.DryRun, Lease: lease,
		})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.GCRange{Covered: rng.Covered, Staged: rng.Staged}
	if !rng.Last.IsZero() {
		out.Last = rng.Last.String()
	}
	writeJSON(w, http.StatusOK, out)
}

// sweepOrphans: POST /v1/gc/orphans. A store without a bytes tier has no
// orphans: its answer is an empty listing that wrapped.
func (s *Server) sweepOrphans(w http.ResponseWriter, r *http.Request) {
	// A dry run, which deletes nothing, needs no lease.
	req, lease, ok := s.readStep(w, r, false)
	if !ok {
		return
	}
	var err error
	if lease == nil && !req.DryRun {
		_, err = s.leases.renew(r.Context(), "")
	}
	if err == nil {
		err = gc.CheckLimit(req.Limit, gc.OrphanPage)
	}
	out := gc.Orphans{Wrapped: true}
	if o, tiered := s.eng.GC().(gc.OrphanSweeper); err == nil && tiered {
		out, err = o.SweepOrphans(r.Context(), gc.OrphanParams{Limit: req.Limit, Grace: time.Duration(req.Grace), DryRun: req.DryRun, Lease: lease})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.GCOrphans{Listed: out.Listed, Deleted: out.Deleted, Wrapped: out.Wrapped})
}

// takeCandidates: POST /v1/gc/take.
func (s *Server) takeCandidates(w http.ResponseWriter, r *http.Request) {
	req, lease, ok := s.readStep(w, r, true)
	if !ok {
		return
	}
	var keys []blob.Key
	err := gc.CheckLimit(req.Limit, blob.MaxDeleteBatch)
	if err == nil {
		keys, err = s.eng.GC().Take(r.Context(), gc.TakeParams{Now: req.Now, Limit: req.Limit, DryRun: req.DryRun, Lease: lease})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.GCKeys{Keys: make([]string, len(keys))}
	for i, k := range keys {
		out.Keys[i] = k.String()
	}
	writeJSON(w, http.StatusOK, out)
}

// arbitrate decides a batch of keys: POST /v1/gc/arbitrate.
func (s *Server) arbitrate(w http.ResponseWriter, r *http.Request) {
	req, lease, ok := s.readStep(w, r, true)
	if !ok {
		return
	}
	keys, err := parseKeys(req.Keys)
	var vs []blob.Verdict
	if err == nil {
		vs, err = s.eng.GC().Arbitrate(r.Context(), gc.ArbitrateParams{Keys: keys, Now: req.Now, DryRun: req.DryRun, Lease: lease})
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !req.DryRun {
		s.gcMetrics.verdicts(vs)
	}
	writeJSON(w, http.StatusOK, verdictsBody(vs))
}

func verdictsBody(vs []blob.Verdict) wire.Verdicts {
	out := wire.Verdicts{Verdicts: make([]wire.Verdict, len(vs))}
	for i, v := range vs {
		out.Verdicts[i] = wire.Verdict{Key: v.Key.String(), Outcome: v.Outcome.String(), Size: v.Size}
	}
	return out
}

// leaseIdle is how long the server holds a sweep lease for a client that
// stops renewing it (a remote engine renews every leaseIdle/3): a client
// that dies or stops mid-sweep blocks other sweeps for at most this long,
// and its next step is refused.
const leaseIdle = time.Minute

// leaseTable holds the sweep leases clients took; idle is how long one
// lasts unrenewed (leaseIdle; tests shorten it).
type leaseTable struct {
	idle   time.Duration
	mu     sync.Mutex
	leases map[string]*heldLease
}

type heldLease struct {
	lease gc.Lease
	timer *time.Timer
}

// errLeaseGone answers a step naming a lease the server no longer holds.
var errLeaseGone = fmt.Errorf("%w: sweep lease released, by its holder or when it went unrenewed", steaderr.ErrLost)

// renew returns the lease id names, after renewing it in the engine, and
// restarts its idle timer. A lease the engine lost is dropped; an unknown
// id is ErrLost too: it was released, or idled out.
func (t *leaseTable) renew(ctx context.Context, id string) (gc.Lease, error) {
	if id == "" {
		return nil, &badRequest{"lease is required: take one with POST /v1/gc/lease"}
	}
	t.mu.Lock()
	h := t.leases[id]
	if h != nil {
		h.timer.Reset(t.idle)
	}
	t.mu.Unlock()
	if h == nil {
		return nil, errLeaseGone
	}
	if err := h.lease.Renew(ctx); err != nil {
		if errors.Is(err, steaderr.ErrLost) {
			_, _ = t.drop(context.WithoutCancel(ctx), id)
		}
		return nil, err
	}
	return h.lease, nil
}

// drop releases and forgets the lease id, if held.
func (t *leaseTable) drop(ctx context.Context, id string) (bool, error) {
	t.mu.Lock()
	h := t.leases[id]
	delete(t.leases, id)
	t.mu.Unlock()
	if h == nil {
		return false, nil
	}
	h.timer.Stop()
	return true, h.lease.Release(ctx)
}

// acquireLease takes the sweep lease for holder: POST /v1/gc/lease, 200
// with acquired false when another sweep holds it.
func (s *Server) acquireLease(w http.ResponseWriter, r *http.Request) {
	var req wire.SweepLease
	err := s.readJSON(w, r, &req)
	if err == nil {
		err = validate.Name("sweep holder", req.Holder)
	}
	var lease gc.Lease
	var ok bool
	if err == nil {
		lease, ok, err = s.eng.GC().AcquireSweep(r.Context(), req.Holder)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !ok {
		writeJSON(w, http.StatusOK, wire.SweepLease{Holder: req.Holder})
		return
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	t := &s.leases
	t.mu.Lock()
	if t.leases == nil {
		t.leases = map[string]*heldLease{}
	}
	t.leases[id] = &heldLease{lease: lease, timer: time.AfterFunc(t.idle, func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.RequestTimeout)
		defer cancel()
		if _, err := t.drop(ctx, id); err != nil {
			s.log.Warn("stead: releasing an idle sweep lease", "err", err)
		}
	})}
	t.mu.Unlock()
	writeJSON(w, http.StatusOK, wire.SweepLease{Holder: req.Holder, ID: id, Acquired: true})
}

// renewLease keeps a sweep lease held: PUT /v1/gc/lease/{id}, 204, or 409
// lost once the lease is gone (its database session ended, its row
// lapsed, or the server released it).
func (s *Server) renewLease(w http.ResponseWriter, r *http.Request) {
	if _, err := s.leases.renew(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// releaseLease gives a sweep lease up: DELETE /v1/gc/lease/{id}, 204 (an
// unknown id too).
func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) {
	if _, err := s.leases.drop(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
