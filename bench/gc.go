package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
)

var (
	gcSweepN       = flag.Int("gcsweep", 0, "with -only gc-sweep: the number of blobs the sweep benchmark stores (10% unreferenced)")
	gcSweepChunked = flag.Int("gcsweep-chunked", 0, "with -only gc-sweep: how many of the unreferenced blobs are stored chunked, 3 MiB each")
	gcSweepEdges   = flag.Int("gcsweep-edges", 0, "with -only gc-sweep: how many blob references (edges) among the referenced blobs")
	gcSweepRefs    = flag.Int("gcsweep-refs", 0, "with -only gc-sweep: how many refs naming referenced blobs")
	gcSweepProf    = flag.String("gcsweep-cpuprofile", "", "with -only gc-sweep-sqlite: write a CPU profile of the deleting sweep alone to this file")
)

// pinsTableDDL is stead's pins table, so the same-SQL raw loop does the
// same work.
const pinsTableDDL = `CREATE TABLE %[1]s.pins (
    key    text COLLATE "C" NOT NULL,
    owner  text COLLATE "C" NOT NULL CHECK (owner <> ''),
    expiry timestamptz NOT NULL,
    PRIMARY KEY (key, owner)
) WITH (fillfactor = 70);
CREATE INDEX pins_expiry ON %[1]s.pins (expiry)`

// pinColumnsDDL adds the columns of the pin stead keeps in a blob's row.
const pinColumnsDDL = `ALTER TABLE %[1]s.blobs ADD COLUMN pin_owner text COLLATE "C" CHECK (pin_owner <> ''), ADD COLUMN pin_expiry timestamptz`

// sameSQLPut is the statement stead sends for a lone put (engine/postgres
// sqlPutOne).
const sameSQLPut = `WITH b AS (
	INSERT INTO %[1]s.blobs AS t (key, size, value, pin_owner, pin_expiry)
	VALUES ($1, $2, $3, $4, coalesce($6::timestamptz, now()) + $5::bigint * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING key
)
INSERT INTO %[1]s.pins AS p (key, owner, expiry)
SELECT $1, $4, coalesce($6::timestamptz, now()) + $5::bigint * interval '1 microsecond'
WHERE NOT EXISTS (SELECT FROM b)
ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)`

func gcPostgres() []scenario {
	return []scenario{
		{group: "gc-pg", name: "raw put", setup: rawPGPut("")},
		{group: "gc-pg", name: "raw same-SQL put", base: "raw put", setup: rawSameSQLPut},
		{group: "gc-pg", name: "stead put", base: "raw put", setup: steadPut(openSteadPG)},
		{group: "gc-pg", name: "stead put, sweeping", base: "stead put", setup: steadPutSweeping},
		{group: "gc-pg", name: "raw exists", setup: rawExists},
		{group: "gc-pg", name: "stead hot re-put", base: "raw exists", setup: steadHotPut},
		{group: "gc-sweep", name: "sweep", setup: sweepBench},
		{group: "gc-sweep-sqlite", name: "sweep", setup: sweepBenchSQLite},
	}
}

func rawSameSQLPut(ctx context.Context, n int) (opFunc, func(), error) {
	pool, table, cleanup, err := rawBlobTable(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	schema := table[:len(table)-len(".blobs")]
	for _, ddl := range []string{pinColumnsDDL, pinsTableDDL} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(ddl, schema)); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	stmt := fmt.Sprintf(sameSQLPut, schema)
	vals := newValues(n)
	ttl := time.Minute.Microseconds()
	var now *time.Time
	return func(ctx context.Context, w, i int) error {
		v := vals.next(w, i)
		_, err := pool.Exec(ctx, stmt, keyText(v), int64(len(v)), v, "bench", ttl, now)
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
			if _, err := st.GC.Sweep(ctx, gc.SweepOptions{AllUnreferenced: true}); err != nil {
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

// sweepBench stores -gcsweep blobs, 10% of them unreferenced by one SQL
// source and none pinned (-gcsweep-chunked of the unreferenced ones stored
// chunked, 3 MiB each), and times a staging sweep over the whole store,
// then a deleting one; its ops/s is the number of blobs over the two
// sweeps' time. It prints the phases, their rates and their longest steps
// (a staging range is one statement; an arbitration batch is one
// transaction of five).
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
	key := `'sha256:' || encode(sha256(i::text::bytea), 'hex')`
	stmts := []string{
		fmt.Sprintf(`INSERT INTO %[1]s.blobs (key, size, value)
			SELECT %[3]s, 8, int8send(i) FROM generate_series(1, %[2]d) i`, schema, *gcSweepN, key),
		fmt.Sprintf(`CREATE TABLE %[1]s.app_refs (key text PRIMARY KEY)`, schema),
		fmt.Sprintf(`INSERT INTO %[1]s.app_refs SELECT %[3]s FROM generate_series(1, %[2]d) i WHERE i %% 10 <> 0`, schema, *gcSweepN, key),
	}
	if *gcSweepChunked > 0 {
		// The first -gcsweep-chunked unreferenced blobs (i = 10, 20, …)
		// become 3 MiB values in three 1 MiB chunks, as a chunked put
		// stores them.
		stmts = append(stmts,
			fmt.Sprintf(`UPDATE %[1]s.blobs SET size = 3 << 20, value = '\x', chunks = ('x' || substr(key, 8, 15))::bit(60)::bigint
				WHERE key IN (SELECT %[3]s FROM generate_series(10, %[2]d * 10, 10) i)`, schema, *gcSweepChunked, key),
			fmt.Sprintf(`INSERT INTO %[1]s.blob_chunks (chunks, off, data)
				SELECT b.chunks, o.off, repeat(int8send(o.off + b.chunks), 131072)
				FROM %[1]s.blobs b, (VALUES (0), (1 << 20), (2 << 20)) AS o(off) WHERE b.chunks IS NOT NULL`, schema))
	}
	if *gcSweepEdges > 0 {
		// Edges between referenced blobs (i and i+1, neither a multiple of
		// 10), so they change nothing of what is garbage but the work.
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO %[1]s.blob_edges (parent, child)
			SELECT %[3]s, 'sha256:' || encode(sha256((i+1)::text::bytea), 'hex')
			FROM generate_series(1, %[2]d * 10 / 8) i WHERE i %% 10 NOT IN (0, 9) LIMIT %[2]d`, schema, *gcSweepEdges, key))
	}
	if *gcSweepRefs > 0 {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO %[1]s.refs (name, key, version)
			SELECT 'r/' || i, %[3]s, nextval('%[1]s.ref_versions')
			FROM generate_series(1, %[2]d * 10 / 9 + 1) i WHERE i %% 10 <> 0 LIMIT %[2]d`, schema, *gcSweepRefs, key))
	}
	for _, table := range []string{"blobs", "app_refs", "refs", "blob_chunks", "blob_edges"} {
		// One statement each: several in one string are one transaction,
		// where VACUUM cannot run.
		stmts = append(stmts, fmt.Sprintf(`VACUUM ANALYZE %s.%s`, schema, table))
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			pool.Close()
			cleanup()
			return nil, nil, err
		}
	}
	col := gc.New(st.Engine().GC(), gc.Options{StagePerSweep: *gcSweepN + 1})
	if err := col.RegisterSource(ctx, gc.Source{Schema: schema, Table: "app_refs", Column: "key"}); err != nil {
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
			stage, stageStep, err := timedSweep(ctx, col)
			if err != nil {
				return err
			}
			if _, err := pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.gc_window SET visible_after = now() - interval '1 second'`, schema)); err != nil {
				return err
			}
			t1 := time.Now()
			del, delStep, err := timedSweep(ctx, col)
			if err != nil {
				return err
			}
			t2 := time.Now()
			fmt.Fprintf(os.Stderr, "sweep of %d blobs (%d chunked, %d edges, %d refs): stage %d of %d covered in %v (%.0f keys/s covered; longest range %v); "+
				"arbitrate %d, delete %d (%d MiB) in %v (%.0f keys/s; longest batch %v)\n",
				*gcSweepN, *gcSweepChunked, *gcSweepEdges, *gcSweepRefs, stage.Staged, stage.Covered, t1.Sub(t0).Round(time.Millisecond), float64(stage.Covered)/t1.Sub(t0).Seconds(),
				stageStep.Round(time.Millisecond), del.Taken, del.Deleted, del.BytesFreed>>20, t2.Sub(t1).Round(time.Millisecond),
				float64(del.Taken)/t2.Sub(t1).Seconds(), delStep.Round(time.Millisecond))
			return nil
		}, func() {
			pool.Close()
			cleanup()
		}, nil
}

// timedSweep runs one sweep and returns its report and its longest step
// (the time between two progress reports).
func timedSweep(ctx context.Context, col *gc.Collector) (gc.Report, time.Duration, error) {
	last, longest := time.Now(), time.Duration(0)
	rep, err := col.Sweep(ctx, gc.SweepOptions{Progress: func(gc.Report) {
		now := time.Now()
		longest = max(longest, now.Sub(last))
		last = now
	}})
	return rep, longest, err
}

// sweepBenchSQLite is sweepBench on SQLite: -gcsweep small blobs written in
// one transaction, 10% of them unreferenced by a Go-function source. The
// deleting sweep's rate is given twice: of its arbitration alone, and of
// the whole sweep, which also stages a new pass over the blobs left.
func sweepBenchSQLite(ctx context.Context, n int) (opFunc, func(), error) {
	if *gcSweepN <= 0 {
		return nil, nil, fmt.Errorf("gc-sweep-sqlite needs -gcsweep N")
	}
	st, path, cleanup, err := openSteadSQLiteFile(ctx)
	if err != nil {
		return nil, nil, err
	}
	referenced := make(map[blob.Key]bool, *gcSweepN)
	err = func() error {
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		ins, err := tx.PrepareContext(ctx, `INSERT INTO blobs (key, size, value) VALUES (?, 8, ?)`)
		if err != nil {
			return err
		}
		for i := 1; i <= *gcSweepN; i++ {
			v := binary.BigEndian.AppendUint64(nil, uint64(i))
			k := blob.KeyOf(v)
			if i%10 != 0 {
				referenced[k] = true
			}
			if _, err := ins.ExecContext(ctx, k.String(), v); err != nil {
				return err
			}
		}
		return tx.Commit()
	}()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	var skew atomic.Int64 // the collector's clock runs ahead by this
	col := gc.New(st.Engine().GC(), gc.Options{StagePerSweep: *gcSweepN + 1, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	src := gc.Source{Name: "app", Referenced: func(_ context.Context, k blob.Key) (bool, error) { return referenced[k], nil }}
	if err := col.RegisterSource(ctx, src); err != nil {
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
		stage, stageStep, err := timedSweep(ctx, col)
		if err != nil {
			return err
		}
		skew.Store(int64(2 * gc.DefaultGrace)) // the grace passes: the staged keys are due
		if *gcSweepProf != "" {
			f, err := os.Create(*gcSweepProf)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := pprof.StartCPUProfile(f); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		t1 := time.Now()
		// The deleting sweep arbitrates, then stages a new pass (a grace
		// has passed): collected is when its last batch was decided.
		collected, longest := t1, time.Duration(0)
		del, err := col.Sweep(ctx, gc.SweepOptions{Progress: func(r gc.Report) {
			if r.Covered == 0 {
				now := time.Now()
				longest = max(longest, now.Sub(collected))
				collected = now
			}
		}})
		if err != nil {
			return err
		}
		t2 := time.Now()
		fmt.Fprintf(os.Stderr, "sqlite sweep of %d blobs: stage %d of %d covered in %v (longest step %v); arbitrate %d, delete %d in %v (%.0f keys/s; longest step %v), the sweep with its new staging pass of %d keys %v (%.0f keys/s)\n",
			*gcSweepN, stage.Staged, stage.Covered, t1.Sub(t0).Round(time.Millisecond), stageStep.Round(time.Millisecond),
			del.Taken, del.Deleted, collected.Sub(t1).Round(time.Millisecond), float64(del.Taken)/collected.Sub(t1).Seconds(), longest.Round(time.Millisecond),
			del.Covered, t2.Sub(t1).Round(time.Millisecond), float64(del.Taken)/t2.Sub(t1).Seconds())
		return nil
	}, cleanup, nil
}
