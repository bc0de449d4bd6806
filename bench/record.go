package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/record"
)

const (
	// recordPayload is the size of a checkpoint in the save scenarios.
	recordPayload = 256
	// drainItems is how many records or jobs a drain scenario starts with.
	drainItems = 20_000
	// claimBatch is how many items one ClaimNext or River fetch takes, and
	// each River client's worker count.
	claimBatch = 10
	benchGroup = "bench"
)

// recordPostgres compares, on one database in one run:
//
//   - CAS saves: stead's Save of a record the caller holds (a checkpoint)
//     against a raw pgx conditional UPDATE ... WHERE id = $1 AND version =
//     $2 of the same table (stead's, with its indexes and fillfactor),
//     setting the payload, version and updated_at. Each caller owns one
//     record: no contention, every save succeeds.
//   - The same-SQL save: a raw pgx loop issuing the statement stead sends
//     for a lone checkpoint (engine/postgres sqlRecordUpdateUnclaimable), so that stead's
//     save against it is what stead's code costs, and it against the raw
//     CAS save what stead's statement costs.
//   - Claiming: ClaimNext(claimBatch) against River's fetch query
//     (riverdriver JobGetAvailable, MaxToLock claimBatch), each draining
//     drainItems pre-inserted records or jobs, items/s.
//   - Working: the worker a user would write: ClaimNext(claimBatch), work
//     the records concurrently (a goroutine each, as River's workers run
//     jobs), then SaveAll marking them Completed in one round trip,
//     against River clients (one per caller, claimBatch no-op workers
//     each, poll-only, 1ms fetch cooldown and poll interval) draining
//     drainItems jobs, counted as River reports them completed. Both
//     commit durably (synchronous_commit as the server has it).
func recordPostgres() []scenario {
	return []scenario{
		{group: "record-pg", name: "raw cas save", setup: rawCASSave},
		{group: "record-pg", name: "raw same-SQL save", base: "raw cas save", setup: rawSameSQLSave},
		{group: "record-pg", name: "stead save", base: "raw cas save", setup: steadSave},
		{group: "record-pg", name: "river fetch (items/s)", drain: riverFetch},
		{group: "record-pg", name: "stead claimnext (items/s)", base: "river fetch (items/s)", drain: steadClaimNext},
		{group: "record-pg", name: "river work (items/s)", drain: riverWork},
		{group: "record-pg", name: "stead claim+complete (items/s)", base: "river work (items/s)", drain: steadClaimComplete},
	}
}

// openRecordStore opens stead in a scratch schema with benchGroup
// registered.
func openRecordStore(ctx context.Context) (*stead.Store, string, func(), error) {
	st, schema, cleanup, err := openSteadPGSchema(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	if err := st.Records.RegisterGroup(ctx, benchGroup); err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return st, schema, cleanup, nil
}

// heldRecords creates one record per caller, each claimed by its caller.
func heldRecords(ctx context.Context, st *stead.Store, n int) ([]record.Record, error) {
	recs := make([]record.Record, n)
	for w := range recs {
		id := fmt.Sprintf("rec-%d", w)
		if _, err := st.Records.Save(ctx, record.Record{ID: id, Group: benchGroup, Status: record.Active}); err != nil {
			return nil, err
		}
		rec, err := st.Records.Claim(ctx, benchGroup, id, fmt.Sprintf("worker-%d", w), time.Hour)
		if err != nil {
			return nil, err
		}
		rec.Payload = make([]byte, recordPayload)
		recs[w] = rec
	}
	return recs, nil
}

// rawHeldRecords is heldRecords in a fresh stead schema, with a raw pool
// over the same database and a cleanup closing both.
func rawHeldRecords(ctx context.Context, n int) ([]record.Record, *pgxpool.Pool, string, func(), error) {
	st, schema, cleanup, err := openRecordStore(ctx)
	if err != nil {
		return nil, nil, "", nil, err
	}
	recs, err := heldRecords(ctx, st, n)
	pool, perr := rawPool(ctx, "")
	if err = errors.Join(err, perr); err != nil {
		if pool != nil {
			pool.Close()
		}
		cleanup()
		return nil, nil, "", nil, err
	}
	return recs, pool, schema, func() { pool.Close(); cleanup() }, nil
}

func rawCASSave(ctx context.Context, n int) (func(context.Context, int, int) error, func(), error) {
	recs, pool, schema, cleanup, err := rawHeldRecords(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	update := "UPDATE " + pgx.Identifier{schema, "records"}.Sanitize() +
		" SET payload = $3, version = version + 1, updated_at = now() WHERE id = $1 AND version = $2 RETURNING version"
	return func(ctx context.Context, w, i int) error {
		rec := &recs[w]
		rec.Payload[0] = byte(i)
		return pool.QueryRow(ctx, update, rec.ID, rec.Version, rec.Payload).Scan(&rec.Version)
	}, cleanup, nil
}

// sameSQLSave is the statement stead sends for a lone checkpoint, a save
// that keeps its lease (engine/postgres sqlRecordUpdateUnclaimable).
const sameSQLSave = `UPDATE %[1]s.records AS r
SET tenant_id = $4, status = $5, parked = $9, payload = $10, version = r.version + 1,
	updated_at = coalesce($11::timestamptz, now()),
	lease_owner = $6, lease_expiry = CASE WHEN $6 = '' THEN $8 ELSE r.lease_expiry END
WHERE r.id = $1 AND r.grp = $2 AND r.version = $3 AND ($6 = '' OR (r.lease_owner = $6 AND r.lease_incarnation = $7))
	AND ($9 OR r.lease_expiry > coalesce($11::timestamptz, now()))
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at`

func rawSameSQLSave(ctx context.Context, n int) (func(context.Context, int, int) error, func(), error) {
	recs, pool, schema, cleanup, err := rawHeldRecords(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	sch := pgx.Identifier{schema}.Sanitize()
	var tenant int64
	if err := pool.QueryRow(ctx, "SELECT id FROM "+sch+".record_tenants WHERE grp = $1 AND name IS NULL", benchGroup).Scan(&tenant); err != nil {
		cleanup()
		return nil, nil, err
	}
	update := fmt.Sprintf(sameSQLSave, sch)
	return func(ctx context.Context, w, i int) error {
		rec := &recs[w]
		rec.Payload[0] = byte(i)
		var incarnation int64
		var expiry, updated time.Time
		return pool.QueryRow(ctx, update, rec.ID, rec.Group, rec.Version, tenant, string(rec.Status),
			rec.Lease.Owner, rec.Lease.Incarnation, rec.Lease.Expiry, false, rec.Payload, nil,
		).Scan(&rec.Version, &incarnation, &expiry, &updated)
	}, cleanup, nil
}

func steadSave(ctx context.Context, n int) (func(context.Context, int, int) error, func(), error) {
	st, _, cleanup, err := openRecordStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	recs, err := heldRecords(ctx, st, n)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return func(ctx context.Context, w, i int) error {
		recs[w].Payload[0] = byte(i)
		saved, err := st.Records.Save(ctx, recs[w])
		recs[w] = saved
		return err
	}, cleanup, nil
}

// fillRecords inserts drainItems active records into benchGroup with one
// statement.
func fillRecords(ctx context.Context, st *stead.Store, schema string) error {
	// The first save creates the group's default tenant.
	if _, err := st.Records.Save(ctx, record.Record{ID: "seed", Group: benchGroup, Status: record.Completed}); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	recs, tenants := pgx.Identifier{schema, "records"}.Sanitize(), pgx.Identifier{schema, "record_tenants"}.Sanitize()
	_, err = conn.Exec(ctx, "INSERT INTO "+recs+` (id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
		SELECT 'item-' || lpad(i::text, 8, '0'), $1, t.id, 'active', false, 1, '', 0, now(), now(), '\x00'
		FROM `+tenants+" t, generate_series(1, $2) i WHERE t.grp = $1 AND t.name IS NULL", benchGroup, drainItems)
	if err == nil {
		_, err = conn.Exec(ctx, "ANALYZE "+recs)
	}
	return err
}

// recordChannel is the NOTIFY channel of stead's records in schema, as
// engine/postgres derives it (records.init with Engine.lockKey).
func recordChannel(schema string) string {
	h := fnv.New64a()
	h.Write([]byte("stead:records:" + schema))
	return fmt.Sprintf("stead_records_%016x", h.Sum64())
}

// notifyCounter counts the notifications on a channel, on a connection of
// its own.
type notifyCounter struct {
	conn    *pgx.Conn
	channel string
	n       int
}

func listenNotifies(ctx context.Context, channel string) (*notifyCounter, error) {
	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return &notifyCounter{conn: conn, channel: channel}, nil
}

// count returns how many notifications were sent so far, and closes the
// connection. It notifies a sentinel and reads up to it: notifications are
// delivered in commit order.
func (c *notifyCounter) count(ctx context.Context) (int, error) {
	defer c.conn.Close(ctx)
	const sentinel = "bench sentinel"
	if _, err := c.conn.Exec(ctx, "SELECT pg_notify($1, $2)", c.channel, sentinel); err != nil {
		return 0, err
	}
	for {
		n, err := c.conn.WaitForNotification(ctx)
		if err != nil {
			return 0, err
		}
		if n.Payload == sentinel {
			return c.n, nil
		}
		c.n++
	}
}

// steadDrain drains the records fillRecords inserted, completing them if
// complete; then it reports on stderr how many notifications the
// completions sent per completed record.
func steadDrain(ctx context.Context, complete bool) (func(context.Context, int, int) (int, error), func(), error) {
	st, schema, cleanup, err := openRecordStore(ctx)
	if err == nil {
		if err = fillRecords(ctx, st, schema); err != nil {
			cleanup()
		}
	}
	var notifies *notifyCounter
	if err == nil && complete {
		if notifies, err = listenNotifies(ctx, recordChannel(schema)); err != nil {
			cleanup()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	var completed atomic.Int64
	if complete {
		steadCleanup := cleanup
		cleanup = func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := notifies.count(ctx)
			if err != nil {
				fmt.Fprintf(os.Stderr, "record-pg/stead claim+complete: counting notifications: %v\n", err)
			} else {
				done := completed.Load()
				fmt.Fprintf(os.Stderr, "record-pg/stead claim+complete: %d notifications for %d completed records (%.3f per record)\n",
					n, done, float64(n)/float64(max(done, 1)))
			}
			steadCleanup()
		}
	}
	return func(ctx context.Context, w, i int) (int, error) {
		recs, err := st.Records.ClaimNext(ctx, benchGroup, fmt.Sprintf("worker-%d", w), time.Hour, claimBatch)
		if !complete || err != nil || len(recs) == 0 {
			return len(recs), err
		}
		var wg sync.WaitGroup
		for j := range recs {
			wg.Go(func() { // the work: none, as River's noopWorker
				recs[j].Status = record.Completed
				recs[j].Lease.Owner = ""
			})
		}
		wg.Wait()
		for _, res := range st.Records.SaveAll(ctx, recs) {
			if res.Err != nil {
				return len(recs), res.Err
			}
		}
		completed.Add(int64(len(recs)))
		return len(recs), nil
	}, cleanup, nil
}

func steadClaimNext(ctx context.Context, _ int) (func(context.Context, int, int) (int, error), func(), error) {
	return steadDrain(ctx, false)
}

func steadClaimComplete(ctx context.Context, _ int) (func(context.Context, int, int) (int, error), func(), error) {
	return steadDrain(ctx, true)
}

// benchArgs is the River job of the drain scenarios.
type benchArgs struct{}

func (benchArgs) Kind() string { return "bench" }

type noopWorker struct {
	river.WorkerDefaults[benchArgs]
}

func (noopWorker) Work(context.Context, *river.Job[benchArgs]) error { return nil }

// riverQueue migrates River into a scratch schema and inserts drainItems
// jobs there.
func riverQueue(ctx context.Context) (*pgxpool.Pool, string, func(), error) {
	schema, drop, err := scratchSchema(ctx, "river")
	if err != nil {
		return nil, "", nil, err
	}
	pool, err := rawPool(ctx, "")
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	cleanup := func() { pool.Close(); drop() }
	driver := riverpgxv5.New(pool)
	err = func() error {
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			return err
		}
		migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema})
		if err != nil {
			return err
		}
		if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
			return err
		}
		inserter, err := river.NewClient(driver, &river.Config{Schema: schema})
		if err != nil {
			return err
		}
		jobs := make([]river.InsertManyParams, drainItems)
		for i := range jobs {
			jobs[i].Args = benchArgs{}
		}
		if _, err := inserter.InsertManyFast(ctx, jobs); err != nil {
			return err
		}
		_, err = pool.Exec(ctx, "ANALYZE "+schema+".river_job")
		return err
	}()
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	return pool, schema, cleanup, nil
}

func riverFetch(ctx context.Context, _ int) (func(context.Context, int, int) (int, error), func(), error) {
	pool, schema, cleanup, err := riverQueue(ctx)
	if err != nil {
		return nil, nil, err
	}
	exec := riverpgxv5.New(pool).GetExecutor()
	return func(ctx context.Context, w, i int) (int, error) {
		res, err := exec.JobGetAvailable(ctx, &riverdriver.JobGetAvailableParams{
			ClientID: fmt.Sprintf("worker-%d", w), MaxAttemptedBy: 100, MaxToLock: claimBatch,
			Queue: river.QueueDefault, Schema: schema,
		})
		if err != nil {
			return 0, err
		}
		return len(res.Jobs), nil
	}, cleanup, nil
}

func riverWork(ctx context.Context, n int) (func(context.Context, int, int) (int, error), func(), error) {
	pool, schema, cleanup, err := riverQueue(ctx)
	if err != nil {
		return nil, nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	clients := make([]*river.Client[pgx.Tx], n)
	events := make([]<-chan *river.Event, n)
	for w := range clients {
		c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			Schema:            schema,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: claimBatch}},
			Workers:           workers,
			FetchCooldown:     time.Millisecond,
			FetchPollInterval: time.Millisecond,
			PollOnly:          true,
			Logger:            slog.New(slog.DiscardHandler),
		})
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		clients[w] = c
		events[w], _ = c.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: drainItems})
	}
	var completed atomic.Int64
	allDone := make(chan struct{})
	var once sync.Once
	stop := func() {
		for _, c := range clients {
			c.Stop(context.Background())
		}
		cleanup()
	}
	return func(ctx context.Context, w, i int) (int, error) {
		if i == 0 {
			// The clients run until cleanup stops them, not until ctx ends.
			if err := clients[w].Start(context.WithoutCancel(ctx)); err != nil {
				return 0, err
			}
		}
		select {
		case <-events[w]:
			if completed.Add(1) == drainItems {
				once.Do(func() { close(allDone) })
			}
			return 1, nil
		case <-allDone:
			return 0, nil
		case <-ctx.Done():
			return 0, nil
		}
	}, stop, nil
}
