package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// testLifecycle covers what every engine shares whatever its capabilities:
// Close, migrations, the never-migrated database and namespaces.
func testLifecycle(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"Closed", lifecycleClosed},
		{"CloseDuringOps", lifecycleCloseDuringOps},
		{"Cluster", lifecycleCluster},
		{"Migrate", lifecycleMigrate},
		{"Virgin", lifecycleVirgin},
		{"Namespaces", lifecycleNamespaces},
	})
}

// lifecycleClosed checks that every operation on a closed engine fails with
// ErrClosed, through the store and the seam, even for a blob that was
// stored before Close.
func lifecycleClosed(t *testing.T, h Harness) {
	b := setup(t, h)
	value := testValue("closed", 10)
	key := mustPut(t, b.store, value)
	if err := b.eng.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	fresh := testValue("put after close", 10)
	for _, tc := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Put", func(ctx context.Context) error { _, err := b.store.Put(ctx, bytes.NewReader(value)); return err }},
		{"PutNew", func(ctx context.Context) error { _, err := b.store.Put(ctx, bytes.NewReader(fresh)); return err }},
		{"PutExpect", func(ctx context.Context) error {
			return b.store.PutExpect(ctx, blob.KeyOf(fresh), bytes.NewReader(fresh))
		}},
		{"Get", func(ctx context.Context) error { _, err := b.store.Get(ctx, key); return err }},
		{"GetAbsent", func(ctx context.Context) error { _, err := b.store.Get(ctx, absentKey("closed")); return err }},
		{"Stat", func(ctx context.Context) error { _, err := b.store.Stat(ctx, key); return err }},
		{"Has", func(ctx context.Context) error {
			has, err := b.store.Has(ctx, key)
			if has {
				return errors.New("Has = true")
			}
			return err
		}},
		{"List", func(ctx context.Context) error { _, err := b.store.List(ctx, blob.Key{}, 10); return err }},
		{"All", func(ctx context.Context) error {
			for info, err := range b.store.All(ctx, blob.Key{}) {
				if err != nil {
					return err
				}
				return fmt.Errorf("All yielded %s", info.Key)
			}
			return errors.New("All yielded nothing, not even an error")
		}},
		{"Delete", func(ctx context.Context) error { return b.store.Delete(ctx, key) }},
		{"EnginePut", func(ctx context.Context) error {
			_, err := b.eng.Blobs().Put(ctx, blob.PutParams{Key: blob.KeyOf(fresh), Value: fresh, Owner: "test", TTL: time.Minute})
			return err
		}},
		{"EngineGet", func(ctx context.Context) error { _, err := b.eng.Blobs().Get(ctx, key); return err }},
		{"EngineStat", func(ctx context.Context) error { _, err := b.eng.Blobs().Stat(ctx, key); return err }},
		{"EngineList", func(ctx context.Context) error {
			var yielded []blob.Info
			err := b.eng.Blobs().List(ctx, blob.Key{}, 10, func(info blob.Info) bool {
				yielded = append(yielded, info)
				return true
			})
			if len(yielded) > 0 {
				return fmt.Errorf("engine List yielded %v", yielded)
			}
			return err
		}},
		{"EngineDelete", func(ctx context.Context) error { return engineDelete(ctx, b.eng.Blobs(), key, time.Time{}) }},
		{"EngineGetFromEarlierHandle", func(ctx context.Context) error { _, err := b.blobs.Get(ctx, key); return err }},
		{"Migrate", func(ctx context.Context) error { return b.eng.Migrate(ctx) }},
		{"SchemaVersion", func(ctx context.Context) error { _, _, err := b.eng.SchemaVersion(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantErr(t, tc.call(t.Context()), steaderr.ErrClosed, tc.name+" after Close")
		})
	}
	t.Run("CloseAgain", func(t *testing.T) {
		t.Parallel()
		for range 2 {
			if err := b.eng.Close(); err != nil {
				t.Fatalf("Close of a closed engine: %v, want nil", err)
			}
		}
	})
}

// lifecycleCloseDuringOps closes an engine while goroutines use it: each
// operation either succeeds or fails with ErrClosed (no panic, no other
// error), and none succeeds once Close has returned.
func lifecycleCloseDuringOps(t *testing.T, h Harness) {
	const workers = 8
	b := setup(t, h)
	stored := testValue("close during ops", 100)
	key := mustPut(t, b.store, stored)
	ops := []func(ctx context.Context, w, i int) error{
		func(ctx context.Context, w, i int) error {
			_, err := b.store.Put(ctx, bytes.NewReader(testValue(fmt.Sprint("close during ops", w, i), 50)))
			return err
		},
		func(ctx context.Context, _, _ int) error { _, err := b.store.Get(ctx, key); return err },
		func(ctx context.Context, _, _ int) error { _, err := b.store.Stat(ctx, key); return err },
		func(ctx context.Context, _, _ int) error { _, err := b.store.List(ctx, blob.Key{}, 5); return err },
		func(ctx context.Context, w, _ int) error {
			lk, ok, err := b.locks.TryLock(ctx, fmt.Sprint("close during ops ", w), "owner", time.Minute)
			if ok {
				_, err = lk.Release(ctx)
			}
			return err
		},
	}

	var closed atomic.Bool
	var ready, wg sync.WaitGroup
	ready.Add(workers)
	for w := range workers {
		wg.Go(func() {
			signalled := false
			defer func() {
				if !signalled {
					ready.Done()
				}
			}()
			for i := 0; ; i++ {
				op := ops[(w+i)%len(ops)]
				afterClose := closed.Load()
				err := op(t.Context(), w, i)
				switch {
				case err == nil && afterClose:
					t.Errorf("worker %d, op %d: succeeded after Close returned", w, i)
					return
				case errors.Is(err, steaderr.ErrClosed):
					return
				case err != nil:
					t.Errorf("worker %d, op %d, racing Close: %v, want success or ErrClosed", w, i, err)
					return
				}
				if !signalled && i >= len(ops) {
					signalled = true
					ready.Done()
				}
			}
		})
	}
	ready.Wait()
	err := b.eng.Close()
	closed.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatalf("Close while busy: %v", err)
	}
}

func lifecycleCluster(t *testing.T, h Harness) {
	eng := newEngine(t, h)
	shared, reason := eng.Cluster()
	if reason == "" {
		t.Fatal("Cluster() gives no reason")
	}
	if shared2, reason2 := eng.Cluster(); shared2 != shared || reason2 != reason {
		t.Fatalf("Cluster() = (%v, %q), then (%v, %q)", shared, reason, shared2, reason2)
	}
}

// schemaVersion returns eng's SchemaVersion, failing t on an error or a
// negative version.
func schemaVersion(t *testing.T, eng engine.Engine, what string) (current, latest int) {
	t.Helper()
	current, latest, err := eng.SchemaVersion(t.Context())
	if err != nil {
		t.Fatalf("SchemaVersion %s: %v", what, err)
	}
	if current < 0 || latest < 0 {
		t.Fatalf("SchemaVersion %s = (%d, %d), want no negative version", what, current, latest)
	}
	return current, latest
}

func mustMigrate(t *testing.T, eng engine.Engine, what string) {
	t.Helper()
	if err := eng.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate %s: %v", what, err)
	}
}

func lifecycleMigrate(t *testing.T, h Harness) {
	// A fresh engine is current; migrating it again changes nothing.
	t.Run("Twice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		current, latest := schemaVersion(t, b.eng, "of a fresh engine")
		if current != latest {
			t.Fatalf("SchemaVersion of a fresh engine = (%d, %d), want current == latest", current, latest)
		}
		value := testValue("migrate twice", 10)
		key := mustPut(t, b.store, value)
		mustMigrate(t, b.eng, "once")
		mustMigrate(t, b.eng, "twice")
		if c, l := schemaVersion(t, b.eng, "after migrating twice"); c != current || l != latest {
			t.Fatalf("SchemaVersion after migrating twice = (%d, %d), want (%d, %d)", c, l, current, latest)
		}
		wantValue(t, b.store, key, value)
	})
	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		concurrentMigrate(t, b.eng)
		mustPut(t, b.store, testValue("after concurrent migrate", 10))
	})
}

// concurrentMigrate runs Migrate from several goroutines at once.
func concurrentMigrate(t *testing.T, eng engine.Engine) {
	t.Helper()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := eng.Migrate(t.Context()); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if current, latest := schemaVersion(t, eng, "after concurrent Migrate"); current != latest {
		t.Fatalf("SchemaVersion after concurrent Migrate = (%d, %d), want current == latest", current, latest)
	}
}

// newVirgin returns an engine on a never-migrated database.
func newVirgin(t *testing.T, h Harness) *bundle {
	t.Helper()
	eng := h.Virgin(t)
	if eng == nil {
		t.Fatal("enginetest: Harness.Virgin returned nil")
	}
	return bundleOf(t, eng, blob.Options{})
}

// wantSchemaErr checks that err wraps ErrSchema and tells the user to run
// stead migrate.
func wantSchemaErr(t *testing.T, err error, what string) {
	t.Helper()
	wantErr(t, err, steaderr.ErrSchema, what)
	if !strings.Contains(err.Error(), "stead migrate") {
		t.Fatalf("%s: error %q does not say to run %q", what, err, "stead migrate")
	}
}

// lifecycleVirgin covers a database that was never migrated: reads answer
// absent or empty, writes fail with ErrSchema, and Migrate makes it usable.
func lifecycleVirgin(t *testing.T, h Harness) {
	if h.Virgin == nil {
		t.Skip("the engine has no schema (Harness.Virgin is nil)")
	}
	t.Run("Reads", func(t *testing.T) {
		t.Parallel()
		b := newVirgin(t, h)
		ctx := t.Context()
		key := absentKey("virgin")
		_, err := b.store.Get(ctx, key)
		wantErr(t, err, steaderr.ErrNotFound, "Get on a virgin database")
		_, err = b.store.Stat(ctx, key)
		wantErr(t, err, steaderr.ErrNotFound, "Stat on a virgin database")
		wantHas(t, b.store, key, false)
		wantNothingStored(t, b.store)
		wantKeys(t, "All on a virgin database", mustAll(t, b.store, blob.Key{}), nil)
		_, err = b.blobs.Get(ctx, key)
		wantErr(t, err, steaderr.ErrNotFound, "engine Get on a virgin database")
		_, err = b.blobs.Stat(ctx, key)
		wantErr(t, err, steaderr.ErrNotFound, "engine Stat on a virgin database")
		err = b.blobs.List(ctx, blob.Key{}, 10, func(info blob.Info) bool {
			t.Errorf("engine List on a virgin database yielded %s", info.Key)
			return true
		})
		if err != nil {
			t.Fatalf("engine List on a virgin database: %v", err)
		}
		if g := b.eng.GC(); g != nil {
			// The collector's reads answer empty there too.
			lease := sweepLease(t, g)
			keys, err := g.Take(ctx, gc.TakeParams{Limit: 10, Lease: lease})
			if err != nil || len(keys) != 0 {
				t.Fatalf("Take on a virgin database = %v, %v; want none, nil", keys, err)
			}
			if pass, err := g.StagePass(ctx); err != nil || pass != (gc.Pass{}) {
				t.Fatalf("StagePass on a virgin database = %+v, %v; want the zero Pass", pass, err)
			}
			if n, err := g.Reap(ctx, gc.NowParams{Lease: lease}); err != nil || n != (gc.Reaped{}) {
				t.Fatalf("Reap on a virgin database = %+v, %v; want nothing, nil", n, err)
			}
			if d, err := g.Declared(ctx); err != nil || d {
				t.Fatalf("Declared on a virgin database = %v, %v; want false, nil", d, err)
			}
		}
		if current, _ := schemaVersion(t, b.eng, "after reads"); current != 0 {
			t.Fatalf("reads on a virgin database migrated it to version %d", current)
		}
	})
	t.Run("Writes", func(t *testing.T) {
		t.Parallel()
		b := newVirgin(t, h)
		ctx := t.Context()
		value := testValue("virgin write", 10)
		key := blob.KeyOf(value)
		_, err := b.store.Put(ctx, bytes.NewReader(value))
		wantSchemaErr(t, err, "Put on a virgin database")
		wantSchemaErr(t, b.store.PutExpect(ctx, key, bytes.NewReader(value)), "PutExpect on a virgin database")
		wantSchemaErr(t, b.store.Delete(ctx, key), "Delete on a virgin database")
		_, err = b.blobs.Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute})
		wantSchemaErr(t, err, "engine Put on a virgin database")
		wantSchemaErr(t, engineDelete(ctx, b.blobs, key, time.Time{}), "engine Delete on a virgin database")
		if current, _ := schemaVersion(t, b.eng, "after failed writes"); current != 0 {
			t.Fatalf("writes on a virgin database migrated it to version %d", current)
		}
		wantHas(t, b.store, key, false)
	})
	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		b := newVirgin(t, h)
		current, latest := schemaVersion(t, b.eng, "of a virgin database")
		if current != 0 || latest <= 0 {
			t.Fatalf("SchemaVersion of a virgin database = (%d, %d), want (0, latest > 0)", current, latest)
		}
		mustMigrate(t, b.eng, "a virgin database")
		if c, l := schemaVersion(t, b.eng, "after Migrate"); c != latest || l != latest {
			t.Fatalf("SchemaVersion after Migrate = (%d, %d), want (%d, %d)", c, l, latest, latest)
		}
		value := testValue("virgin migrated", 10)
		key := mustPut(t, b.store, value)
		wantValue(t, b.store, key, value)
		mustMigrate(t, b.eng, "again")
		if c, l := schemaVersion(t, b.eng, "after Migrate again"); c != latest || l != latest {
			t.Fatalf("SchemaVersion after Migrate again = (%d, %d), want (%d, %d)", c, l, latest, latest)
		}
		wantValue(t, b.store, key, value)
	})
	t.Run("ConcurrentMigrate", func(t *testing.T) {
		t.Parallel()
		b := newVirgin(t, h)
		concurrentMigrate(t, b.eng)
		value := testValue("virgin concurrent migrate", 10)
		wantValue(t, b.store, mustPut(t, b.store, value), value)
	})
}

// nsOutcome is what an engine must do with a namespace name.
type nsOutcome int

const (
	nsWorks   nsOutcome = iota // accepted, and works
	nsRefused                  // refused with ErrInvalidName
	nsEither                   // either, engine's choice
)

var namespaceCases = []struct {
	label string
	name  string
	want  nsOutcome
}{
	{"Quote", `a"b`, nsWorks},
	{"Space", "with space", nsWorks},
	{"ReservedSelect", "select", nsWorks},
	{"ReservedUser", "user", nsWorks},
	{"Unicode", "Ünïcödé", nsEither},
	{"Injection", "x;drop schema public cascade", nsEither},
	{"Len63", "n63_" + strings.Repeat("x", 59), nsWorks},
	{"Len64", "n64_" + strings.Repeat("x", 60), nsRefused},
	{"Empty", "", nsRefused},
	{"NUL", "a\x00b", nsRefused},
}

// openNamespace opens name and checks the outcome against want; it returns
// nil when the name was (rightly) refused.
func openNamespace(t *testing.T, h Harness, name string, want nsOutcome) *bundle {
	t.Helper()
	eng, err := h.Namespace(t, name)
	switch {
	case err != nil && want == nsWorks:
		t.Fatalf("Namespace(%q): %v, want it accepted", name, err)
	case err != nil:
		wantErr(t, err, steaderr.ErrInvalidName, fmt.Sprintf("Namespace(%q)", name))
		return nil
	case want == nsRefused:
		if eng != nil {
			_ = eng.Close()
		}
		t.Fatalf("Namespace(%q) was accepted, want an error wrapping %v", name, steaderr.ErrInvalidName)
	case eng == nil:
		t.Fatalf("Namespace(%q) returned a nil engine and no error", name)
	}
	return bundleOf(t, eng, blob.Options{})
}

// lifecycleNamespaces opens hostile namespace names: each works or is
// refused as the table says, and accepted namespaces are isolated. The
// subtests run one after another: each name is open in one test at a time.
func lifecycleNamespaces(t *testing.T, h Harness) {
	if h.Namespace == nil {
		t.Skip("the engine has no namespaces (Harness.Namespace is nil)")
	}
	for _, tc := range namespaceCases {
		t.Run(tc.label, func(t *testing.T) {
			b := openNamespace(t, h, tc.name, tc.want)
			if b == nil {
				return
			}
			wantNothingStored(t, b.store)
			value := testValue("namespace "+tc.label, 100)
			key := mustPut(t, b.store, value)
			wantValue(t, b.store, key, value)
			wantKeys(t, fmt.Sprintf("List in namespace %q", tc.name), mustList(t, b.store, blob.Key{}, 10), []blob.Key{key})
			b.expirePins()
			if err := b.store.Delete(t.Context(), key); err != nil {
				t.Fatalf("Delete in namespace %q: %v", tc.name, err)
			}
			wantNothingStored(t, b.store)
			lk := mustTryLock(t, b.locks, "namespace "+tc.label, tc.name, time.Minute)
			if lk.Token() != 1 {
				t.Fatalf("first grant in namespace %q has token %d, want 1", tc.name, lk.Token())
			}
			wantReleased(t, lk, true)
		})
	}
	// Every accepted name, open at once in one test: a blob put in one is
	// absent from all the others.
	t.Run("Isolated", func(t *testing.T) {
		type open struct {
			name string
			b    *bundle
			key  blob.Key
		}
		var opened []open
		for _, tc := range namespaceCases {
			if tc.want == nsRefused {
				continue
			}
			b := openNamespace(t, h, tc.name, tc.want)
			if b == nil {
				continue
			}
			key := mustPut(t, b.store, testValue("isolated "+tc.label, 50))
			opened = append(opened, open{tc.name, b, key})
			// The same lock name is a lock of its own in each namespace.
			if lk := mustTryLock(t, b.locks, "isolated", tc.label, time.Minute); lk.Token() != 1 {
				t.Fatalf("first grant in namespace %q has token %d, want 1", tc.name, lk.Token())
			}
		}
		if len(opened) < 2 {
			t.Fatalf("only %d namespaces accepted, want at least 2", len(opened))
		}
		for _, o := range opened {
			wantKeys(t, fmt.Sprintf("List in namespace %q", o.name), mustAll(t, o.b.store, blob.Key{}), []blob.Key{o.key})
			for _, other := range opened {
				if other.key != o.key {
					wantHas(t, o.b.store, other.key, false)
				}
			}
		}
	})
}
