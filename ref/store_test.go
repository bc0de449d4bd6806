package ref_test

import (
	"context"
	"testing"
	"time"

	"github.com/steadkit/stead/ref"
)

// touchEngine answers Touch with a ref expiring at its own clock's now +
// left, renewing it the way a lazy engine does; the store must leave the
// decision to it.
type touchEngine struct {
	ref.Backend // only Touch is called
	now         time.Time
	left        time.Duration
	calls       []ref.TouchParams
}

func (e *touchEngine) Touch(_ context.Context, p ref.TouchParams) (ref.Ref, error) {
	e.calls = append(e.calls, p)
	r := ref.Ref{Name: p.Name, Expiry: e.now.Add(e.left)}
	if !p.Lazy || e.left < p.TTL/2 {
		r.Expiry = e.now.Add(p.TTL)
	}
	return r, nil
}

// TestGetTouchOnEngineClock: GetTouch lets the engine judge what is left
// of a ref on the clock its expiry is judged by, not the caller's: a ref
// the engine sees nearly expired is renewed though this process's clock,
// two hours behind, would think it has an hour and more left.
func TestGetTouchOnEngineClock(t *testing.T) {
	t.Parallel()
	engineNow := time.Now().Add(2 * time.Hour)
	eng := &touchEngine{now: engineNow, left: time.Minute}
	st := ref.NewStore(eng, ref.Options{})
	r, err := st.GetTouch(t.Context(), "cache/x", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(eng.calls) != 1 || !eng.calls[0].Lazy || !eng.calls[0].Now.IsZero() || eng.calls[0].TTL != time.Hour {
		t.Fatalf("engine calls %+v; want one lazy Touch of 1h on the engine's clock", eng.calls)
	}
	if !r.Expiry.Equal(engineNow.Add(time.Hour)) {
		t.Fatalf("expiry %v, want renewed to the engine's now + 1h (%v)", r.Expiry, engineNow.Add(time.Hour))
	}
	if _, err := st.GetTouch(t.Context(), "cache/x", -time.Hour); err == nil || len(eng.calls) != 1 {
		t.Fatalf("GetTouch(-1h) = %v after %d engine calls; want refused before the engine", err, len(eng.calls))
	}
}
