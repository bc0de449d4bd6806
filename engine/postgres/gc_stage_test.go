package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// stageStore fills db's schema with n blobs, the i-th keyed by the SHA-256
// of i, all but every tenth named by a registered source table app_refs,
// and, by position in key order, live and expired rows in pins, live,
// expired and weak refs, edges, live and expired inline pins and staged
// rows, so that every check of a staging range keeps or lets through some
// keys. It answers the keys a staging pass at now must stage, in key order.
func stageStore(t *testing.T, db *pgtest.DB, e *postgres.Engine, n int, now time.Time) []string {
	t.Helper()
	ctx := context.Background()
	s := pgxIdent(db.Schema)
	key := `'sha256:' || encode(sha256(i::text::bytea), 'hex')`
	n1, at := []any{n}, []any{now}
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO ` + s + `.blobs (key, size, value) SELECT ` + key + `, 8, int8send(i) FROM generate_series(1, $1::int) i`, n1},
		{`CREATE TABLE ` + s + `.app_refs (key text PRIMARY KEY)`, nil},
		{`INSERT INTO ` + s + `.app_refs SELECT ` + key + ` FROM generate_series(1, $1::int) i WHERE i % 10 <> 0`, n1},
		{`CREATE TABLE ` + s + `.ord AS SELECT key, row_number() OVER (ORDER BY key) AS n FROM ` + s + `.blobs`, nil},
		{`INSERT INTO ` + s + `.pins (key, owner, expiry) SELECT key, 'a', $1::timestamptz + CASE WHEN n % 2 = 0 THEN interval '1 day' ELSE interval '-1 day' END
			FROM ` + s + `.ord WHERE n % 7 = 0`, at},
		{`INSERT INTO ` + s + `.pins (key, owner, expiry) SELECT key, 'b', $1::timestamptz + interval '1 day' FROM ` + s + `.ord WHERE n % 21 = 0`, at},
		{`INSERT INTO ` + s + `.refs (name, key, version, expiry, weak)
			SELECT 'r/' || n, key, n, CASE n % 3 WHEN 0 THEN NULL WHEN 1 THEN $1::timestamptz - interval '1 day' ELSE $1::timestamptz + interval '1 day' END, n % 5 = 0
			FROM ` + s + `.ord WHERE n % 11 = 0`, at},
		{`INSERT INTO ` + s + `.blob_edges (parent, child) SELECT 'sha256:' || repeat('0', 63) || (n % 10), key FROM ` + s + `.ord WHERE n % 13 = 0`, nil},
		{`UPDATE ` + s + `.blobs b SET pin_owner = 'p', pin_expiry = $1::timestamptz + CASE WHEN o.n % 2 = 0 THEN interval '1 day' ELSE interval '-1 day' END
			FROM ` + s + `.ord o WHERE o.key = b.key AND o.n % 17 = 0`, at},
		{`INSERT INTO ` + s + `.gc_window (key, visible_after) SELECT key, $1::timestamptz + interval '5 hours' FROM ` + s + `.ord WHERE n % 19 = 0`, at},
		{`INSERT INTO ` + s + `.gc_sources (schema_name, table_name, column_name) VALUES ($1, 'app_refs', 'key')`, []any{db.Schema}},
	} {
		if _, err := e.Pool().Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
	}
	// The keys the pass must stage, judged key by key.
	rows, err := e.Pool().Query(ctx, `SELECT b.key FROM `+s+`.blobs b
		WHERE coalesce(b.pin_expiry <= $1, true)
		AND NOT EXISTS (SELECT FROM `+s+`.pins p WHERE p.key = b.key AND p.expiry > $1)
		AND NOT EXISTS (SELECT FROM `+s+`.refs f WHERE f.key = b.key AND NOT f.weak AND (f.expiry IS NULL OR f.expiry > $1))
		AND NOT EXISTS (SELECT FROM `+s+`.blob_edges c WHERE c.child = b.key)
		AND NOT EXISTS (SELECT FROM `+s+`.gc_window w WHERE w.key = b.key)
		AND NOT EXISTS (SELECT FROM `+s+`.app_refs a WHERE a.key = b.key)
		ORDER BY b.key`, now)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// All-visible pages, as a vacuumed store has: an index-only scan then
	// reads no blob row.
	if _, err := e.Pool().Exec(ctx, `VACUUM (ANALYZE) `+s+`.blobs`); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestStageRangeStagesExactly: a staging pass in ranges that cut through
// every kind of protection stages exactly the keys no pin, strong ref,
// edge, staged row or source protects.
func TestStageRangeStagesExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "")
	now := time.Now().Truncate(time.Second)
	want := stageStore(t, db, e, 5000, now)
	if len(want) < 100 {
		t.Fatalf("only %d keys to stage: the store protects too much to prove anything", len(want))
	}
	lease, ok, err := e.GC().AcquireSweep(ctx, "test")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	t.Cleanup(func() { lease.Release(context.Background()) })
	var after blob.Key
	var covered, staged int64
	for {
		r, err := e.GC().StageRange(ctx, gc.StageRangeParams{After: after, Limit: 333, Now: now, Grace: time.Hour, Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		covered += r.Covered
		staged += r.Staged
		if r.Last.IsZero() {
			break
		}
		after = r.Last
	}
	rows, err := e.Pool().Query(ctx, `SELECT key FROM `+pgxIdent(db.Schema)+`.gc_window WHERE visible_after = $1 ORDER BY key`, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if covered != 5000 || staged != int64(len(want)) || !slices.Equal(got, want) {
		t.Errorf("pass covered %d, staged %d: %d keys, want 5000 covered and these %d keys staged\ngot  %.3q…\nwant %.3q…", covered, staged, len(got), len(want), got, want)
	}
}

// TestStageRangeReadsCandidateRowsOnly: a staging range reads its keys from
// the key's index alone and reads a blob's row (for its inline pin) only
// for a key nothing else protects, so the range costs an index page per
// few hundred keys, not a heap page a key.
func TestStageRangeReadsCandidateRowsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "")
	now := time.Now().Truncate(time.Second)
	stageStore(t, db, e, 20000, now)
	s := pgxIdent(db.Schema)
	const lim = 2000
	// The keys of the first range no source names: the most blob rows the
	// range may read.
	var left int
	if err := e.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT key FROM `+s+`.blobs ORDER BY key LIMIT $1) r
		WHERE NOT EXISTS (SELECT FROM `+s+`.app_refs a WHERE a.key = r.key)`, lim).Scan(&left); err != nil {
		t.Fatal(err)
	}
	tx, err := e.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The blob rows this session read, by index or bitmap scans and by
	// sequential ones, counted before and after the range in one
	// transaction (the session's counts are not flushed within it).
	blobsRead := func() (fetched, seqRead int64) {
		t.Helper()
		if err := tx.QueryRow(ctx, `SELECT coalesce(idx_tup_fetch, 0), coalesce(seq_tup_read, 0) FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`,
			pgx.Identifier{db.Schema, "blobs"}.Sanitize()).Scan(&fetched, &seqRead); err != nil {
			t.Fatal(err)
		}
		return fetched, seqRead
	}
	fetched0, seqRead0 := blobsRead()
	var covered, staged int64
	if err := tx.QueryRow(ctx, `SELECT covered, staged FROM `+s+`.gc_stage_range('', $1, $2, interval '1 hour', true)`, lim, now).Scan(&covered, &staged); err != nil {
		t.Fatal(err)
	}
	fetched, seqRead := blobsRead()
	fetched, seqRead = fetched-fetched0, seqRead-seqRead0
	t.Logf("the range of %d keys read %d blob rows by index, %d sequentially; %d keys no source names, %d would be staged", lim, fetched, seqRead, left, staged)
	if covered != lim || staged == 0 {
		t.Fatalf("the range covered %d, would stage %d; want %d covered and some staged", covered, staged, lim)
	}
	if fetched+seqRead > int64(left) {
		t.Errorf("the range of %d keys read %d blob rows (%d by index, %d sequentially), want at most the %d no source names",
			lim, fetched+seqRead, fetched, seqRead, left)
	}
}

// TestStageRangePinHandedOver: a key whose inline pin is handed to a pins
// row (the new owner pins, then the old one's pin is cleared, each
// committed) while a staging call runs is pinned at every instant, so
// the call does not stage it. The call is held between its statements
// by a lock on the source table it reads.
func TestStageRangePinHandedOver(t *testing.T) {
	t.Parallel()
	const fn = "gc_stage_range"
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "")
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := pgxIdent(db.Schema)
	at := time.Now().Truncate(time.Microsecond)
	k := fmt.Sprintf("sha256:%064x", 1)
	exec(`CREATE TABLE ` + s + `.app_refs (key text PRIMARY KEY)`)
	exec(`INSERT INTO `+s+`.gc_sources (schema_name, table_name, column_name) VALUES ($1, 'app_refs', 'key')`, db.Schema)
	exec(`INSERT INTO `+s+`.blobs (key, size, value, pin_owner, pin_expiry) VALUES ($1, 1, '\x00', 'a', $2)`, k, at.Add(24*time.Hour))

	// The lock holder: the staging call's source read waits on it.
	lock, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close(context.Background()) })
	ltx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ltx.Exec(ctx, `LOCK TABLE `+s+`.app_refs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	stager, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stager.Close(context.Background()) })
	var pid int
	if err := stager.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type res struct {
		staged int64
		err    error
	}
	done := make(chan res, 1)
	go func() {
		var r res
		r.err = stager.QueryRow(ctx, `SELECT staged FROM `+s+`.`+fn+`('', 100, $1, interval '1 hour', false)`, at).Scan(&r.staged)
		done <- r
	}()
	// Wait until the call waits on the lock: its first statement ran.
	for {
		var waiting bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 AND NOT granted)`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The handover, each step committed: owner b pins, then owner a
	// unpins. The key is pinned at every instant.
	exec(`INSERT INTO `+s+`.pins (key, owner, expiry) VALUES ($1, 'b', $2)`, k, at.Add(24*time.Hour))
	exec(`UPDATE `+s+`.blobs SET pin_owner = NULL, pin_expiry = NULL WHERE key = $1`, k)
	if err := ltx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	var inWindow bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM `+s+`.gc_window WHERE key = $1)`, k).Scan(&inWindow); err != nil {
		t.Fatal(err)
	}
	if r.staged != 0 || inWindow {
		t.Errorf("%s staged %d (in window: %v) a key pinned at every instant of the call", fn, r.staged, inWindow)
	}
	// Whatever was staged, the arbitration past the grace keeps it.
	lease, ok, err := e.GC().AcquireSweep(ctx, "review")
	if err != nil || !ok {
		t.Fatalf("AcquireSweep = %v, %v", ok, err)
	}
	t.Cleanup(func() { lease.Release(context.Background()) })
	bk, err := blob.ParseKey(k)
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.GC().Arbitrate(ctx, gc.ArbitrateParams{Keys: []blob.Key{bk}, Now: at.Add(2 * time.Hour), Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 || v[0].Outcome != blob.Protected {
		t.Errorf("arbitration past the grace: %+v, want Protected", v)
	}
}
