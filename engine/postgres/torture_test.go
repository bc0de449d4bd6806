package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

var tortureDuration = flag.Duration("torture.duration", 3*time.Second, "how long TestTorture's safe run lasts (a soak: minutes)")

// The torture test's knobs, passed to its child processes.
const (
	tortureChildEnv   = "STEAD_TORTURE_CHILD" // the child's number
	tortureURLEnv     = "STEAD_TORTURE_URL"
	tortureModeEnv    = "STEAD_TORTURE_MODE" // safe, naive-put, naive-arbitration
	tortureSweepEnv   = "STEAD_TORTURE_SWEEP"
	tortureForEnv     = "STEAD_TORTURE_FOR"
	tortureSyncOffEnv = "STEAD_TORTURE_SYNC_OFF"

	torturePinTTL = 40 * time.Millisecond
	tortureGrace  = 15 * time.Millisecond
	tortureValues = 200
	tortureProcs  = 3 // the first two sweep
	tortureRefs   = "torture_refs"

	// The adversary's puts pin for longer, so that a miss of one it read
	// right after the arbitration it raced is a loss however slow the
	// machine; an arbitration waits up to tortureAdversaryWait for a checked
	// put to return (it waits on the arbitration's row lock, so it cannot),
	// up to tortureNaiveWait for a naive one.
	tortureAdversaryPin  = 600 * time.Millisecond
	tortureAdversaryWait = 30 * time.Millisecond
	tortureNaiveWait     = 5 * time.Second // a naive put waits on no lock the arbitration holds

	tortureRounds = 3
)

// TestTorture proves the safety invariant against real PostgreSQL: several
// processes put overlapping content (the same small value pool), pin,
// reference pinned keys in a liveness table, release and drop references,
// while two of them sweep continuously with a pin TTL and a grace in the
// tens of milliseconds. Every key read while its put's pin is live, and
// every key a reference row holds, must be readable: zero losses. Run with
// the known-unsafe put, or the one-statement arbitration, the same test
// must see a loss, which proves it can.
func TestTorture(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode     string
		duration time.Duration
		wantLoss bool
	}{
		{"safe", *tortureDuration, false},
		// The same with the bytes tier on a file:// bucket and every value
		// an object: a read must find the row and its object.
		{"bytes", min(*tortureDuration, 3*time.Second), false},
		{"naive-put", 3 * time.Second, true},
		{"naive-arbitration", 3 * time.Second, true},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			// A run goes again, a few times at most, until it did enough
			// to prove anything and a counter-test saw its loss: a loaded
			// machine may sweep too little in one run.
			var res tortureResult
			enough := func() bool {
				return res.puts > 0 && res.sweeps > 0 && res.deleted > 0 && res.refChecks > 0 && (!tc.wantLoss || res.losses > 0)
			}
			for range tortureRounds {
				if res.add(runTorture(t, tc.mode, tc.duration)); enough() || res.losses > 0 {
					break
				}
			}
			t.Logf("%s for up to %d × %v: %+v", tc.mode, tortureRounds, tc.duration, res)
			if res.puts == 0 || res.sweeps == 0 || res.deleted == 0 || res.refChecks == 0 {
				t.Fatalf("the run did too little to prove anything: %+v", res)
			}
			switch {
			case tc.wantLoss && res.losses == 0:
				t.Fatalf("%s lost nothing: the torture test cannot see the race it exists for", tc.mode)
			case !tc.wantLoss && res.losses > 0:
				t.Fatalf("%d losses: a blob was deleted while pinned or referenced", res.losses)
			case !tc.wantLoss && res.errors > 0:
				t.Fatalf("%d operations failed", res.errors)
			}
		})
	}
}

type tortureResult struct {
	losses, puts, errors, sweeps, deleted, refChecks int64
}

func (r *tortureResult) add(o tortureResult) {
	r.losses += o.losses
	r.puts += o.puts
	r.errors += o.errors
	r.sweeps += o.sweeps
	r.deleted += o.deleted
	r.refChecks += o.refChecks
}

func runTorture(t *testing.T, mode string, d time.Duration) tortureResult {
	t.Helper()
	db := pgtest.New(t)
	params, objects := "", ""
	if mode == "bytes" {
		objects = t.TempDir()
		params = "&bytes=" + url.QueryEscape("file://"+filepath.ToSlash(objects))
	}
	storeURL := db.StoreURL() + params
	e := open(t, db, params)
	ctx := context.Background()
	refs := pgx.Identifier{db.Schema, tortureRefs}.Sanitize()
	if _, err := e.Pool().Exec(ctx, "CREATE TABLE "+refs+" (id bigserial PRIMARY KEY, key text NOT NULL)"); err != nil {
		t.Fatalf("creating the reference table: %v", err)
	}
	if err := gc.New(e.GC(), gc.Options{}).RegisterSource(ctx, gc.Source{Schema: db.Schema, Table: tortureRefs, Column: "key"}); err != nil {
		t.Fatalf("RegisterSource: %v", err)
	}
	var total tortureResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range tortureProcs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(),
				tortureChildEnv+"="+strconv.Itoa(i), tortureURLEnv+"="+storeURL, tortureModeEnv+"="+mode,
				tortureSweepEnv+"="+strconv.FormatBool(i < 2), tortureForEnv+"="+d.String())
			if mode != "naive-arbitration" {
				// More interleavings per second; durability is not what is
				// tested. The naive arbitration's race window is a put's
				// commit, so that run keeps the flush.
				cmd.Env = append(cmd.Env, tortureSyncOffEnv+"=1")
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Errorf("child %d: %v\n%s", i, err, stderr.String())
				return
			}
			var r tortureResult
			if _, err := fmt.Sscanf(lastLine(stdout.String()), "TORTURE %d %d %d %d %d %d", &r.losses, &r.puts, &r.errors, &r.sweeps, &r.deleted, &r.refChecks); err != nil {
				t.Errorf("child %d: no result (%v):\n%s\n%s", i, err, stdout.String(), stderr.String())
				return
			}
			if r.losses > 0 || r.errors > 0 {
				t.Logf("child %d: %s", i, stderr.String())
			}
			mu.Lock()
			total.add(r)
			mu.Unlock()
		})
	}
	wg.Wait()
	if objects != "" {
		// Never a row without its object.
		rows, err := e.Pool().Query(ctx, "SELECT object FROM "+pgx.Identifier{db.Schema, "blobs"}.Sanitize()+" WHERE object IS NOT NULL")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(objects, filepath.FromSlash(n))); err != nil {
				t.Errorf("a blob row names object %s, which is gone: %v", n, err)
				total.losses++
			}
		}
	}
	return total
}

// pinnedReadLoss reads through get a key whose put with pin TTL ttl
// started at start, and reports whether a miss is a loss: only if the read
// returned within half the TTL of start, the least a put's pin protects
// its blob. The time
// is taken when the read returns, not before it is sent: a read delayed (a
// stalled process, a wait for a pool connection) may run after the pin
// lapsed and its blob was rightly collected. err is any error but a miss.
func pinnedReadLoss(start time.Time, ttl time.Duration, now func() time.Time, get func() error) (readBy time.Duration, loss bool, err error) {
	err = get()
	readBy = now().Sub(start)
	if errors.Is(err, steaderr.ErrNotFound) {
		return readBy, readBy < ttl/2, nil
	}
	return readBy, false, err
}

func TestPinnedReadLoss(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		took     time.Duration // the read's own duration, sent at start
		err      error
		wantLoss bool
		wantErr  error
	}{
		{"hit", time.Millisecond, nil, false, nil},
		{"miss within the pin", time.Millisecond, steaderr.ErrNotFound, true, nil},
		// Sent at once, but answered after the pin lapsed: the blob may
		// have been collected meanwhile.
		{"miss of a read delayed past the pin", torturePinTTL, steaderr.ErrNotFound, false, nil},
		{"error", time.Millisecond, boom, false, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := start
			_, loss, err := pinnedReadLoss(start, torturePinTTL, func() time.Time { return clock }, func() error {
				clock = clock.Add(tc.took)
				return tc.err
			})
			if loss != tc.wantLoss || !errors.Is(err, tc.wantErr) {
				t.Fatalf("loss %v, err %v; want loss %v, err %v", loss, err, tc.wantLoss, tc.wantErr)
			}
		})
	}
}

// sortedPair returns a and b sorted, once if equal.
func sortedPair(a, b blob.Key) []blob.Key {
	switch c := a.Compare(b); {
	case c == 0:
		return []blob.Key{a}
	case c > 0:
		return []blob.Key{b, a}
	}
	return []blob.Key{a, b}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// tortureChild is a child process of TestTorture: it works for the given
// time and prints its counts as the last line of its output.
func tortureChild() int {
	ctx := context.Background()
	u := os.Getenv(tortureURLEnv)
	if os.Getenv(tortureSyncOffEnv) != "" {
		u += "&synchronous_commit=off"
	}
	cfg, err := postgres.ParseURL(u)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e, err := postgres.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer e.Close()
	// The adversary's engine of its own: its puts never share a group
	// commit with a writer's, whose pin upsert may wait on the lock of the
	// arbitration the adversary races.
	ae, err := postgres.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer ae.Close()
	d, _ := time.ParseDuration(os.Getenv(tortureForEnv))
	deadline := time.Now().Add(d)
	name := "torture-" + os.Getenv(tortureChildEnv)
	mode := os.Getenv(tortureModeEnv)
	switch mode {
	case "naive-put":
		postgres.SetNaivePut(e, true)
		postgres.SetNaivePut(ae, true)
	case "naive-arbitration":
		postgres.SetNaiveArbitration(e)
	}
	opts := blob.Options{PinTTL: torturePinTTL, Owner: name}
	if mode == "bytes" {
		opts.InlineLimit = 4 // every value an object
	}
	s := blob.NewStore(e.Blobs(), opts)
	// Each adversary put is a store and an owner of its own: a pin is one
	// row per key and owner, which a guard's release of the same owner
	// would end, and whose upsert would wait on the lock the arbitration's
	// pin check took.
	var adversaries atomic.Int64
	adversaryStore := func() *blob.Store {
		o := opts
		o.PinTTL, o.Owner = tortureAdversaryPin, fmt.Sprintf("%s-adversary-%d", name, adversaries.Add(1))
		return blob.NewStore(ae.Blobs(), o)
	}
	refStore := ref.NewStore(e.Refs(), ref.Options{})
	col := gc.New(e.GC(), gc.Options{Grace: tortureGrace, Batch: 50, Holder: name})
	schema := cfg.Schema
	refs := pgx.Identifier{schema, tortureRefs}.Sanitize()
	// A reference is inserted only while this owner's pin is live (a row
	// of pins, or the pin in the blob's row), checked in the insert
	// itself: the application's contract.
	insertRef := "INSERT INTO " + refs + " (key) SELECT $1 WHERE EXISTS (SELECT 1 FROM " +
		pgx.Identifier{schema, "pins"}.Sanitize() + " WHERE key = $1 AND owner = $2 AND expiry > clock_timestamp() + interval '5 milliseconds')" +
		" OR EXISTS (SELECT 1 FROM " + pgx.Identifier{schema, "blobs"}.Sanitize() +
		" WHERE key = $1 AND pin_owner = $2 AND pin_expiry > clock_timestamp() + interval '5 milliseconds') RETURNING id"

	var res struct{ losses, puts, errors, sweeps, deleted, refChecks atomic.Int64 }
	loss := func(format string, args ...any) {
		res.losses.Add(1)
		fmt.Fprintf(os.Stderr, "LOSS: "+format+"\n", args...)
	}
	fail := func(what string, err error) {
		res.errors.Add(1)
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	}
	values := make([][]byte, tortureValues)
	for i := range values {
		values[i] = fmt.Appendf(nil, "torture value %d", i)
	}
	// readPinned reads key, whose put with pin TTL ttl started at start: a
	// miss within half the TTL is a loss.
	readPinned := func(key blob.Key, start time.Time, ttl time.Duration) {
		readBy, lost, err := pinnedReadLoss(start, ttl, time.Now, func() error {
			rd, err := s.Get(ctx, key)
			if err != nil {
				return err
			}
			defer rd.Close()
			_, err = io.Copy(io.Discard, rd) // an object's bytes too
			return err
		})
		switch {
		case lost:
			loss("%s unreadable %v after its put started, within its pin", key, readBy)
		case err != nil:
			fail("get", err)
		}
	}
	type putDone struct {
		key   blob.Key
		start time.Time
	}
	recent := make(chan putDone, 4096)
	var checkers sync.WaitGroup
	for range 3 {
		checkers.Go(func() {
			for p := range recent {
				time.Sleep(time.Until(p.start.Add(torturePinTTL/2 - 2*time.Millisecond)))
				readPinned(p.key, p.start, torturePinTTL)
			}
		})
	}
	// The adversary: an arbitration about to delete keys has a writer put
	// one of them. The naive put does not wait on the arbitration's row
	// lock, so it returns, and the deletion that follows takes its blob: the
	// arbitration waits for the put to return (tortureAdversaryWait at most
	// for a checked put, which waits on that lock and stores its blob again
	// after the commit). The naive arbitration's one statement waits inside,
	// its snapshot taken, for the advisory lock the adversary holds until
	// its put returned: the put's pin commits unseen. Every counter-test run
	// loses whenever the adversary meets a deletion, seen by a read after
	// the arbitration committed.
	valueOf := map[blob.Key][]byte{}
	for _, v := range values {
		valueOf[blob.KeyOf(v)] = v
	}
	wait := tortureAdversaryWait
	if mode == "naive-put" {
		wait = tortureNaiveWait
	}
	var adversary sync.WaitGroup
	postgres.SetBeforeDelete(e, func(keys []blob.Key) {
		key := keys[rand.IntN(len(keys))]
		if valueOf[key] == nil {
			return
		}
		var held *pgxpool.Conn
		if mode == "naive-arbitration" {
			conn, err := ae.Pool().Acquire(ctx)
			if err != nil {
				fail("adversary lock", err)
				return
			}
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", postgres.NaiveArbitrationLock(e)); err != nil {
				fail("adversary lock", err)
				conn.Release()
				return
			}
			held = conn
		}
		returned := make(chan struct{})
		adversary.Go(func() {
			start := time.Now()
			_, err := adversaryStore().Put(ctx, bytes.NewReader(valueOf[key]))
			close(returned)
			if held != nil {
				if _, err := held.Exec(ctx, "SELECT pg_advisory_unlock($1)", postgres.NaiveArbitrationLock(e)); err != nil {
					fail("adversary unlock", err)
					_ = held.Conn().Close(ctx) // it may hold the lock still
				}
				held.Release()
			}
			if err != nil {
				fail("adversary put", err)
				return
			}
			res.puts.Add(1)
			// Read once the arbitration surely committed, well within the
			// pin.
			time.Sleep(time.Until(start.Add(tortureAdversaryPin / 4)))
			readPinned(key, start, tortureAdversaryPin)
		})
		if held == nil {
			select {
			case <-returned:
			case <-time.After(wait):
			}
		}
	})
	var wg sync.WaitGroup
	if os.Getenv(tortureSweepEnv) == "true" {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				rep, err := col.Sweep(ctx, gc.SweepOptions{})
				if err != nil {
					fail("sweep", err)
					continue
				}
				if rep.Aborted == "" {
					res.sweeps.Add(1)
					res.deleted.Add(rep.Deleted)
				} else {
					time.Sleep(time.Millisecond) // the other process sweeps
				}
			}
		})
	}
	for range 6 {
		wg.Go(func() {
			var mine []int64
			var lastKey blob.Key
			for time.Now().Before(deadline) {
				// Skewed: a few hot values, and many put now and then, so
				// that puts meet arbitrations of their keys.
				value := values[rand.IntN(1+rand.IntN(len(values)))]
				start := time.Now()
				key, err := s.Put(ctx, bytes.NewReader(value))
				if err != nil {
					fail("put", err)
					continue
				}
				res.puts.Add(1)
				prev := lastKey
				if lastKey = key; prev.IsZero() {
					prev = key
				}
				// The put's pin is live for at least half the TTL from
				// start (a whole TTL unless the put was skipped as hot):
				// read now, and again near its end.
				readPinned(key, start, torturePinTTL)
				select {
				case recent <- putDone{key, start}:
				default:
				}
				switch n := rand.IntN(9); {
				case n == 6: // name it with a ref (moving the name), or drop one
					refName := fmt.Sprintf("%s/%d", name, rand.IntN(6))
					if rand.IntN(3) == 0 {
						if err := refStore.Delete(ctx, refName, 0); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
							fail("ref delete", err)
						}
						continue
					}
					if _, err := refStore.Set(ctx, refName, key, ref.SetOptions{}); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
						fail("ref set", err)
					}
				case n == 7: // put a parent of this key and another recent one
					children := sortedPair(key, prev)
					parent := fmt.Appendf(nil, "torture parent of %s %s", children[0], children[len(children)-1])
					pkey, err := s.PutWith(ctx, bytes.NewReader(parent), blob.PutOptions{Children: children})
					switch {
					case errors.Is(err, steaderr.ErrNotFound):
						// a child was collected first
					case err != nil:
						fail("parent put", err)
					case rand.IntN(2) == 0:
						// Keep the parent for a while: the ref's name is the
						// torture's own, so a later set may move it.
						if _, err := refStore.Set(ctx, fmt.Sprintf("%s/parent", name), pkey.Key, ref.SetOptions{}); err != nil && !errors.Is(err, steaderr.ErrNotFound) {
							fail("parent ref", err)
						}
					}
				case n < 2: // pin, reference, release
					guard, err := s.Pin(ctx, key)
					if errors.Is(err, steaderr.ErrNotFound) {
						continue // collected since: put it again next time
					} else if err != nil {
						fail("pin", err)
						continue
					}
					var id int64
					switch err := e.Pool().QueryRow(ctx, insertRef, key.String(), name).Scan(&id); {
					case err == nil:
						mine = append(mine, id)
					case !errors.Is(err, pgx.ErrNoRows):
						fail("reference", err)
					}
					// Release reports the guard lost if its deadline passed
					// before Release began, so a miss it does not excuse was
					// read while the pin was surely live.
					_, getErr := s.Get(ctx, key)
					err = guard.Release(ctx)
					if err != nil && !errors.Is(err, steaderr.ErrLost) {
						fail("release", err)
					}
					if getErr != nil && !errors.Is(err, steaderr.ErrLost) {
						loss("%s unreadable while pinned by a guard: %v", key, getErr)
					}
				case n < 4 && len(mine) > 0: // drop a reference
					i := rand.IntN(len(mine))
					if _, err := e.Pool().Exec(ctx, "DELETE FROM "+refs+" WHERE id = $1", mine[i]); err != nil {
						fail("unreference", err)
					}
					mine = append(mine[:i], mine[i+1:]...)
				}
			}
		})
	}
	// The checker: every key a reference row holds must be readable while
	// that row exists.
	wg.Go(func() {
		for time.Now().Before(deadline) {
			rows, err := e.Pool().Query(ctx, "SELECT id, key FROM "+refs)
			if err != nil {
				fail("reading references", err)
				continue
			}
			type ref struct {
				ID  int64
				Key string
			}
			all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ref])
			if err != nil {
				fail("reading references", err)
				continue
			}
			for _, r := range all {
				key, _ := blob.ParseKey(r.Key)
				_, err := s.Get(ctx, key)
				res.refChecks.Add(1)
				if !errors.Is(err, steaderr.ErrNotFound) {
					if err != nil {
						fail("get", err)
					}
					continue
				}
				var still bool
				if err := e.Pool().QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+refs+" WHERE id = $1)", r.ID).Scan(&still); err != nil {
					fail("re-reading a reference", err)
				} else if still {
					loss("%s deleted while reference %d held it", key, r.ID)
				}
			}
		}
	})
	// The invariant itself, in one snapshot: a live pin or a reference row
	// without its blob. (Pins are made only under the blob row's lock and
	// references only under a live pin, so either means a deletion
	// committed while the key was protected.)
	violations := "SELECT 'pin ' || p.key || ' of ' || p.owner FROM " + pgx.Identifier{schema, "pins"}.Sanitize() +
		" p WHERE p.expiry > now() AND NOT EXISTS (SELECT 1 FROM " + pgx.Identifier{schema, "blobs"}.Sanitize() + " b WHERE b.key = p.key)" +
		" UNION ALL SELECT 'reference ' || r.id || ' to ' || r.key FROM " + refs + " r WHERE NOT EXISTS (SELECT 1 FROM " +
		pgx.Identifier{schema, "blobs"}.Sanitize() + " b WHERE b.key = r.key)" +
		" UNION ALL SELECT 'ref ' || f.name || ' to ' || f.key FROM " + pgx.Identifier{schema, "refs"}.Sanitize() +
		" f WHERE (f.expiry IS NULL OR f.expiry > now()) AND NOT EXISTS (SELECT 1 FROM " + pgx.Identifier{schema, "blobs"}.Sanitize() + " b WHERE b.key = f.key)" +
		" UNION ALL SELECT 'edge ' || e.parent || ' -> ' || e.child FROM " + pgx.Identifier{schema, "blob_edges"}.Sanitize() +
		" e WHERE EXISTS (SELECT 1 FROM " + pgx.Identifier{schema, "blobs"}.Sanitize() + " p WHERE p.key = e.parent)" +
		" AND NOT EXISTS (SELECT 1 FROM " + pgx.Identifier{schema, "blobs"}.Sanitize() + " c WHERE c.key = e.child)"
	wg.Go(func() {
		for time.Now().Before(deadline) {
			rows, err := e.Pool().Query(ctx, violations)
			if err != nil {
				fail("checking the invariant", err)
				continue
			}
			found, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				fail("checking the invariant", err)
				continue
			}
			res.refChecks.Add(1)
			for _, v := range found {
				loss("%s without its blob", v)
			}
		}
	})
	wg.Wait()
	adversary.Wait()
	close(recent)
	checkers.Wait()
	fmt.Printf("TORTURE %d %d %d %d %d %d\n", res.losses.Load(), res.puts.Load(), res.errors.Load(), res.sweeps.Load(), res.deleted.Load(), res.refChecks.Load())
	return 0
}
