package remote

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/wire"
)

// gcEngine drives the server's garbage-collection mechanics, so a
// collector in the client sweeps the server's store under the rules of
// the server's engine.
type gcEngine struct{ e *Engine }

// GC returns the engine's garbage-collection mechanics.
func (e *Engine) GC() gc.Engine { return &e.gc }

func (g *gcEngine) step(ctx context.Context, path string, in wire.GCStep, out any) error {
	_, err := g.e.do(ctx, http.MethodPost, path, nil, in, out)
	return err
}

func (g *gcEngine) ReapPins(ctx context.Context, p gc.NowParams) (int64, error) {
	var out wire.GCCount
	err := g.step(ctx, "/v1/gc/reap", wire.GCStep{Now: p.Now, DryRun: p.DryRun}, &out)
	return out.Count, err
}

func (g *gcEngine) Stage(ctx context.Context, key blob.Key, visibleAfter time.Time) error {
	_, err := g.e.do(ctx, http.MethodPut, "/v1/gc/window/"+key.String(), nil, wire.GCStep{VisibleAfter: visibleAfter}, nil)
	return err
}

func (g *gcEngine) StageUnreferenced(ctx context.Context, p gc.StageParams) (int64, error) {
	var out wire.GCCount
	err := g.step(ctx, "/v1/gc/stage", wire.GCStep{Now: p.Now, Grace: wire.Duration(p.Grace), DryRun: p.DryRun}, &out)
	return out.Count, err
}

func (g *gcEngine) Take(ctx context.Context, p gc.TakeParams) ([]blob.Key, error) {
	var out wire.GCKeys
	if err := g.step(ctx, "/v1/gc/take", wire.GCStep{Now: p.Now, Limit: max(p.Limit, 0), DryRun: p.DryRun}, &out); err != nil {
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

// outcomes read gc.Outcome from the wire.
var outcomes = map[string]gc.Outcome{"deleted": gc.Deleted, "protected": gc.Protected, "busy": gc.Busy, "absent": gc.Absent}

func (g *gcEngine) Arbitrate(ctx context.Context, p gc.ArbitrateParams) (gc.Verdict, error) {
	var out wire.Verdict
	if err := g.step(ctx, "/v1/gc/arbitrate/"+p.Key.String(), wire.GCStep{Now: p.Now, DryRun: p.DryRun}, &out); err != nil {
		return gc.Verdict{}, err
	}
	outcome, ok := outcomes[out.Outcome]
	if !ok {
		return gc.Verdict{}, fmt.Errorf("gc arbitrate: %w: outcome %q", errMalformed, out.Outcome)
	}
	return gc.Verdict{Outcome: outcome, Size: out.Size}, nil
}

// leaseRenewal is how often a held sweep lease is renewed; the server
// releases one left unrenewed for a minute.
const leaseRenewal = 20 * time.Second

// AcquireSweep takes the server's sweep lease. The server holds it on the
// client's behalf while the client renews it, and releases it a minute
// after the renewals stop (the client died): unlike a local lease, it
// does not end with the client's process at once.
func (g *gcEngine) AcquireSweep(ctx context.Context, holder string) (gc.Lease, bool, error) {
	var out wire.SweepLease
	if _, err := g.e.do(ctx, http.MethodPost, "/v1/gc/lease", nil, wire.SweepLease{Holder: holder}, &out); err != nil {
		return nil, false, err
	}
	if !out.Acquired {
		return nil, false, nil
	}
	l := &lease{e: g.e, path: "/v1/gc/lease/" + escape(out.ID), stop: make(chan struct{}), done: make(chan struct{})}
	go l.renew()
	return l, true, nil
}

type lease struct {
	e    *Engine
	path string
	once sync.Once
	stop chan struct{}
	done chan struct{}
}

func (l *lease) renew() {
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
		_, err := l.e.do(ctx, http.MethodPut, l.path, nil, nil, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return // released by the server, or the engine closed
		}
	}
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

func (g *gcEngine) Explain(ctx context.Context, key blob.Key, now time.Time) (gc.Explanation, error) {
	var out wire.Explanation
	if _, err := g.e.do(ctx, http.MethodGet, "/v1/gc/explain/"+key.String(), &request{query: query("now", timeText(now))}, nil, &out); err != nil {
		return gc.Explanation{}, err
	}
	pins, err := readPins(out.Pins)
	if err != nil {
		return gc.Explanation{}, err
	}
	return gc.Explanation{Key: key, Stored: out.Stored, Size: out.Size, Pins: pins, Sources: out.Sources,
		Staged: out.Staged, VisibleAfter: out.VisibleAfter, Now: out.Now}, nil
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

func (g *gcEngine) pinsPage(ctx context.Context) (wire.PinsPage, error) {
	var out wire.PinsPage
	_, err := g.e.do(ctx, http.MethodGet, "/v1/pins", nil, nil, &out)
	return out, err
}

func (g *gcEngine) Pins(ctx context.Context, yield func(gc.PinInfo) bool) error {
	page, err := g.pinsPage(ctx)
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
	page, err := g.pinsPage(ctx)
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
