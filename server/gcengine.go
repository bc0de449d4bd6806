package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/internal/wire"
	"github.com/steadkit/stead/steaderr"
)

// The garbage-collection mechanics a remote engine drives, so that a
// collector in the client (stead gc --db http://…) sweeps the server's
// store with every rule the server's engine decides.

// readStep reads a mechanics request and checks its now.
func (s *Server) readStep(w http.ResponseWriter, r *http.Request) (wire.GCStep, bool) {
	var req wire.GCStep
	err := readJSON(w, r, &req)
	if err == nil {
		req.Now, err = s.clock(req.Now)
	}
	if err == nil && (req.Grace < 0 || req.Limit < 0) {
		err = fmt.Errorf("%w: negative grace or limit", steaderr.ErrInvalidArgument)
	}
	if err != nil {
		s.fail(w, r, err)
		return req, false
	}
	req.Now = req.Now.Truncate(time.Microsecond)
	req.Grace = wire.Duration(time.Duration(req.Grace).Truncate(time.Microsecond))
	req.VisibleAfter = req.VisibleAfter.Truncate(time.Microsecond)
	return req, true
}

// reapPins: POST /v1/gc/reap.
func (s *Server) reapPins(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readStep(w, r)
	if !ok {
		return
	}
	n, err := s.eng.GC().ReapPins(r.Context(), gc.NowParams{Now: req.Now, DryRun: req.DryRun})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.GCCount{Count: n})
}

// stageKey stages one key: PUT /v1/gc/window/{key}.
func (s *Server) stageKey(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, ok := s.readStep(w, r)
	if !ok {
		return
	}
	if req.VisibleAfter.IsZero() {
		s.fail(w, r, &badRequest{"visible_after is required"})
		return
	}
	if err := s.eng.GC().Stage(r.Context(), key, req.VisibleAfter); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stageUnreferenced: POST /v1/gc/stage.
func (s *Server) stageUnreferenced(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readStep(w, r)
	if !ok {
		return
	}
	n, err := s.eng.GC().StageUnreferenced(r.Context(), gc.StageParams{Now: req.Now, Grace: time.Duration(req.Grace), DryRun: req.DryRun})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.GCCount{Count: n})
}

// takeCandidates: POST /v1/gc/take.
func (s *Server) takeCandidates(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readStep(w, r)
	if !ok {
		return
	}
	keys, err := s.eng.GC().Take(r.Context(), gc.TakeParams{Now: req.Now, Limit: req.Limit, DryRun: req.DryRun})
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

// outcomes name gc.Outcome on the wire.
var outcomes = map[gc.Outcome]string{gc.Deleted: "deleted", gc.Protected: "protected", gc.Busy: "busy", gc.Absent: "absent"}

// arbitrate decides one key: POST /v1/gc/arbitrate/{key}.
func (s *Server) arbitrate(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req, ok := s.readStep(w, r)
	if !ok {
		return
	}
	v, err := s.eng.GC().Arbitrate(r.Context(), gc.ArbitrateParams{Key: key, Now: req.Now, DryRun: req.DryRun})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if v.Outcome == gc.Deleted && !req.DryRun {
		s.gcMetrics.deletions.Inc()
		s.gcMetrics.bytesFreed.Add(float64(v.Size))
	}
	writeJSON(w, http.StatusOK, wire.Verdict{Outcome: outcomes[v.Outcome], Size: v.Size})
}

// leaseIdle is how long the server holds a sweep lease for a client that
// stops renewing it (a remote engine renews every leaseIdle/3): a client
// that dies mid-sweep blocks other sweeps for at most this long.
const leaseIdle = time.Minute

// leaseTable holds the sweep leases clients took.
type leaseTable struct {
	mu     sync.Mutex
	leases map[string]*heldLease
}

type heldLease struct {
	lease gc.Lease
	timer *time.Timer
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
	err := readJSON(w, r, &req)
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
	t.leases[id] = &heldLease{lease: lease, timer: time.AfterFunc(leaseIdle, func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.RequestTimeout)
		defer cancel()
		if _, err := t.drop(ctx, id); err != nil {
			s.log.Warn("stead: releasing an idle sweep lease", "err", err)
		}
	})}
	t.mu.Unlock()
	writeJSON(w, http.StatusOK, wire.SweepLease{Holder: req.Holder, ID: id, Acquired: true})
}

// renewLease keeps a sweep lease held: PUT /v1/gc/lease/{id}, 204, or 404
// when the server released it.
func (s *Server) renewLease(w http.ResponseWriter, r *http.Request) {
	t := &s.leases
	t.mu.Lock()
	h := t.leases[r.PathValue("id")]
	if h != nil {
		h.timer.Reset(leaseIdle)
	}
	t.mu.Unlock()
	if h == nil {
		s.fail(w, r, fmt.Errorf("sweep lease: %w: released, or idle too long", steaderr.ErrNotFound))
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
