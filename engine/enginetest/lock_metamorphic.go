package enginetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/lock"
)

// lockMetamorphic replays one seeded random sequence of seam calls, on
// explicit clock readings, against the engine and the in-memory reference,
// and compares every result.
func lockMetamorphic(t *testing.T, h Harness) {
	seed := metamorphicSeed()
	rng := rand.New(rand.NewPCG(uint64(seed), 0x10c))
	ctx := t.Context()
	subject := newEngine(t, h).Locks()
	refEngine := memory.New()
	t.Cleanup(func() { _ = refEngine.Close() })
	ref := refEngine.Locks()

	names := []string{"a", "b", "c"}
	owners := []string{"x", "y", "z"}
	now := wholeMicroStart
	var grants []lock.Grant // every grant so far, stale ones included
	pickGrant := func() lock.Grant {
		if len(grants) == 0 || rng.IntN(10) == 0 {
			return lock.Grant{Name: names[rng.IntN(len(names))], Owner: owners[rng.IntN(len(owners))], Token: rng.Int64N(4)}
		}
		return grants[len(grants)-1-rng.IntN(min(len(grants), 6))]
	}
	rendered := func(err error, v ...any) outcome {
		if err != nil {
			return failed(err)
		}
		return succeeded("%v", v)
	}
	runMetamorphic(t, seed, 400, func(int) metamorphicStep {
		now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		lease := time.Duration(1+rng.IntN(3000)) * time.Millisecond
		switch rng.IntN(3) {
		case 0:
			p := lock.AcquireParams{Name: names[rng.IntN(len(names))], Owner: owners[rng.IntN(len(owners))], TTL: lease, Now: now}
			g, gErr := subject.Acquire(ctx, p)
			w, wErr := ref.Acquire(ctx, p)
			if g.Granted {
				grants = append(grants, g.Grant)
			}
			if !g.Granted && g.Grant.Token == 0 {
				w.Grant = lock.Grant{} // the holder hint is optional
			}
			return metamorphicStep{name: fmt.Sprintf("Acquire(%+v)", p), got: rendered(gErr, g), want: rendered(wErr, w), compare: true}
		case 1:
			gr := pickGrant()
			p := lock.RenewParams{Name: gr.Name, Owner: gr.Owner, Token: gr.Token, TTL: lease, Now: now}
			e1, ok1, err1 := subject.Renew(ctx, p)
			e2, ok2, err2 := ref.Renew(ctx, p)
			return metamorphicStep{name: fmt.Sprintf("Renew(%+v)", p), got: rendered(err1, e1, ok1), want: rendered(err2, e2, ok2), compare: true}
		default:
			gr := pickGrant()
			p := lock.ReleaseParams{Name: gr.Name, Owner: gr.Owner, Token: gr.Token}
			ok1, err1 := subject.Release(ctx, p)
			ok2, err2 := ref.Release(ctx, p)
			return metamorphicStep{name: fmt.Sprintf("Release(%+v)", p), got: rendered(err1, ok1), want: rendered(err2, ok2), compare: true}
		}
	})
}
