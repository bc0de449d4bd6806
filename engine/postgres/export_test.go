package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
)

// LockChannel returns the channel e announces lock releases on.
func LockChannel(e *Engine) string { return e.locks.channel }

// RecordChannel returns the channel e's record saves notify.
func RecordChannel(e *Engine) string { return e.records.channel }

// ListenQuery returns the statement e's listener runs; pg_stat_activity
// shows it as the listening backend's query.
func ListenQuery(e *Engine) string { return e.listen.query }

// RecordSQL returns the engine's claimable listing, ClaimNext, Probe and
// leased listing statements, for tests to explain.
func RecordSQL(e *Engine) (list, claimNext, probe, leased string) {
	return e.sql(sqlRecordList), e.sql(sqlRecordClaimNext), e.sql(sqlRecordProbe), e.sql(sqlRecordListLeased)
}

// LockListSQL returns the engine's held-locks listing, for tests to
// explain.
func LockListSQL(e *Engine) string { return e.sql(sqlLockList) }

// SetNaivePut makes e's puts use the known-unsafe statement (ON CONFLICT DO
// NOTHING beside the pin), so tests can prove they see the race it loses.
func SetNaivePut(e *Engine, on bool) { e.blobs.naive.Store(on) }

// SetBatchConditionalPutSets makes e's PutSets with conditions share group
// commits as unconditional ones do, so tests can see a refusal in a batch
// fail only its own PutSet.
func SetBatchConditionalPutSets(e *Engine, on bool) { e.refs.batchAll.Store(on) }

// SetNaiveArbitration makes e's sweeps arbitrate with the known-unsafe
// one-statement DELETE … WHERE NOT EXISTS (pins), which waits inside (after
// its snapshot is taken) for a shared hold of the advisory lock
// NaiveArbitrationLock(e).
func SetNaiveArbitration(e *Engine) { e.gc.naiveArbitration.Store(true) }

// NaiveArbitrationLock returns the advisory lock key the naive arbitration
// waits for.
func NaiveArbitrationLock(e *Engine) int64 { return e.gc.naiveLock() }

// SweepLockKey returns the advisory lock key of e's sweep lease.
func SweepLockKey(e *Engine) int64 { return e.lockKey("sweep") }

// SetBeforeDelete makes e's arbitrations run hook with the keys they are
// about to delete between their checks and their delete, or with all
// their keys before the naive arbitration's statement (nil: nothing).
func SetBeforeDelete(e *Engine, hook func([]blob.Key)) {
	if hook == nil {
		e.gc.beforeDelete.Store(nil)
		return
	}
	e.gc.beforeDelete.Store(&hook)
}

// SetProveEvery sets how often e's listener proves its connection alive;
// call it before anything watches.
func SetProveEvery(e *Engine, d time.Duration) { e.listen.proveEvery = d }

// SetWantFor sets how long e's record waiters mark their group wanted;
// call it before anything watches.
func SetWantFor(e *Engine, d time.Duration) { e.records.wantFor = d }

// RecordWantSQL returns the statement e's record waiters mark their group
// wanted with: $1 group, $2 the mark's length, $3 the length left that
// needs no renewal.
func RecordWantSQL(e *Engine) string { return e.sql(sqlRecordWant) }

// SetSweepIdle sets how long the server keeps e's sweep lease session
// once it idles; call it before the first sweep.
func SetSweepIdle(e *Engine, d time.Duration) { e.gc.idle = d }

// StopLeaseKeepAlive stops the probes that keep a held session lease's
// session from idling, as when its process is stopped.
func StopLeaseKeepAlive(l gc.Lease) { l.(*sessionLease).stopKeepAlive() }

// InstanceLockKey returns the advisory lock key of e's claim of id.
func InstanceLockKey(e *Engine, id string) int64 {
	sum := sha256.Sum256([]byte(id))
	return e.lockKey("instance:" + hex.EncodeToString(sum[:]))
}

// SetDropCrash makes e's deletions of objects after a commit do nothing
// (on), as a process killed between the two.
func SetDropCrash(e *Engine, on bool) { e.tier.dropCrash.Store(&on) }

// MigrateTo applies e's pending migrations up to version only, for tests
// that seed a schema as an older release left it.
func MigrateTo(ctx context.Context, e *Engine, version int) error {
	for {
		current, _, err := e.SchemaVersion(ctx)
		if err != nil || current >= version {
			return err
		}
		if _, err := e.migrateOne(ctx); err != nil {
			return err
		}
	}
}

// InterpretError is the engine's error policy, for tests that provoke a
// driver error on a connection of their own.
var InterpretError = interpretError

// SetBeforeFinish makes e's WriteValue run hook once an object is
// written, before its chunk is finished (nil: nothing).
func SetBeforeFinish(e *Engine, hook func()) {
	if hook == nil {
		e.tier.beforeFinish.Store(nil)
		return
	}
	e.tier.beforeFinish.Store(&hook)
}

// Statements returns every statement e runs, rendered for its schema, by
// name.
func Statements(e *Engine) map[string]string {
	out := make(map[string]string, len(statements))
	for _, s := range statements {
		out[s.name] = e.sql(s)
	}
	return out
}

// SweepSessionSetting reads a setting on e's sweep lease connection, ""
// when e has none open.
func SweepSessionSetting(ctx context.Context, e *Engine, name string) (string, error) {
	e.gc.sweepMu.Lock()
	defer e.gc.sweepMu.Unlock()
	if e.gc.sweep == nil {
		return "", nil
	}
	var v string
	err := e.gc.sweep.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
