package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// node is one stead process of a fleet: its own engine (pool) on the
// shared schema, and a record store over it.
func node(t *testing.T, db *pgtest.DB, c *clock.Fake) (*postgres.Engine, *record.Store) {
	t.Helper()
	e := open(t, db, "")
	opts := record.Options{}
	if c != nil {
		opts.Now = c.Now
	}
	return e, record.NewStore(e.Records(), opts)
}

// TestRecordZombieFencing plays a paused node: A's lease lapses while it
// keeps checkpointing, B claims the record, and from then on none of A's
// saves lands; the record holds B's state.
func TestRecordZombieFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	c := clock.NewFake(clock.FakeStart)
	_, a := node(t, db, c)
	_, b := node(t, db, c)
	if err := a.RegisterGroup(ctx, "fleet"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Save(ctx, record.Record{ID: "job", Group: "fleet", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	held, err := a.Claim(ctx, "fleet", "job", "node-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	// A checkpoints in a loop, from its own last version, until refused.
	type saved struct{ version int64 }
	var aSaves []saved
	aDone := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		rec := held
		for i := 0; ; i++ {
			rec.Payload = fmt.Appendf(nil, "a step %d", i)
			next, err := a.Save(ctx, rec)
			if err != nil {
				aDone <- err
				return
			}
			rec = next
			aSaves = append(aSaves, saved{rec.Version})
			if i == 3 {
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case err := <-aDone:
		t.Fatalf("A's checkpoints failed before its lease lapsed: %v", err)
	}
	c.Advance(time.Minute) // A's lease lapses; A does not notice
	var bRec record.Record
	testkit.Until(t, "B to claim the lapsed record", func() bool {
		recs, err := b.ClaimNext(ctx, "fleet", "node-b", time.Minute, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 {
			bRec = recs[0]
		}
		return len(recs) == 1
	})
	if bRec.Lease.Incarnation != held.Lease.Incarnation+1 {
		t.Fatalf("B's incarnation %d, want %d", bRec.Lease.Incarnation, held.Lease.Incarnation+1)
	}
	bRec.Payload = []byte("b's state")
	bRec, err = b.Save(ctx, bRec)
	if err != nil {
		t.Fatal(err)
	}

	if err := <-aDone; !errors.Is(err, steaderr.ErrConflict) {
		t.Fatalf("A's save after B's claim = %v, want ErrConflict", err)
	}
	claimVersion := bRec.Version - 1
	for _, s := range aSaves {
		if s.version >= claimVersion {
			t.Fatalf("A saved version %d, at or after B's claim made version %d", s.version, claimVersion)
		}
	}
	stale := held
	stale.Version = aSaves[len(aSaves)-1].version
	stale.Status = record.Completed
	if _, err := a.Save(ctx, stale); !errors.Is(err, steaderr.ErrConflict) {
		t.Fatalf("A's completion from its stale version = %v, want ErrConflict", err)
	}
	got, err := b.Load(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != "b's state" || got.Version != bRec.Version || got.Lease != bRec.Lease {
		t.Fatalf("stored record = %+v, want B's %+v", got, bRec)
	}
}

// TestRecordClaimingScansOneGroup shows with EXPLAIN ANALYZE that the
// claimable listing, ClaimNext and Probe read the claimable records of
// their own group only: neither other groups' records nor live leases,
// however many there are; and that the leased listing reads the group's
// live leases only.
func TestRecordClaimingScansOneGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e, s := node(t, db, nil)
	for _, g := range []string{"big", "small"} {
		if err := s.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
		// The first save creates the group's default tenant.
		if _, err := s.Save(ctx, record.Record{ID: "seed-" + g, Group: g, Status: record.Completed}); err != nil {
			t.Fatal(err)
		}
	}
	schema := pgx.Identifier{db.Schema}.Sanitize()
	// fill adds count records of group with ids prefix+i, leased to owner
	// (none when "") until expiry.
	fill := func(group, prefix string, count int, owner, expiry string) {
		t.Helper()
		_, err := db.Admin.Exec(ctx, "INSERT INTO "+schema+`.records
			(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
			SELECT $2 || i, $1, t.id, 'active', false, 1, $4, 1, `+expiry+`, now(), ''
			FROM `+schema+`.record_tenants t, generate_series(1, $3::int) i WHERE t.grp = $1`, group, prefix, count, owner)
		if err != nil {
			t.Fatal(err)
		}
	}
	// Other groups' records on both sides of the small group's ids, in
	// every lease state; and many live leases in the small group.
	for _, prefix := range []string{"a", "z"} {
		fill("big", prefix+"-free-", 3000, "", "now()")
		fill("big", prefix+"-expired-", 3000, "o", "now() - interval '1 hour'")
		fill("big", prefix+"-live-", 3000, "o", "now() + interval '1 hour'")
	}
	fill("small", "m-live-", 3000, "o", "now() + interval '1 hour'")
	fill("small", "m-free-", 3, "", "now()")
	fill("small", "m-expired-", 2, "o", "now() - interval '1 hour'")
	const claimable = 5
	if _, err := db.Admin.Exec(ctx, "ANALYZE "+schema+".records"); err != nil {
		t.Fatal(err)
	}
	list, claimNext, probe, leased := postgres.RecordSQL(e)
	conn, err := db.Admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
	// ClaimNext's arguments: owner, ttl, now, group, n.
	claimNextArgs := func(n int) string { return fmt.Sprintf("'o', '1 minute', NULL, 'small', %d", n) }
	cases := []struct {
		name, sql, args string
		maxRead         int
	}{
		{"ListClaimable", list, "'small', NULL, 100", claimable},
		{"ClaimNext", claimNext, claimNextArgs(100), 2 * claimable}, // and each by primary key
		{"Probe", probe, "'small', NULL", 2},                        // an entry of each index
		{"ListLeased", leased, "'small', NULL, 'm-live-2', 100", 3000},
	}
	for _, tc := range cases {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			explainReads(t, conn, tc.name+" "+mode, mode, tc.sql, tc.args, tc.maxRead)
		}
	}

	// Stale statistics: ANALYZE saw "small" all unleased, then nearly all
	// of it was claimed. Claiming still reads only what it claims.
	fill("small", "n-free-", 20000, "", "now()")
	if _, err := db.Admin.Exec(ctx, "ANALYZE "+schema+".records"); err != nil {
		t.Fatal(err)
	}
	_, err = db.Admin.Exec(ctx, "UPDATE "+schema+".records SET lease_owner = 'o', lease_expiry = now() + interval '1 hour' "+
		"WHERE grp = 'small' AND id < 'n-free-9'")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		explainReads(t, conn, "ClaimNext on stale statistics "+mode, mode, claimNext, claimNextArgs(10), 2*10)
	}
}

// explainReads runs query as a prepared statement with args, under
// plan_cache_mode mode, and fails t unless EXPLAIN ANALYZE shows it read
// at most maxRead rows of records, each through an index and (but for the
// primary key) by group.
// positional returns query, which names its parameters, with $1, $2, …
// in their place, and the SQL literals of args in that order.
func positional(t *testing.T, query string, args pgx.StrictNamedArgs) (string, string) {
	t.Helper()
	sql, ordered, err := args.RewriteQuery(t.Context(), nil, query, nil)
	if err != nil {
		t.Fatal(err)
	}
	lits := make([]string, len(ordered))
	for i, a := range ordered {
		lits[i] = a.(string)
	}
	return sql, strings.Join(lits, ", ")
}

func explainReads(t *testing.T, conn *pgxpool.Conn, what, mode, query, args string, maxRead int) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	// The statement runs in a transaction rolled back: ClaimNext claims.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	_, err = tx.Exec(ctx, "PREPARE explained AS "+query)
	if err == nil {
		err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained ("+args+")").Scan(&out)
	}
	tx.Rollback(ctx)
	conn.Exec(ctx, "DEALLOCATE explained")
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	plan := out[0]["Plan"].(map[string]any)
	read := 0
	walkPlan(plan, func(node map[string]any) {
		if node["Relation Name"] != "records" || node["Node Type"] == "ModifyTable" {
			return
		}
		if node["Node Type"] == "Seq Scan" {
			t.Fatalf("%s scans records sequentially:\n%v", what, out)
		}
		rows, _ := node["Actual Rows"].(float64)
		loops, _ := node["Actual Loops"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		read += int((rows + removed) * loops)
		cond := fmt.Sprint(node["Index Cond"], node["Recheck Cond"]) // index or bitmap heap scan
		if node["Index Name"] != "records_pkey" && !strings.Contains(cond, "grp") {
			t.Fatalf("%s: records scanned without a group condition: %v", what, node)
		}
	})
	t.Logf("%s read %d rows of records", what, read)
	if read > maxRead {
		t.Fatalf("%s read %d rows of records, want at most %d:\n%v", what, read, maxRead, out)
	}
}

// walkPlan calls visit for every node of an EXPLAIN (FORMAT JSON) plan.
func walkPlan(node map[string]any, visit func(map[string]any)) {
	visit(node)
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		walkPlan(c.(map[string]any), visit)
	}
}

// TestRecordDefaultTenantIsUnique checks the database guarantee: one
// default tenant per group, however many nodes create it at once, and no
// second one even written by hand; and a record can reference only a
// tenant of its own group.
func TestRecordDefaultTenantIsUnique(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	_, a := node(t, db, nil)
	_, b := node(t, db, nil)
	for _, g := range []string{"g", "h"} {
		if err := a.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 16 {
		s := []*record.Store{a, b}[i%2]
		wg.Go(func() {
			if _, err := s.Save(ctx, record.Record{ID: fmt.Sprint("r", i), Group: "g", Status: record.Active}); err != nil {
				t.Errorf("save %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if _, err := a.Save(ctx, record.Record{ID: "in h", Group: "h", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	tenants := pgx.Identifier{db.Schema, "record_tenants"}.Sanitize()
	var n int
	if err := db.Admin.QueryRow(ctx, "SELECT count(*) FROM "+tenants+" WHERE grp = 'g' AND name IS NULL").Scan(&n); err != nil || n != 1 {
		t.Fatalf("default tenants of g: %d, %v; want 1", n, err)
	}
	_, err := db.Admin.Exec(ctx, "INSERT INTO "+tenants+" (grp, name) VALUES ('g', NULL)")
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "record_tenants_one_default" {
		t.Fatalf("a second default tenant for g: %v, want a unique violation of record_tenants_one_default", err)
	}
	_, err = db.Admin.Exec(ctx, "UPDATE "+pgx.Identifier{db.Schema, "records"}.Sanitize()+
		" SET tenant_id = (SELECT id FROM "+tenants+" WHERE grp = 'h' AND name IS NULL) WHERE id = 'r0'")
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		t.Fatalf("pointing a record of g at h's tenant: %v, want a foreign key violation", err)
	}
}

// TestRecordWake checks the wake channel across nodes: a save on one node
// wakes a subscriber on another, and after the listener's connection is
// killed, subscribers are told, then listened for again.
func TestRecordWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	ea, a := node(t, db, nil)
	_, b := node(t, db, nil)
	if err := a.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	waitLive := func() (<-chan struct{}, func()) { t.Helper(); return watchLive(t, ea, "g") }
	wantWake := func(wake <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-wake:
		case <-time.After(30 * time.Second):
			t.Fatalf("no wake within 30s %s", what)
		}
	}

	wake, stop := waitLive()
	if _, err := b.Save(ctx, record.Record{ID: "r1", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	wantWake(wake, "after another node saved a new active record")

	// Kill the listener's backend: subscribers are woken (and may poll
	// while it is down), then it listens again.
	var killed int
	err := db.Admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1",
		postgres.ListenQuery(ea)).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminating the listener: %d backends, %v", killed, err)
	}
	wantWake(wake, "after the listener's connection was killed")
	stop()
	wake, stop = waitLive()
	defer stop()
	if _, err := b.Save(ctx, record.Record{ID: "r2", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	wantWake(wake, "after the listener reconnected")

	// In PgBouncer mode there is no listener: waiters poll.
	pb := open(t, db, "&pgbouncer=true")
	if wake, live, stop, err := pb.Records().WatchClaimable(ctx, "g"); wake != nil || live || err != nil {
		t.Fatalf("WatchClaimable in PgBouncer mode = %v, %v, %v; want no wake channel", wake, live, err)
	} else {
		stop()
	}
}

// TestRecordFailedSaveCreatesNoTenant: a save refused by its
// compare-and-swap leaves no tenant row behind.
func TestRecordFailedSaveCreatesNoTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	_, s := node(t, db, nil)
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, record.Record{ID: "r", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []record.Record{
		{ID: "r", Group: "g", Tenant: "new", Status: record.Active},               // create of an existing id
		{ID: "r", Group: "g", Tenant: "newer", Status: record.Active, Version: 7}, // stale version
		{ID: "absent", Group: "g", Tenant: "newest", Status: record.Active, Version: 1},
	} {
		if _, err := s.Save(ctx, rec); !errors.Is(err, steaderr.ErrConflict) {
			t.Fatalf("Save(%q, tenant %q): %v, want ErrConflict", rec.ID, rec.Tenant, err)
		}
	}
	var n int
	err := db.Admin.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{db.Schema, "record_tenants"}.Sanitize()+" WHERE name IS NOT NULL").Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("named tenants after failed saves: %d, %v; want 0", n, err)
	}
}

// TestRecordSaveStressAcrossEngines runs the overlapping-saves stress
// through two engines on one schema, whose batches may hold the same
// records at once, one of them with a pool of one connection.
func TestRecordSaveStressAcrossEngines(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, a := node(t, db, nil)
	b := record.NewStore(open(t, db, "&pool_max_conns=1").Records(), record.Options{})
	if err := a.RegisterGroup(t.Context(), "g"); err != nil {
		t.Fatal(err)
	}
	enginetest.RecordSaveStress(t, "g", a, b)
}

// watchLive waits until e's listener is live and returns a watch of
// group's claimable records, with its stop.
func watchLive(t *testing.T, e *postgres.Engine, group string) (<-chan struct{}, func()) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		wake, live, stop, err := e.Records().WatchClaimable(t.Context(), group)
		if err != nil {
			t.Fatal(err)
		}
		if live {
			return wake, stop
		}
		select { // woken when the listener is up
		case <-wake:
		case <-time.After(100 * time.Millisecond):
		}
		stop()
	}
	t.Fatal("the listener did not listen within 30s")
	return nil, nil
}

// A save into a tenant not yet cached runs in its own transaction. A
// deferred trigger holds its COMMIT for a while and the caller cancels
// meanwhile; the trigger ignores the cancel request, as a server that had
// already committed would: the save must either report success or have
// changed nothing, never report an error for a write that committed.
func TestRecordCancelledCommitIsNotAbandoned(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	_, s := node(t, db, nil)
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	sch := pgx.Identifier{db.Schema}.Sanitize()
	for _, q := range []string{
		"CREATE FUNCTION " + sch + ".slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.4); RETURN NULL; EXCEPTION WHEN query_canceled THEN RETURN NULL; END $$",
		"CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON " + sch + ".records DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + sch + ".slow_commit()",
	} {
		if _, err := db.Admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, all := range []bool{false, true} {
		id := fmt.Sprintf("fresh-%v", all)
		rec := record.Record{ID: id, Group: "g", Tenant: id, Status: record.Active}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(150*time.Millisecond, cancel)
		var err error
		if all {
			err = s.SaveAll(cctx, []record.Record{rec})[0].Err
		} else {
			_, err = s.Save(cctx, rec)
		}
		cancel()
		// Wait for the save's transaction to end, however it ends.
		if _, err := db.Admin.Exec(ctx, "BEGIN; LOCK TABLE "+sch+".records IN SHARE MODE; COMMIT"); err != nil {
			t.Fatal(err)
		}
		_, lerr := s.Load(ctx, id)
		if stored := lerr == nil; stored != (err == nil) {
			t.Errorf("SaveAll %v: reported %v, stored %v (load: %v)", all, err, stored, lerr)
		}
	}
}

// TestRecordSaveAllSplitsLargePayloads: a SaveAll whose payloads pass one
// statement's byte budget is split into statements, in order, and every
// record is saved.
func TestRecordSaveAllSplitsLargePayloads(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	_, s := node(t, db, nil)
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, record.Record{ID: "warm", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err) // caches the default tenant: the records below share statements
	}
	var recs []record.Record
	for i := range 5 {
		recs = append(recs, record.Record{ID: fmt.Sprintf("big%d", i), Group: "g", Status: record.Active,
			Payload: []byte(strings.Repeat(string(rune('a'+i)), 3<<20))})
	}
	for i, res := range s.SaveAll(ctx, recs) {
		if res.Err != nil {
			t.Fatalf("record %d: %v", i, res.Err)
		}
		got, err := s.Load(ctx, recs[i].ID)
		if err != nil || string(got.Payload) != string(recs[i].Payload) || got.Version != res.Record.Version {
			t.Fatalf("record %d: loaded v%d (%d bytes), %v; saved v%d", i, got.Version, len(got.Payload), err, res.Record.Version)
		}
	}
}

// TestRecordCreateAfterRacingDeleteStartsAbove: a create whose statement
// began before another transaction created and deleted the same id still
// starts above the deleted record's version. The racing transaction holds
// the id while the create waits on it, then deletes it and commits, as a
// create and a delete committing during the statement would.
func TestRecordCreateAfterRacingDeleteStartsAbove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	_, s := node(t, db, nil)
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	for _, all := range []bool{false, true} {
		id := fmt.Sprintf("x-%v", all)
		records := pgx.Identifier{db.Schema, "records"}.Sanitize()
		tx, err := db.Admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		if _, err := s.Save(ctx, record.Record{ID: "other-" + id, Group: "g", Status: record.Active}); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+records+" SELECT $1, grp, tenant_id, status, parked, 1000, lease_owner, lease_incarnation, lease_expiry, updated_at, payload FROM "+records+" WHERE id = $2",
			id, "other-"+id); err != nil {
			t.Fatal(err)
		}
		type result struct {
			rec record.Record
			err error
		}
		done := make(chan result, 1)
		go func() {
			rec := record.Record{ID: id, Group: "g", Status: record.Active}
			var r result
			if all {
				res := s.SaveAll(ctx, []record.Record{rec, {ID: "more-" + id, Group: "g", Status: record.Active}})
				r.rec, r.err = res[0].Record, errors.Join(res[0].Err, res[1].Err)
			} else {
				r.rec, r.err = s.Save(ctx, rec)
			}
			done <- r
		}()
		waitLockWaiters(t, db, 1, "the create to wait on the racing insert")
		if _, err := tx.Exec(ctx, "WITH d AS (DELETE FROM "+records+" WHERE id = $1 RETURNING grp, version) UPDATE "+
			pgx.Identifier{db.Schema, "record_groups"}.Sanitize()+" g SET deleted_version = d.version FROM d WHERE g.name = d.grp", id); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("SaveAll %v: %v", all, r.err)
		}
		if r.rec.Version <= 1000 {
			t.Errorf("SaveAll %v: created at version %d, not above the deleted record's 1000", all, r.rec.Version)
		}
		if got, err := s.Load(ctx, id); err != nil || got.Version != r.rec.Version {
			t.Errorf("SaveAll %v: stored version %d (%v), reported %d", all, got.Version, err, r.rec.Version)
		}
	}
}

// A lone write chosen as a deadlock's victim runs again instead of failing
// with 40P01, as batches do: a deadlock rolls its transaction back whole.
// The cycle is forced: transaction A holds x, the write waits for x (and
// so holds x's tuple lock, first in line), transaction B holds y and waits
// in line for x, then A waits for y. The write's deadlock check runs
// first (A and B check after 10 s), so the write is the victim.
func TestRecordLoneWriteSurvivesDeadlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		write func(ctx context.Context, s *record.Store, x record.Record) error
	}{
		{"Save", func(ctx context.Context, s *record.Store, x record.Record) error {
			_, err := s.Save(ctx, x)
			return err
		}},
		{"SaveAll", func(ctx context.Context, s *record.Store, x record.Record) error {
			return s.SaveAll(ctx, []record.Record{x})[0].Err
		}},
		{"Claim", func(ctx context.Context, s *record.Store, x record.Record) error {
			_, err := s.Claim(ctx, "g", x.ID, "w", time.Hour)
			return err
		}},
		{"Renew", func(ctx context.Context, s *record.Store, x record.Record) error {
			_, err := s.Renew(ctx, x, time.Hour)
			return err
		}},
		{"Delete", func(ctx context.Context, s *record.Store, x record.Record) error { return s.Delete(ctx, x.ID) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t) // a schema of its own: waitLockWaiters counts the schema's waits
			_, s := node(t, db, nil)
			if err := s.RegisterGroup(ctx, "g"); err != nil {
				t.Fatal(err)
			}
			var x record.Record
			for _, id := range []string{"y", "x"} {
				if _, err := s.Save(ctx, record.Record{ID: id, Group: "g", Status: record.Active}); err != nil {
					t.Fatal(err)
				}
				rec, err := s.Claim(ctx, "g", id, "w", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				x = rec
			}
			begin := func() *pgx.Conn {
				conn, err := pgx.Connect(ctx, db.URL)
				if err == nil {
					_, err = conn.Exec(ctx, "BEGIN; SET LOCAL deadlock_timeout = '10s'")
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close(context.Background()) })
				return conn
			}
			touch := func(conn *pgx.Conn, id string) error {
				_, err := conn.Exec(ctx, "UPDATE "+pgx.Identifier{db.Schema, "records"}.Sanitize()+" SET payload = payload WHERE id = $1", id)
				return err
			}
			a, b := begin(), begin()
			if err := touch(a, "x"); err != nil {
				t.Fatal(err)
			}
			wrote := make(chan error, 1)
			go func() { wrote <- tc.write(ctx, s, x) }()
			waitLockWaiters(t, db, 1, "the write to wait for A")
			if err := touch(b, "y"); err != nil {
				t.Fatal(err)
			}
			bDone := make(chan error, 1)
			go func() { bDone <- touch(b, "x") }()
			waitLockWaiters(t, db, 2, "B to wait for the write")
			aDone := make(chan error, 1)
			go func() { aDone <- touch(a, "y") }()
			waitLockWaiters(t, db, 3, "A to wait for B")
			// Once the write gives way, A and B deadlock with each other;
			// cancelling A's statement lets B, then the write, through.
			select {
			case err := <-wrote:
				t.Fatalf("%s returned before the cycle ended: %v", tc.name, err)
			case <-time.After(2 * time.Second): // past the write's deadlock check
			}
			if err := a.PgConn().CancelRequest(ctx); err != nil {
				t.Fatal(err)
			}
			<-aDone
			if err := <-bDone; err != nil {
				t.Fatalf("B: %v", err)
			}
			for _, c := range []*pgx.Conn{a, b} {
				if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-wrote; err != nil {
				t.Fatalf("%s: %v, want it run again after the deadlock", tc.name, err)
			}
		})
	}
}
