package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// gcEngine drives the server's garbage-collection mechanics, so a
// collector in the client sweeps the server's store under the rules of
// the server's engine.
type gcEngine struct{ e *Engine }

// GC returns the engine's garbage-collection mechanics.
func (e *Engine) GC() gc.Backend { return &e.gc }

func (g *gcEngine) step(ctx context.Context, path string, in wire.GCStep, out any) error {
	_, err := g.e.do(ctx, http.MethodPost, path, nil, in, out)
	return err
}

// leaseID is the server's id of a lease this engine took; "" for none.
func leaseID(l gc.Lease) string {
	if l, ok := l.(*lease); ok {
		return l.id
	}
	return ""
}

func keyTexts(keys []blob.Key) []string {
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = k.String()
	}
	return texts
}

func (g *gcEngine) Reap(ctx context.Context, p gc.NowParams) (gc.Reaped, error) {
	var out wire.GCReaped
	err := g.step(ctx, "/v1/gc/reap", wire.GCStep{Lease: leaseID(p.Lease), Now: p.Now, DryRun: p.DryRun}, &out)
	return gc.Reaped{Pins: out.Pins, Refs: out.Refs}, err
}

func (g *gcEngine) Declared(ctx context.Context) (bool, error) {
	var out wire.GCDeclared
	_, err := g.e.do(ctx, http.MethodGet, "/v1/gc/declared", nil, nil, &out)
	return out.Declared, err
}

// Stored asks the server (GET /v1/gc/stored).
func (g *gcEngine) Stored(ctx context.Context) (gc.Stored, error) {
	var out wire.GCStored
	if _, err := g.e.do(ctx, http.MethodGet, "/v1/gc/stored", nil, nil, &out); err != nil {
		return gc.Stored{}, err
	}
	return gc.Stored{Blobs: out.Blobs, Bytes: out.Bytes, PendingBlobs: out.PendingBlobs, PendingBytes: out.PendingBytes}, nil
}

func (g *gcEngine) Stage(ctx context.Context, p gc.StageParams) error {
	_, err := g.e.do(ctx, http.MethodPut, "/v1/gc/window", nil,
		wire.GCStep{Lease: leaseID(p.Lease), Keys: keyTexts(p.Keys), VisibleAfter: p.VisibleAfter}, nil)
	return err
}

func (g *gcEngine) StagePass(ctx context.Context) (gc.Pass, error) {
	var out wire.GCPass
	if _, err := g.e.do(ctx, http.MethodGet, "/v1/gc/pass", nil, nil, &out); err != nil {
		return gc.Pass{}, err
	}
	pass := gc.Pass{Started: out.Started}
	if out.After != "" {
		k, err := blob.ParseKey(out.After)
		if err != nil {
			return gc.Pass{}, fmt.Errorf("gc pass: %w: %w", errMalformed, err)
		}
		pass.After = k
	}
	return pass, nil
}

func (g *gcEngine) StageRange(ctx context.Context, p gc.StageRangeParams) (gc.StagedRange, error) {
	in := wire.GCStep{Lease: leaseID(p.Lease), Limit: p.Limit, Now: p.Now, Grace: wire.Duration(p.Grace), DryRun: p.DryRun}
	if !p.After.IsZero() {
		in.After = p.After.String()
	}
	var out wire.GCRange
	if err := g.step(ctx, "/v1/gc/stage", in, &out); err != nil {
		return gc.StagedRange{}, err
	}
	r := gc.StagedRange{Covered: out.Covered, Staged: out.Staged}
	if out.Last != "" {
		k, err := blob.ParseKey(out.Last)
		if err != nil {
			return gc.StagedRange{}, fmt.Errorf("gc stage: %w: %w", errMalformed, err)
		}
		r.Last = k
	}
	return r, nil
}

// SweepOrphans implements gc.OrphanSweeper: the server's store runs the
// step on its bytes tier (one without a tier answers that nothing was
// listed), gc.OrphanPage objects a request, until p.Limit are listed or
// the walk wraps. A step that deletes and names no sweep lease takes the
// server's for itself (one another sweep holds is an error wrapping
// steaderr.ErrLeased): the server deletes only under one.
func (g *gcEngine) SweepOrphans(ctx context.Context, p gc.OrphanParams) (gc.Orphans, error) {
	if p.Lease == nil && !p.DryRun {
		l, ok, err := g.AcquireSweep(ctx, "orphan step")
		if err != nil {
			return gc.Orphans{}, err
		}
		if !ok {
			return gc.Orphans{}, fmt.Errorf("%w: the orphan step takes the sweep lease, which another sweep holds", steaderr.ErrLeased)
		}
		defer l.Release(context.WithoutCancel(ctx))
		p.Lease = l
	}
	var total gc.Orphans
	for left := p.Limit; ; {
		var out wire.GCOrphans
		n := min(left, gc.OrphanPage)
		if err := g.step(ctx, "/v1/gc/orphans", wire.GCStep{Lease: leaseID(p.Lease), Limit: n, Grace: wire.Duration(p.Grace), DryRun: p.DryRun}, &out); err != nil {
			return gc.Orphans{}, err
		}
		total.Listed += out.Listed
		total.Deleted += out.Deleted
		total.Wrapped = out.Wrapped
		if left -= n; out.Wrapped || left <= 0 || out.Listed < int64(n) {
			return total, nil
		}
	}
}

func (g *gcEngine) Take(ctx context.Context, p gc.TakeParams) ([]blob.Key, error) {
	var out wire.GCKeys
	if err := g.step(ctx, "/v1/gc/take", wire.GCStep{Lease: leaseID(p.Lease), Now: p.Now, Limit: p.Limit, DryRun: p.DryRun}, &out); err != nil {
		return nil, err
	}
	keys := make([]blob.Key, len(out.Keys))
	for i, text := range out.Keys {
		k, err := blob.ParseKey(text)
		if err != nil {
			return nil, fmt.Errorf("gc take: %w: %w", errMalformed, err)
		}
		keys[i] = k
	}
	return keys, nil
}

func (g *gcEngine) Arbitrate(ctx context.Context, p gc.ArbitrateParams) ([]blob.Verdict, error) {
	var out wire.Verdicts
	in := wire.GCStep{Lease: leaseID(p.Lease), Keys: keyTexts(p.Keys), Now: p.Now, DryRun: p.DryRun}
	if err := g.step(ctx, "/v1/gc/arbitrate", in, &out); err != nil {
		return nil, err
	}
	return readVerdicts(p.Keys, out)
}

// readVerdicts checks an answer's verdicts against the keys asked about:
// one each, in their order.
func readVerdicts(keys []blob.Key, out wire.Verdicts) ([]blob.Verdict, error) {
	if len(out.Verdicts) != len(keys) {
		return nil, fmt.Errorf("%w: %d verdicts for %d keys", errMalformed, len(out.Verdicts), len(keys))
	}
	vs := make([]blob.Verdict, len(keys))
	for i, v := range out.Verdicts {
		outcome, ok := blob.ParseOutcome(v.Outcome)
		if !ok || v.Key != keys[i].String() {
			return nil, fmt.Errorf("%w: verdict %+v for %s", errMalformed, v, keys[i])
		}
		vs[i] = blob.Verdict{Key: keys[i], Outcome: outcome, Size: v.Size}
	}
	return vs, nil
}

// leaseRenewal is how often a held sweep lease is renewed; the server
// releases one left unrenewed for a minute.
const leaseRenewal = 20 * time.Second

// AcquireSweep takes the server's sweep lease. The server holds it on the
// client's behalf while the client renews it (in the background, and with
// every step of the sweep), and releases it a minute after the renewals
// stop (the client died or stopped): unlike a local lease, it does not end
// with the client's process at once. Every step names it, and once it is
// gone the server refuses them with ErrLost.
func (g *gcEngine) AcquireSweep(ctx context.Context, holder string) (gc.Lease, bool, error) {
	var out wire.SweepLease
	if _, err := g.e.do(ctx, http.MethodPost, "/v1/gc/lease", nil, wire.SweepLease{Holder: holder}, &out); err != nil {
		return nil, false, err
	}
	if !out.Acquired {
		return nil, false, nil
	}
	l := &lease{e: g.e, id: out.ID, path: "/v1/gc/lease/" + escape(out.ID), stop: make(chan struct{}), done: make(chan struct{})}
	go l.renewEvery()
	return l, true, nil
}

type lease struct {
	e    *Engine
	id   string
	path string
	once sync.Once
	stop chan struct{}
	done chan struct{}
}

func (l *lease) renewEvery() {
	defer close(l.done)
	t := time.NewTicker(leaseRenewal)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaseRenewal)
		err := l.Renew(ctx)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return // lost, or the engine closed: the next step says so
		}
	}
}

// Renew asks the server to renew the lease: an error wrapping ErrLost
// once the server no longer holds it.
func (l *lease) Renew(ctx context.Context) error {
	_, err := l.e.do(ctx, http.MethodPut, l.path, nil, nil, nil)
	return err
}

func (l *lease) Release(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	_, err := l.e.do(ctx, http.MethodDelete, l.path, nil, nil, nil)
	return err
}

// errFuncSource: a Go function cannot cross the wire.
var errFuncSource = fmt.Errorf("remote: a Go-function liveness source runs in the process that registers it; register it in the server's process, or use a SQL source on a server over PostgreSQL: %w", errors.ErrUnsupported)

func sourceBody(src gc.Source) (wire.Source, error) {
	if !src.IsSQL() {
		return wire.Source{}, errFuncSource
	}
	return wire.Source{Schema: src.Schema, Table: src.Table, Column: src.Column}, nil
}

func (g *gcEngine) RegisterSource(ctx context.Context, src gc.Source) error {
	body, err := sourceBody(src)
	if err == nil {
		_, err = g.e.do(ctx, http.MethodPut, "/v1/gc/sources", nil, body, nil)
	}
	return err
}

func (g *gcEngine) UnregisterSource(ctx context.Context, src gc.Source) error {
	body, err := sourceBody(src)
	if err == nil {
		_, err = g.e.do(ctx, http.MethodDelete, "/v1/gc/sources", nil, body, nil)
	}
	return err
}

// Sources lists the server's sources; a Go-function source registered in
// the server's process is listed by name, without its function.
func (g *gcEngine) Sources(ctx context.Context) ([]gc.Source, error) {
	var out wire.Sources
	if _, err := g.e.do(ctx, http.MethodGet, "/v1/gc/sources", nil, nil, &out); err != nil {
		return nil, err
	}
	var srcs []gc.Source
	for _, s := range out.Sources {
		srcs = append(srcs, gc.Source{Schema: s.Schema, Table: s.Table, Column: s.Column})
	}
	for _, name := range out.Funcs {
		srcs = append(srcs, gc.Source{Name: name})
	}
	return srcs, nil
}

func (g *gcEngine) Explain(ctx context.Context, p gc.ExplainParams) (gc.Explanation, error) {
	key, now := p.Key, p.Now
	var out wire.Explanation
	if _, err := g.e.do(ctx, http.MethodGet, "/v1/gc/explain/"+key.String(), &request{query: query("now", timeText(now))}, nil, &out); err != nil {
		return gc.Explanation{}, err
	}
	pins, err := readPins(out.Pins)
	if err != nil {
		return gc.Explanation{}, err
	}
	x := gc.Explanation{Key: key, Stored: out.Stored, Size: out.Size, Object: out.Object, Pins: pins, Sources: out.Sources,
		Staged: out.Staged, VisibleAfter: out.VisibleAfter, Now: out.Now}
	for _, r := range out.Refs {
		x.Refs = append(x.Refs, gc.RefInfo{Name: r.Name, Expiry: r.Expiry, Weak: r.Weak})
	}
	for _, text := range out.Parents {
		k, err := blob.ParseKey(text)
		if err != nil {
			return gc.Explanation{}, fmt.Errorf("gc explain: %w: %w", errMalformed, err)
		}
		x.Parents = append(x.Parents, k)
	}
	return x, nil
}

func readPins(in []wire.Pin) ([]gc.PinInfo, error) {
	var out []gc.PinInfo
	for _, p := range in {
		k, err := blob.ParseKey(p.Key)
		if err != nil {
			return nil, fmt.Errorf("gc pins: %w: %w", errMalformed, err)
		}
		out = append(out, gc.PinInfo{Key: k, Owner: p.Owner, Expiry: p.Expiry})
	}
	return out, nil
}

func (g *gcEngine) pinsPage(ctx context.Context, now time.Time) (wire.PinsPage, error) {
	var out wire.PinsPage
	_, err := g.e.do(ctx, http.MethodGet, "/v1/pins", &request{query: query("now", timeText(now))}, nil, &out)
	return out, err
}

func (g *gcEngine) Pins(ctx context.Context, p gc.PinsParams, yield func(gc.PinInfo) bool) error {
	page, err := g.pinsPage(ctx, p.Now)
	if err != nil {
		return err
	}
	pins, err := readPins(page.Pins)
	if err != nil {
		return err
	}
	for _, p := range pins {
		if !yield(p) {
			return nil
		}
	}
	return nil
}

func (g *gcEngine) Window(ctx context.Context, yield func(gc.Candidate) bool) error {
	page, err := g.pinsPage(ctx, time.Time{})
	if err != nil {
		return err
	}
	for _, c := range page.Window {
		k, err := blob.ParseKey(c.Key)
		if err != nil {
			return fmt.Errorf("gc window: %w: %w", errMalformed, err)
		}
		if !yield(gc.Candidate{Key: k, VisibleAfter: c.VisibleAfter}) {
			return nil
		}
	}
	return nil
}
