package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/steadkit/stead/gc"
)

var gcSweepN = flag.Int("gcsweep", 0, "with -only gc-sweep: the number of blobs the sweep benchmark stores (10% unreferenced)")

// pinsTableDDL is stead's pins table, so the same-SQL raw loop does the
// same work.
const pinsTableDDL = `CREATE TABLE %[1]s.pins (
    key    text COLLATE "C" NOT NULL,
    owner  text COLLATE "C" NOT NULL CHECK (owner <> ''),
    expiry timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
) WITH (fillfactor = 70);
CREATE INDEX pins_expiry ON %[1]s.pins (expiry)`

// sameSQLPut is the statement stead sends for a lone put (engine/postgres
// sqlPut), with one-element arrays.
const sameSQLPut = `WITH b AS (
	INSERT INTO %[1]s.blobs AS t (key, size, value)
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING 1
)
INSERT INTO %[1]s.pins AS p (key, owner, expiry)
SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
FROM unnest($4::text[], $5::text[], $6::bigint[], $7::timestamptz[]) AS u(k, o, d, n)
WHERE (SELECT count(*) FROM b) >= 0
ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)`

func gcPostgres() []scenario {
	return []scenario{
		{group: "gc-pg", name: "raw put", setup: rawPGPut("")},
		{group: "gc-pg", name: "raw same-SQL put", base: "raw put", setup: rawSameSQLPut},
		{group: "gc-pg", name: "stead put", base: "raw same-SQL put", setup: steadPut(openSteadPG)},
		{group: "gc-pg", name: "stead put, sweeping", base: "stead put", setup: steadPutSweeping},
		{group: "gc-pg", name: "raw exists", setup: rawExists},
		{group: "gc-pg", name: "stead hot re-put", base: "raw exists", setup: steadHotPut},
		{group: "gc-sweep", name: "sweep", setup: sweepBench},
	}
}

func rawSameSQLPut(ctx context.Context, n int) (opFunc, func(), error) {
	pool, table, cleanup, err := rawBlobTable(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	schema := table[:len(table)-len(".blobs")]
	if _, err := pool.Exec(ctx, fmt.Sprintf(pinsTableDDL, schema)); err != nil {
		cleanup()
		return nil, nil, err
	}
	stmt := fmt.Sprintf(sameSQLPut, schema)
	vals := newValues(n)
	ttl := []int64{time.Minute.Microseconds()}
	owner := []string{"bench"}
	nows := []*time.Time{nil}
	return func(ctx context.Context, w, i int) error {
		v := vals.next(w, i)
		k := []string{keyText(v)}
		_, err := pool.Exec(ctx, stmt, k, []int64{int64(len(v))}, [][]byte{v}, k, owner, ttl, nows)
		return err
	}, cleanup, nil
}

// steadPutSweeping puts while a sweep runs again and again, but only while
// its own rounds run (rounds of a group interleave on shared setups).
func steadPutSweeping(ctx context.Context, n int) (opFunc, func(), error) {
	st, cleanup, err := openSteadPG(ctx)
	if err != nil {
		return nil, nil, err
	}
	var lastOp atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if time.Since(time.Unix(0, lastOp.Load())) > 20*time.Millisecond {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if _, err := st.GC.Sweep(ctx, gc.SweepOptions{}); err != nil {
				fmt.Fprintln(os.Stderr, "sweep:", err)
			}
		}
	})
	vals := newValues(n)
	readers := make([]bytes.Reader, n)
	return func(ctx context.Context, w, i int) error {
			lastOp.Store(time.Now().UnixNano())
			readers[w].Reset(vals.next(w, i))
			_, err := st.Blobs.Put(ctx, &readers[w])
			return err
		}, func() {
			close(stop)
			wg.Wait()
			cleanup()
		}, nil
}

func rawExists(ctx context.Context, n int) (opFunc, func(), error) {
	pool, table, cleanup, err := rawBlobTable(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	keys, err := preloadRaw(ctx, pool, table)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	query := "SELECT EXISTS (SELECT 1 FROM " + table + " WHERE key = $1)"
	return func(ctx context.Context, w, i int) error {
		var ok bool
		return pool.QueryRow(ctx, query, keys[(w*7919+i)%len(keys)]).Scan(&ok)
	}, cleanup, nil
}

// steadHotPut re-puts a small set of values per caller: after the first
// round, every put finds this store's pin with more than half its TTL left.
func steadHotPut(ctx context.Context, n int) (opFunc, func(), error) {
	st, cleanup, err := openSteadPG(ctx)
	if err != nil {
		return nil, nil, err
	}
	const hot = 16
	vals := make([][][]byte, n)
	for w := range vals {
		vs := newValues(1)
		for i := range hot {
			vals[w] = append(vals[w], bytes.Clone(vs.next(0, w*hot+i)))
		}
	}
	readers := make([]bytes.Reader, n)
	return func(ctx context.Context, w, i int) error {
		readers[w].Reset(vals[w][i%hot])
		_, err := st.Blobs.Put(ctx, &readers[w])
		return err
	}, cleanup, nil
}

// sweepBench stores -gcsweep blobs (10% unreferenced by one SQL source,
// none pinned) and times a staging sweep, then a deleting one; its ops/s is
// the number of blobs over the two sweeps' time. It prints the phases.
func sweepBench(ctx context.Context, n int) (opFunc, func(), error) {
	if *gcSweepN <= 0 {
		return nil, nil, fmt.Errorf("gc-sweep needs -gcsweep N")
	}
	st, schema, cleanup, err := openSteadPGSchema(ctx)
	if err != nil {
		return nil, nil, err
	}
	pool, err := rawPool(ctx, "")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	stmts := []string{
		fmt.Sprintf(`INSERT INTO %[1]s.blobs (key, size, value)
			SELECT 'sha256:' || encode(sha256(i::text::bytea), 'hex'), 8, int8send(i) FROM generate_series(1, %[2]d) i`, schema, *gcSweepN),
		fmt.Sprintf(`CREATE TABLE %[1]s.refs (key text PRIMARY KEY)`, schema),
		fmt.Sprintf(`INSERT INTO %[1]s.refs SELECT 'sha256:' || encode(sha256(i::text::bytea), 'hex') FROM generate_series(1, %[2]d) i WHERE i %% 10 <> 0`, schema, *gcSweepN),
		fmt.Sprintf(`ANALYZE %[1]s.blobs; ANALYZE %[1]s.refs`, schema),
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			pool.Close()
			cleanup()
			return nil, nil, err
		}
	}
	if err := st.GC.RegisterSource(ctx, gc.Source{Schema: schema, Table: "refs", Column: "key"}); err != nil {
		pool.Close()
		cleanup()
		return nil, nil, err
	}
	var done atomic.Bool
	return func(ctx context.Context, w, i int) error {
			if w != 0 || done.Swap(true) {
				time.Sleep(time.Millisecond)
				return nil
			}
			t0 := time.Now()
			stage, err := st.GC.Sweep(ctx, gc.SweepOptions{})
			if err != nil {
				return err
			}
			if _, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.gc_window SET visible_after = now() - interval '1 second'`, schema)); err != nil {
				return err
			}
			t1 := time.Now()
			del, err := st.GC.Sweep(ctx, gc.SweepOptions{})
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "sweep of %d blobs: stage %d in %v (%.0f blobs/s scanned); arbitrate %d, delete %d in %v (%.0f keys/s)\n",
				*gcSweepN, stage.Staged, t1.Sub(t0).Round(time.Millisecond), float64(*gcSweepN)/t1.Sub(t0).Seconds(),
				del.Taken, del.Deleted, time.Since(t1).Round(time.Millisecond), float64(del.Taken)/time.Since(t1).Seconds())
			return nil
		}, func() {
			pool.Close()
			cleanup()
		}, nil
}
