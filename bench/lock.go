package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	_ "modernc.org/sqlite"
)

// Lock scenarios measure TryLock+Release pairs, each caller on a name of
// its own (uncontended), against raw loops issuing the engines' own SQL.
// Grants are durable everywhere: synchronous_commit is the server's (on);
// SQLite is in WAL with synchronous=NORMAL, stead's default.
//
// cirello.io/pglock, the peer library, is not measured: the module proxy
// serves it no longer (403). pg_try_advisory_lock is the reference for
// what durability, TTLs and tokens cost: a session lock, held in memory,
// gone with the connection.

const lockTTL = 30 * time.Second

func lockPostgres() []scenario {
	return []scenario{
		{group: "lock-pg", name: "raw grant/release", setup: rawPGLock},
		{group: "lock-pg", name: "raw advisory lock", base: "raw grant/release", setup: rawPGAdvisory},
		{group: "lock-pg", name: "stead TryLock+Release", base: "raw grant/release", setup: steadLock(openSteadPG)},
	}
}

func lockSQLite() []scenario {
	return []scenario{
		{group: "lock-sqlite", name: "raw grant/release", setup: rawSQLiteLock},
		{group: "lock-sqlite", name: "stead TryLock+Release", base: "raw grant/release", setup: steadLock(openSteadSQLite)},
	}
}

// lockNames returns one lock name per caller.
func lockNames(n int) []string {
	names := make([]string, n)
	for w := range names {
		names[w] = fmt.Sprintf("bench lock %d", w)
	}
	return names
}

// The PostgreSQL engine's table and statements (engine/postgres), for a
// table named %[1]s.
const (
	pgLockTableDDL = `CREATE TABLE %[1]s (
    name         text COLLATE "C" PRIMARY KEY,
    owner        text COLLATE "C",
    token        bigint NOT NULL,
    expiry       timestamptz,
    wanted_until timestamptz
) WITH (fillfactor = 50)`
	pgAcquire = `WITH g AS (
		INSERT INTO %[1]s AS l (name, owner, token, expiry)
		VALUES ($1, $2, 1, coalesce($3::timestamptz, now()) + $4::interval)
		ON CONFLICT (name) DO UPDATE SET
			owner        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) THEN excluded.owner ELSE l.owner END,
			token        = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) THEN l.token + 1 ELSE l.token END,
			expiry       = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) THEN excluded.expiry ELSE l.expiry END,
			wanted_until = CASE WHEN (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) OR l.owner = excluded.owner THEN l.wanted_until
				ELSE greatest(l.wanted_until, l.expiry) END
		WHERE (l.owner IS NULL OR l.expiry <= coalesce($3::timestamptz, now())) OR l.owner = excluded.owner OR $5::boolean
		RETURNING l.owner = $2, l.owner, l.token, l.expiry)
	SELECT *, coalesce($3::timestamptz, now()) FROM g
	UNION ALL
	SELECT false, owner, token, expiry, coalesce($3::timestamptz, now()) FROM %[1]s
	WHERE name = $1 AND owner IS NOT NULL AND NOT EXISTS (SELECT FROM g)`
	pgRelease = `UPDATE %[1]s SET owner = NULL, expiry = NULL
		WHERE name = $1 AND owner = $2 AND token = $3
		RETURNING CASE WHEN wanted_until > now() THEN pg_notify($4, name) END`
)

var (
	errNotGranted  = errors.New("an uncontended lock was not granted")
	errNotReleased = errors.New("a granted lock was not released")
)

// released turns a release's outcome into an error unless it released.
func released(ok bool, err error) error {
	if err == nil && !ok {
		return errNotReleased
	}
	return err
}

func rawPGLock(ctx context.Context, n int) (opFunc, func(), error) {
	schema, drop, err := scratchSchema(ctx, "rawlock")
	if err != nil {
		return nil, nil, err
	}
	pool, err := rawPool(ctx, "")
	table := schema + ".locks"
	if err == nil {
		_, err = pool.Exec(ctx, "CREATE SCHEMA "+schema)
	}
	if err == nil {
		_, err = pool.Exec(ctx, fmt.Sprintf(pgLockTableDDL, table))
	}
	if err != nil {
		drop()
		return nil, nil, err
	}
	names := lockNames(n)
	acquire, release := fmt.Sprintf(pgAcquire, table), fmt.Sprintf(pgRelease, table)
	return func(ctx context.Context, w, _ int) error {
		var granted bool
		var owner string
		var token int64
		var expiry, now time.Time
		err := pool.QueryRow(ctx, acquire, names[w], "bench", nil, pgtype.Interval{Microseconds: lockTTL.Microseconds(), Valid: true}, false).Scan(&granted, &owner, &token, &expiry, &now)
		if err != nil {
			return err
		}
		if !granted {
			return errNotGranted
		}
		tag, err := pool.Exec(ctx, release, names[w], "bench", token, "bench_locks")
		return released(tag.RowsAffected() == 1, err)
	}, func() { pool.Close(); drop() }, nil
}

// rawPGAdvisory takes and releases a session advisory lock on one held
// connection: no row, no TTL, no token, nothing durable.
func rawPGAdvisory(ctx context.Context, n int) (opFunc, func(), error) {
	pool, err := rawPool(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	keys := make([]int64, n)
	for w, name := range lockNames(n) {
		h := fnv.New64a()
		h.Write([]byte(fmt.Sprintf("bench %d %s", os.Getpid(), name)))
		keys[w] = int64(h.Sum64())
	}
	return func(ctx context.Context, w, _ int) error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", keys[w]).Scan(&ok); err != nil || !ok {
			return errors.Join(err, errNotGranted)
		}
		err = conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", keys[w]).Scan(&ok)
		return released(ok, err)
	}, pool.Close, nil
}

// The SQLite engine's table and statements (engine/sqlite).
const (
	sqliteLockTableDDL = `CREATE TABLE locks (
    name   TEXT    NOT NULL PRIMARY KEY,
    owner  TEXT,
    token  INTEGER NOT NULL,
    expiry INTEGER
) WITHOUT ROWID`
	sqliteAcquire = `INSERT INTO locks (name, owner, token, expiry) VALUES (?1, ?2, 1, ?3 + ?4)
		ON CONFLICT (name) DO UPDATE SET
			token  = CASE WHEN owner = excluded.owner AND expiry > ?3 THEN token ELSE token + 1 END,
			expiry = CASE WHEN owner = excluded.owner AND expiry > ?3 THEN expiry ELSE excluded.expiry END,
			owner  = excluded.owner
		WHERE owner IS NULL OR expiry <= ?3 OR owner = excluded.owner
		RETURNING token, expiry`
	sqliteRelease = "UPDATE locks SET owner = NULL, expiry = NULL WHERE name = ?1 AND owner = ?2 AND token = ?3"
)

// rawSQLiteLock runs the engine's statements on one writer connection, as
// the engine does, with the engine's pragmas.
func rawSQLiteLock(ctx context.Context, n int) (opFunc, func(), error) {
	db, _, cleanup, err := rawSQLite(sqliteLockTableDDL)
	if err != nil {
		return nil, nil, err
	}
	var acquire, release *sql.Stmt
	acquire, err = db.PrepareContext(ctx, sqliteAcquire)
	if err == nil {
		release, err = db.PrepareContext(ctx, sqliteRelease)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	names := lockNames(n)
	return func(ctx context.Context, w, _ int) error {
		var token, expiry int64
		now := time.Now().UnixMicro()
		if err := acquire.QueryRowContext(ctx, names[w], "bench", now, lockTTL.Microseconds()).Scan(&token, &expiry); err != nil {
			return err
		}
		res, err := release.ExecContext(ctx, names[w], "bench", token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		return released(n == 1, err)
	}, cleanup, nil
}

func steadLock(open opener) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		st, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		names := lockNames(n)
		return func(ctx context.Context, w, _ int) error {
			lk, ok, err := st.Locks.TryLock(ctx, names[w], "bench", lockTTL)
			if err != nil || !ok {
				return errors.Join(err, errNotGranted)
			}
			return released(lk.Release(ctx))
		}, cleanup, nil
	}
}
