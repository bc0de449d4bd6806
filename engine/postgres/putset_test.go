package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// putSetPools are the engines' pools the PutSet races run on, two engines
// sharing a schema: 4 connections each, one each, and 4 through PgBouncer
// in transaction mode.
var putSetPools = []struct {
	name   string
	params string
	via    func(testing.TB, *pgtest.DB) *pgtest.DB
}{
	{"pool4", "&pool_max_conns=4", direct},
	{"pool1", "&pool_max_conns=1", direct},
	{"pgbouncer", "&pgbouncer=true&pool_max_conns=4", viaPgBouncer},
}

// TestOverlappingPutSets races many goroutines, through two engines on one
// schema, each putting one of a round's few new blobs with unconditional
// refs: shared names, given in a random order, and two of its own, first
// and last in name order. Some contexts are cancelled mid-flight. No
// PutSet that was not cancelled may fail (a deadlock between batches
// would); each is all or nothing: its own refs exist when it returned nil,
// both or neither when it failed (a cancelled commit may have won the
// race), and told created before any is cancelled; of the PutSets of a key, at
// most one is told it stored the blob, exactly one before any is
// cancelled (a batch a cancellation failed is run again, and may find its
// blobs stored); and every ref names a stored blob.
func TestOverlappingPutSets(t *testing.T) {
	t.Parallel()
	for _, tc := range putSetPools {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.via(t, pgtest.New(t))
			first := open(t, db, tc.params)
			engines := []ref.Backend{first.Refs(), open(t, db, tc.params).Refs()}
			const nkeys, nshared, workers, rounds = 4, 5, 16, 12
			value := func(round, i int) []byte { return fmt.Appendf(nil, "overlapping putset %d/%d", round, i) }
			type outcome struct {
				round int
				key   blob.Key
				own   string
				ok    bool
				told  bool
			}
			var mu sync.Mutex
			var outcomes []outcome
			var wg sync.WaitGroup
			for w := range 2 * workers {
				if w == workers {
					wg.Wait() // the rounds without cancellations end first
				}
				wg.Go(func() {
					eng := engines[w%len(engines)]
					for round := range rounds {
						if w >= workers {
							round += rounds
						}
						v := value(round, rand.IntN(nkeys))
						key := blob.KeyOf(v)
						own := fmt.Sprintf("ov/own-%d-%d", w, round)
						sets := []ref.SetParams{{Name: own, Key: key}, {Name: "ov/~" + own, Key: key}}
						// Half set only their own refs, so that batches of
						// distinct names meet batches naming one ref twice.
						shared := rand.Perm(nshared)[:2+rand.IntN(nshared-2)]
						if rand.IntN(2) == 0 {
							shared = nil
						}
						for _, i := range shared {
							sets = append(sets, ref.SetParams{Name: fmt.Sprintf("ov/shared-%d", i), Key: key, Weak: i%2 == 1})
						}
						ctx, cancel := context.WithCancel(context.Background())
						if round >= rounds && rand.IntN(3) == 0 {
							time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
						}
						told, got, err := eng.PutSet(ctx, blob.PutParams{Key: key, Value: v, Owner: "test", TTL: time.Minute}, sets)
						switch {
						case err == nil:
							for i, r := range got {
								if r.Name != sets[i].Name || r.Key != key || r.Weak != sets[i].Weak || r.Version < 1 {
									t.Errorf("PutSet: ref %d = %+v, want %q to %s", i, r, sets[i].Name, key)
								}
								if i < 2 && round < rounds && !r.Created {
									t.Errorf("PutSet: its own new ref %+v not told created", r)
								}
							}
						case ctx.Err() == nil:
							t.Errorf("PutSet failed without being cancelled: %v", err)
						}
						cancel()
						mu.Lock()
						outcomes = append(outcomes, outcome{round, key, own, err == nil, told})
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			ctx := t.Context()
			told := map[blob.Key]int{}
			stored := map[blob.Key]bool{}
			for _, o := range outcomes {
				_, err := engines[0].Get(ctx, ref.GetParams{Name: o.own})
				_, lastErr := engines[0].Get(ctx, ref.GetParams{Name: "ov/~" + o.own})
				switch {
				case o.ok && (err != nil || lastErr != nil):
					t.Fatalf("PutSet of %s returned nil, and its refs: %v, %v", o.key, err, lastErr)
				case err == nil && lastErr == nil:
				case !errors.Is(err, steaderr.ErrNotFound) || !errors.Is(lastErr, steaderr.ErrNotFound):
					t.Fatalf("PutSet of %s failed, and its refs: %v, %v, want both or neither", o.key, err, lastErr)
				}
				if o.told {
					told[o.key]++
				}
				stored[o.key] = stored[o.key] || o.ok
			}
			for k := range stored {
				if told[k] > 1 {
					t.Errorf("%d PutSets of %s were told they stored it", told[k], k)
				}
			}
			for round := range rounds {
				for i := range nkeys {
					if k := blob.KeyOf(value(round, i)); stored[k] && told[k] != 1 {
						t.Errorf("round %d, without cancellations: %d PutSets of %s told they stored it, want 1", round, told[k], k)
					}
				}
			}
			var listed []ref.Ref
			err := engines[0].List(ctx, ref.ListParams{Prefix: "ov/", Limit: 1 << 20}, func(r ref.Ref) bool {
				listed = append(listed, r)
				return true
			})
			if err != nil || len(listed) == 0 {
				t.Fatalf("List: %d refs, %v", len(listed), err)
			}
			for _, r := range listed {
				if _, err := first.Blobs().Stat(ctx, r.Key); err != nil {
					t.Errorf("ref %q names %s, and Stat: %v", r.Name, r.Key, err)
				}
			}
		})
	}
}

// TestPutSetRefusedInBatch: with conditional PutSets sharing group commits
// (SetBatchConditionalPutSets), concurrent PutSets some of which are
// refused: a refused one fails alone with ErrConflict and stores nothing,
// every other commits.
func TestPutSetRefusedInBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "&pool_max_conns=1")
	postgres.SetBatchConditionalPutSets(e, true)
	ctx := t.Context()
	held := []byte("refused in batch: held")
	if _, _, err := e.Refs().PutSet(ctx, blob.PutParams{Key: blob.KeyOf(held), Value: held, Owner: "test", TTL: time.Minute}, []ref.SetParams{{Name: "rb/held", Key: blob.KeyOf(held)}}); err != nil {
		t.Fatalf("PutSet: %v", err)
	}
	const n = 32
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v := fmt.Appendf(nil, "refused in batch %d", i)
			sets := []ref.SetParams{{Name: fmt.Sprintf("rb/own-%d", i), Key: blob.KeyOf(v)}, {Name: "rb/shared", Key: blob.KeyOf(v), Weak: true}}
			if i%4 == 0 {
				sets = append(sets, ref.SetParams{Name: "rb/held", Key: blob.KeyOf(v), Cond: ref.IfAbsent})
			}
			_, _, errs[i] = e.Refs().PutSet(ctx, blob.PutParams{Key: blob.KeyOf(v), Value: v, Owner: "test", TTL: time.Minute}, sets)
		})
	}
	wg.Wait()
	for i, err := range errs {
		v := fmt.Appendf(nil, "refused in batch %d", i)
		_, gerr := e.Refs().Get(ctx, ref.GetParams{Name: fmt.Sprintf("rb/own-%d", i)})
		_, serr := e.Blobs().Stat(ctx, blob.KeyOf(v))
		if i%4 == 0 {
			if !errors.Is(err, steaderr.ErrConflict) || !errors.Is(gerr, steaderr.ErrNotFound) || !errors.Is(serr, steaderr.ErrNotFound) {
				t.Fatalf("refused PutSet %d: %v; its ref: %v, its blob: %v; want ErrConflict and nothing stored", i, err, gerr, serr)
			}
			continue
		}
		if err != nil || gerr != nil || serr != nil {
			t.Fatalf("PutSet %d: %v; its ref: %v, its blob: %v", i, err, gerr, serr)
		}
	}
}

// TestRefWritersDoNotDeadlock races unconditional PutSets of one to three
// refs, shared names in random order, through two engines on one schema,
// with plain Sets (which share group commits: unconditional or IfAbsent,
// weak or strong) and Deletes of the same names, ref rows present and
// absent in turn; and again beside an arbitration of every key, judged an
// hour on, that collects the blobs only weak or expiring refs name, with
// those refs. No writer fails but with ErrNotFound (a Set whose blob was
// collected), no ref is left naming a blob not stored, and, as every
// writer and the arbitration take rows in one order (blob rows, refs by
// name, gc_declared's), the server never detects a deadlock: the engines
// log no retry.
func TestRefWritersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	for _, arbitrate := range []bool{false, true} {
		for _, tc := range putSetPools {
			t.Run(fmt.Sprintf("%s/arbitrate=%v", tc.name, arbitrate), func(t *testing.T) {
				t.Parallel()
				noRetry(t, raceRefWriters(t, tc.via(t, pgtest.New(t)), tc.params, arbitrate))
			})
		}
	}
}

// noRetry fails t if the engine logged a retry (of a statement the server
// failed with a deadlock).
func noRetry(t *testing.T, logs string) {
	t.Helper()
	if strings.Contains(logs, "retrying") {
		t.Errorf("a statement was retried (a deadlock detected):\n%.2000s", logs)
	}
}

// loggedConfig is db's configuration with params, its engine logging to
// the buffer returned, debug lines too (a deadlock's retry).
func loggedConfig(t *testing.T, db *pgtest.DB, params string) (*testkit.Buffer, postgres.Config) {
	t.Helper()
	cfg, err := postgres.ParseURL(db.StoreURL() + params)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testkit.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return logs, cfg
}

// raceRefWriters runs the writers of TestRefWritersDoNotDeadlock on db, and
// with arbitrate an arbitration beside them, checks that every ref then
// names a stored blob, and returns what the engines logged.
func raceRefWriters(t *testing.T, db *pgtest.DB, params string, arbitrate bool) string {
	t.Helper()
	logs, cfg := loggedConfig(t, db, params)
	first := openConfig(t, cfg)
	engines := []ref.Backend{first.Refs(), openConfig(t, cfg).Refs()}
	const nkeys, nnames, putters, plain, ops = 5, 6, 10, 8, 150
	values := make([][]byte, nkeys)
	keys := make([]blob.Key, nkeys)
	for i := range values {
		values[i] = fmt.Appendf(nil, "no deadlock %d", i)
		keys[i] = blob.KeyOf(values[i])
	}
	name := func(i int) string { return fmt.Sprintf("dl/n%d", i) }
	ctx := t.Context()
	stop := make(chan struct{})
	arbitrated := make(chan int, 1)
	if arbitrate {
		go func() {
			n := 0
			defer func() { arbitrated <- n }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := first.GC().Arbitrate(ctx, gc.ArbitrateParams{Keys: keys, Now: time.Now().Add(time.Hour)}); err != nil {
					t.Errorf("Arbitrate: %v", err)
					return
				}
				n++
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range putters + plain {
		wg.Go(func() {
			eng := engines[w%len(engines)]
			for range ops {
				v := values[rand.IntN(nkeys)]
				key := blob.KeyOf(v)
				if w >= putters {
					// A plain writer: a Set (its blob may not be stored
					// yet) or a Delete of one name.
					n := name(rand.IntN(nnames))
					var err error
					if rand.IntN(2) == 0 {
						cond := ref.Always
						if rand.IntN(3) == 0 {
							cond = ref.IfAbsent
						}
						_, err = eng.Set(ctx, ref.SetParams{Name: n, Key: key, Weak: rand.IntN(4) != 0, Cond: cond})
						if cond == ref.IfAbsent && errors.Is(err, steaderr.ErrConflict) {
							err = nil
						}
					} else {
						err = eng.Delete(ctx, ref.DeleteParams{Name: n})
					}
					if err != nil && !errors.Is(err, steaderr.ErrNotFound) {
						t.Errorf("plain writer: %v", err)
						return
					}
					continue
				}
				var sets []ref.SetParams
				for _, i := range rand.Perm(nnames)[:1+rand.IntN(3)] {
					sets = append(sets, ref.SetParams{Name: name(i), Key: key, TTL: time.Duration(rand.IntN(2)) * time.Minute})
				}
				if _, _, err := eng.PutSet(ctx, blob.PutParams{Key: key, Value: v, Owner: "test", TTL: time.Minute}, sets); err != nil {
					t.Errorf("PutSet: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if arbitrate {
		if n := <-arbitrated; n == 0 {
			t.Error("no arbitration ran")
		}
	}
	var listed []ref.Ref
	err := engines[0].List(ctx, ref.ListParams{Prefix: "dl/", Limit: 1 << 20}, func(r ref.Ref) bool {
		listed = append(listed, r)
		return true
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, r := range listed {
		if _, err := first.Blobs().Stat(ctx, r.Key); err != nil {
			t.Errorf("ref %q names %s, and Stat: %v", r.Name, r.Key, err)
		}
	}
	return logs.String()
}

// TestArbitrationLocksRefsInNameOrder holds the lock of ref "a", as a
// writer of "a" then "b" (name order) would, while an arbitration deletes
// the weak refs "b" and "a" (stored in that order) of a blob it collects,
// and, once the arbitration waits, locks "b". The arbitration must have
// waited for "a" before taking "b": no deadlock is detected, the writer
// gets "b", and the arbitration then deletes the blob without a retry.
func TestArbitrationLocksRefsInNameOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range putSetPools {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.via(t, pgtest.New(t))
			logs, cfg := loggedConfig(t, db, tc.params)
			e := openConfig(t, cfg)
			ctx := t.Context()
			value := []byte("arbitrated with its refs")
			key := blob.KeyOf(value)
			if _, _, err := e.Refs().PutSet(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute}, nil); err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{"b", "a"} {
				if _, err := e.Refs().Set(ctx, ref.SetParams{Name: n, Key: key, Weak: true}); err != nil {
					t.Fatal(err)
				}
			}
			refs := pgx.Identifier{db.Schema}.Sanitize() + ".refs"
			writer := make(chan error, 1)
			var once sync.Once
			postgres.SetBeforeDelete(e, func([]blob.Key) {
				once.Do(func() {
					tx, err := db.Admin.Begin(ctx)
					if err != nil {
						writer <- err
						return
					}
					if _, err := tx.Exec(ctx, "SELECT FROM "+refs+" WHERE name = 'a' FOR UPDATE"); err != nil {
						tx.Rollback(ctx)
						writer <- err
						return
					}
					go func() {
						defer tx.Rollback(ctx)
						writer <- func() error {
							// Once the arbitration waits for a lock.
							for {
								var waiting bool
								err := db.Admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM%' || $1 || '%')`, refs).Scan(&waiting)
								if err != nil || waiting {
									if err != nil {
										return err
									}
									break
								}
								time.Sleep(time.Millisecond)
							}
							if _, err := tx.Exec(ctx, "SELECT FROM "+refs+" WHERE name = 'b' FOR UPDATE"); err != nil {
								return err
							}
							return tx.Commit(ctx)
						}()
					}()
				})
			})
			vs, err := e.GC().Arbitrate(ctx, gc.ArbitrateParams{Keys: []blob.Key{key}, Now: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatalf("Arbitrate: %v", err)
			}
			if err := <-writer; err != nil {
				t.Errorf("the writer locking a then b: %v", err)
			}
			if vs[0].Outcome != blob.Deleted {
				t.Errorf("the arbitration's verdict = %+v, want deleted", vs[0])
			}
			noRetry(t, logs.String())
		})
	}
}

// TestDeclarationTakenLast: while the store has not declared liveness, a
// PutSet of two refs records the declaration after both refs' rows, as
// every writer takes gc_declared's row last, so a writer holding the second
// ref and then declaring does not deadlock with it.
func TestDeclarationTakenLast(t *testing.T) {
	t.Parallel()
	for _, tc := range putSetPools {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := tc.via(t, pgtest.New(t))
			ctx := t.Context()
			schema := pgx.Identifier{db.Schema}.Sanitize()
			value := []byte("declared last")
			key := blob.KeyOf(value)
			first := open(t, db, tc.params)
			if _, _, err := first.Refs().PutSet(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute}, []ref.SetParams{{Name: "n2", Key: key}}); err != nil {
				t.Fatal(err)
			}
			// A store that has not declared: its record gone, an engine that
			// never saw it.
			if _, err := db.Admin.Exec(ctx, "DELETE FROM "+schema+".gc_declared"); err != nil {
				t.Fatal(err)
			}
			logs, cfg := loggedConfig(t, db, tc.params)
			e := openConfig(t, cfg)

			tx, err := db.Admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, "SELECT FROM "+schema+".refs WHERE name = 'n2' FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			put := make(chan error, 1)
			go func() {
				_, _, err := e.Refs().PutSet(ctx, blob.PutParams{Key: key, Value: value, Owner: "test", TTL: time.Minute},
					[]ref.SetParams{{Name: "n1", Key: key}, {Name: "n2", Key: key}})
				put <- err
			}()
			testkit.Until(t, "the PutSet to wait for n2's row", func() bool {
				var waiting bool
				err := db.Admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '.refs%')`, schema).Scan(&waiting)
				if err != nil {
					t.Fatal(err)
				}
				return waiting
			})
			if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".gc_declared (id) VALUES (true) ON CONFLICT DO NOTHING"); err != nil {
				t.Fatalf("the writer holding n2, declaring: %v", err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-put; err != nil {
				t.Fatalf("PutSet: %v", err)
			}
			noRetry(t, logs.String())
			if d, err := e.GC().Declared(ctx); err != nil || !d {
				t.Errorf("Declared = %v, %v; want true", d, err)
			}
		})
	}
}
