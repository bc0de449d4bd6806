package enginetest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// Blob references: a blob put with children keeps them while it is
// stored; the collector peels the graph one level a pass.

func putWith(t *testing.T, s *blob.Store, value []byte, children ...blob.Key) (blob.Key, error) {
	t.Helper()
	res, err := s.PutWith(t.Context(), bytes.NewReader(value), blob.PutOptions{Children: children})
	return res.Key, err
}

func gcEdges(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	col := gc.New(b.eng.GC(), gc.Options{Grace: testGrace, Now: b.clock.Now}) // refuses a store with nothing declared
	c1 := mustPut(t, b.store, testValue("child 1", 10))
	c2 := mustPut(t, b.store, testValue("child 2", 11))
	leaf := mustPut(t, b.store, testValue("grandchild", 12))
	mid, err := putWith(t, b.store, testValue("middle", 13), leaf)
	if err != nil {
		t.Fatalf("PutWith(a child): %v", err)
	}
	parent, err := putWith(t, b.store, testValue("parent", 14), c2, mid, c1, c1) // any order, a repeat
	if err != nil {
		t.Fatalf("PutWith(children): %v", err)
	}
	x, err := col.Explain(ctx, c1)
	if err != nil || !slices.Equal(x.Parents, []blob.Key{parent}) || !strings.Contains(x.Verdict(), "referenced by blob "+parent.String()) {
		t.Fatalf("Explain(child) = %+v (%s), %v; want its parent named", x, x.Verdict(), err)
	}
	b.expirePins()
	sweep := func(what string) gc.Report {
		t.Helper()
		rep, err := col.Sweep(ctx, gc.SweepOptions{})
		if err != nil {
			t.Fatalf("Sweep (%s): %v", what, err)
		}
		return rep
	}
	// One level a pass: each sweep deletes the level staged a grace ago,
	// and stages the one its deletions left unreferenced.
	levels := [][]blob.Key{{parent}, sortedKeys([]blob.Key{c1, c2, mid}), {leaf}}
	for i, level := range levels {
		rep := sweep(fmt.Sprint("level ", i))
		if i > 0 && rep.Deleted != int64(len(levels[i-1])) {
			t.Fatalf("level %d: sweep = %+v, want the %d blobs of the level before deleted", i, rep, len(levels[i-1]))
		}
		if rep.Staged != int64(len(level)) {
			t.Fatalf("level %d: sweep = %+v, want %d staged", i, rep, len(level))
		}
		w := window(t, b.eng.GC())
		for _, k := range level {
			if _, ok := w[k]; !ok {
				t.Fatalf("level %d: window %v lacks %s", i, w, k)
			}
		}
		if i < 2 {
			wantErr(t, b.store.Delete(ctx, leaf), steaderr.ErrProtected, "Delete of a referenced grandchild")
		}
		b.clock.Advance(testGrace)
	}
	// No edge is left, but the store declared liveness once: its sweeps
	// are not refused.
	if rep, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil || rep.Deleted != 1 {
		t.Fatalf("a sweep once no edge is left = %+v, %v; want the grandchild deleted", rep, err)
	}
	wantNothingStored(t, b.store)
}

func gcEdgesRefused(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	childValue := testValue("present child", 10)
	child := mustPut(t, b.store, childValue)
	absent := absentKey("edge child")
	value := testValue("orphaned parent", 20)
	_, err := putWith(t, b.store, value, child, absent)
	wantErr(t, err, steaderr.ErrNotFound, "PutWith a child not stored")
	if !strings.Contains(err.Error(), absent.String()) {
		t.Errorf("the error %q does not name the missing child", err)
	}
	wantHas(t, b.store, blob.KeyOf(value), false)
	if x, err := b.col.Explain(ctx, child); err != nil || len(x.Parents) != 0 {
		t.Fatalf("Explain(child) after a refused parent = %+v, %v; want no parent", x, err)
	}
	if d, err := b.eng.GC().Declared(ctx); err != nil || d {
		t.Fatalf("Declared after a refused parent = %v, %v; want nothing declared", d, err)
	}
	_, err = putWith(t, b.store, value, blob.KeyOf(value))
	wantErr(t, err, steaderr.ErrInvalidArgument, "PutWith naming itself")
	_, err = putWith(t, b.store, value, blob.Key{})
	wantErr(t, err, steaderr.ErrInvalidKey, "PutWith a zero child")
	many := make([]blob.Key, blob.MaxChildren+1)
	for i := range many {
		many[i] = absentKey(fmt.Sprint("many ", i))
	}
	_, err = putWith(t, b.store, value, many...)
	wantErr(t, err, steaderr.ErrInvalidArgument, "PutWith too many children")
	wantHas(t, b.store, blob.KeyOf(value), false)

	// A put declaring children writes them even while the store's pin on
	// the key is young.
	parent, err := putWith(t, b.store, value, child)
	if err != nil {
		t.Fatalf("PutWith a stored child: %v", err)
	}
	if x, err := b.col.Explain(ctx, child); err != nil || !slices.Equal(x.Parents, []blob.Key{parent}) {
		t.Fatalf("Explain(child) after its parent's put = %+v, %v", x, err)
	}
	if d, err := b.eng.GC().Declared(ctx); err != nil || !d {
		t.Fatalf("Declared with an edge = %v, %v; want true", d, err)
	}
	gcEdgesFixed(t, b, value, childValue)
}

// gcEdgesFixed: a blob's children are those it was stored with. A re-put
// may declare them or fewer; one declaring another fails with
// ErrChildrenFixed and changes nothing, so no cycle can form.
func gcEdgesFixed(t *testing.T, b *gcBundle, parentValue, childValue []byte) {
	t.Helper()
	ctx := t.Context()
	parent, child := blob.KeyOf(parentValue), blob.KeyOf(childValue)
	for _, children := range [][]blob.Key{{child}, nil} {
		if _, err := putWith(t, b.store, parentValue, children...); err != nil {
			t.Fatalf("re-put with children %v (those it was stored with, or fewer): %v", children, err)
		}
	}
	otherValue := testValue("a later child", 30)
	other := mustPut(t, b.store, otherValue)
	for what, tc := range map[string]struct {
		value    []byte
		children []blob.Key
	}{
		"a re-put naming another child":          {parentValue, []blob.Key{child, other}},
		"a re-put closing a cycle":               {childValue, []blob.Key{parent}},
		"a re-put of content stored without any": {otherValue, []blob.Key{child}},
	} {
		_, err := putWith(t, b.store, tc.value, tc.children...)
		wantErr(t, err, steaderr.ErrConflict, what)
		if !errors.Is(err, steaderr.ErrChildrenFixed) {
			t.Fatalf("%s: %v, want steaderr.ErrChildrenFixed", what, err)
		}
	}
	for k, want := range map[blob.Key][]blob.Key{child: {parent}, parent: nil, other: nil} {
		if x, err := b.col.Explain(ctx, k); err != nil || !slices.Equal(x.Parents, want) {
			t.Fatalf("Explain(%s) after refused re-puts = parents %v, %v; want %v", k, x.Parents, err, want)
		}
	}
	// The empty value may reference blobs too.
	empty, err := putWith(t, b.store, nil, other)
	if err != nil {
		t.Fatalf("PutWith(the empty value, a child): %v", err)
	}
	if x, err := b.col.Explain(ctx, other); err != nil || !slices.Equal(x.Parents, []blob.Key{empty}) {
		t.Fatalf("Explain(a child of the empty value) = parents %v, %v; want %v", x.Parents, err, empty)
	}
}

// gcEdgesRace puts a parent while an arbitration of its child runs: either
// the put wins (the child stays) or the arbitration does (the put fails
// with ErrNotFound and stores nothing); never both.
func gcEdgesRace(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	g := b.eng.GC()
	lease := sweepLease(t, g)
	rounds := 20
	if testing.Short() {
		rounds = 6
	}
	for i := range rounds {
		child := mustPut(t, b.store, testValue(fmt.Sprint("raced child ", i), 10))
		b.expirePins()
		value := testValue(fmt.Sprint("racing parent ", i), 20)
		var wg sync.WaitGroup
		var putErr, arbErr error
		wg.Go(func() { _, putErr = putWith(t, b.store, value, child) })
		wg.Go(func() {
			_, arbErr = g.Arbitrate(ctx, gc.ArbitrateParams{Keys: []blob.Key{child}, Now: b.clock.Now(), Lease: lease})
		})
		wg.Wait()
		if arbErr != nil {
			t.Fatalf("Arbitrate: %v", arbErr)
		}
		hasChild, err := b.store.Has(ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		hasParent, err := b.store.Has(ctx, blob.KeyOf(value))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case putErr == nil && !hasChild:
			t.Fatalf("round %d: the parent was put and its child deleted", i)
		case putErr != nil && !errors.Is(putErr, steaderr.ErrNotFound):
			t.Fatalf("round %d: PutWith: %v", i, putErr)
		case putErr != nil && (hasChild || hasParent):
			t.Fatalf("round %d: the put failed (%v) but child %v, parent %v are stored", i, putErr, hasChild, hasParent)
		}
	}
}

// gcEdgesSharedRace is gcEdgesRace with many parents sharing children
// (images sharing base layers): in each round eight parents, each naming
// two to four of four fresh children, are put while arbitrations of the
// children run. A put that succeeded has every child stored; one that
// failed did so with ErrNotFound and stored nothing.
func gcEdgesSharedRace(t *testing.T, h Harness) {
	SharedChildrenRace(t, h, 12)
}

// SharedChildrenRace runs gcEdgesSharedRace's rounds (fewer in -short)
// against an engine from h, for an engine's own variants (PostgreSQL with
// a pool of one connection).
func SharedChildrenRace(t *testing.T, h Harness, rounds int) {
	b := setupGC(t, h)
	ctx := t.Context()
	g := b.eng.GC()
	lease := sweepLease(t, g)
	if testing.Short() {
		rounds = max(1, rounds/3)
	}
	const nChildren, nParents = 4, 8
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range rounds {
		children := make([]blob.Key, nChildren)
		for j := range children {
			children[j] = mustPut(t, b.store, testValue(fmt.Sprint("shared child ", i, " ", j), 10))
		}
		slices.SortFunc(children, blob.Key.Compare) // Arbitrate takes keys in ascending order
		b.expirePins()
		named := make([][]blob.Key, nParents)
		for p := range named {
			named[p] = slices.Clone(children)
			rng.Shuffle(len(named[p]), func(x, y int) { named[p][x], named[p][y] = named[p][y], named[p][x] })
			named[p] = named[p][:2+rng.IntN(3)]
		}
		putErrs := make([]error, nParents)
		var wg sync.WaitGroup
		for p := range nParents {
			wg.Go(func() {
				_, putErrs[p] = putWith(t, b.store, testValue(fmt.Sprint("shared parent ", i, " ", p), 20), named[p]...)
			})
		}
		var arbErr error
		wg.Go(func() {
			for k := range 3 {
				keys := children[k%2:]
				if _, err := g.Arbitrate(ctx, gc.ArbitrateParams{Keys: keys, Now: b.clock.Now(), Lease: lease}); err != nil {
					arbErr = err
					return
				}
			}
		})
		wg.Wait()
		if arbErr != nil {
			t.Fatalf("round %d: Arbitrate: %v", i, arbErr)
		}
		for p, err := range putErrs {
			parent := blob.KeyOf(testValue(fmt.Sprint("shared parent ", i, " ", p), 20))
			hasParent, herr := b.store.Has(ctx, parent)
			if herr != nil {
				t.Fatal(herr)
			}
			switch {
			case err != nil && !errors.Is(err, steaderr.ErrNotFound):
				t.Fatalf("round %d, parent %d: PutWith: %v", i, p, err)
			case err != nil && hasParent:
				t.Fatalf("round %d, parent %d: the put failed (%v) but the parent is stored", i, p, err)
			case err == nil:
				for _, c := range named[p] {
					has, herr := b.store.Has(ctx, c)
					if herr != nil {
						t.Fatal(herr)
					}
					if !has {
						t.Fatalf("round %d: parent %d was put and its child %s deleted", i, p, c)
					}
				}
			}
		}
	}
}

// gcEdgesFixedRace: two first puts of one content with different children
// race; one stores it with its children, the other then meets a stored
// blob and fails with ErrChildrenFixed. The blob never has both.
func gcEdgesFixedRace(t *testing.T, h Harness) {
	b := setupGC(t, h)
	ctx := t.Context()
	a, c := mustPut(t, b.store, testValue("raced child a", 10)), mustPut(t, b.store, testValue("raced child c", 10))
	rounds := 20
	if testing.Short() {
		rounds = 6
	}
	for i := range rounds {
		value := testValue(fmt.Sprint("raced first put ", i), 40)
		var wg sync.WaitGroup
		var errA, errC error
		wg.Go(func() { _, errA = putWith(t, b.store, value, a) })
		wg.Go(func() { _, errC = putWith(t, b.store, value, c) })
		wg.Wait()
		for _, err := range []error{errA, errC} {
			if err != nil && !errors.Is(err, steaderr.ErrChildrenFixed) {
				t.Fatalf("round %d: PutWith: %v", i, err)
			}
		}
		if (errA == nil) == (errC == nil) {
			t.Fatalf("round %d: put{a} = %v, put{c} = %v; want exactly one to store the blob", i, errA, errC)
		}
		want := a
		if errA != nil {
			want = c
		}
		parent := blob.KeyOf(value)
		for _, k := range []blob.Key{a, c} {
			x, err := b.col.Explain(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if has := slices.Contains(x.Parents, parent); has != (k == want) {
				t.Fatalf("round %d: Explain(%s).Parents = %v; want the parent only on the winner's child", i, k, x.Parents)
			}
		}
	}
}
