package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/record/check"
	"github.com/steadkit/stead/steaderr"
)

// records is the engine's record.Backend. Every operation is one statement
// (but a save into a tenant not yet cached, which resolves the tenant in
// its transaction, and a checkpoint that sqlRecordUpdateUnclaimable did
// not write): a write is conditional (a compare-and-swap), and when it
// matches no row the stored record is read back to say why (record/check).
// Concurrent saves share a statement and a commit (group commit, see
// docs/decisions/0014-record-seam-and-group-commit.md). A write that makes
// a record claimable at once calls pg_notify in the same statement while a
// waiter has marked the record's group wanted, so waiters learn of it on
// commit (docs/decisions/0020-record-notify-when-wanted.md).
type records struct {
	e       *Engine
	tenants sqlengine.TenantCache
	commit  *groupcommit.Committer[*saveReq]
	// channel is the NOTIFY channel of records made claimable, one per
	// schema; its payload is the group.
	channel string
	// wantFor is how long a waiter's mark on its group lasts; a watch
	// renews it, every wantFor/8, when less than wantFor/2 is left.
	wantFor time.Duration
	wantMu  sync.Mutex
	// wanted holds, per group, until when this engine knows the group's
	// mark lasts, on the local clock.
	wanted map[string]time.Time
	// closing ends when the engine closes, and with it every watch's
	// renewals.
	closing context.Context
	close   context.CancelFunc
}

// defaultWantFor is how long a waiter's mark on its group lasts.
const defaultWantFor = time.Minute

// Group commit bounds of saves.
const (
	saveFlushers      = 2
	maxBatchSaves     = 64
	maxBatchSaveBytes = 4 << 20
)

// The record statements. Each names its parameters; "now" is the
// caller's instant, or the database's now() when NULL. A write's notify
// column wakes the group's waiters when the row, as written, is claimable
// at the instant it was written and a waiter has marked the group wanted
// (sqlRecordWant): it then reads the group's mark with FOR KEY SHARE,
// which waits for a mark being written and returns the newest committed
// version of the row. pg_notify runs once per claimable row, but
// PostgreSQL delivers a notification with the same channel and payload
// once per transaction, so a statement notifies each group at most once.
var (
	sqlRecordRegisterGroup = declare("sqlRecordRegisterGroup", `INSERT INTO {schema}.record_groups (name) VALUES ($1) ON CONFLICT DO NOTHING`)
	sqlRecordGroupExists   = declare("sqlRecordGroupExists", `SELECT EXISTS (SELECT 1 FROM {schema}.record_groups WHERE name = $1)`)
	sqlRecordEnsureTenant  = declare("sqlRecordEnsureTenant", `INSERT INTO {schema}.record_tenants (grp, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`)
	sqlRecordTenantID      = declare("sqlRecordTenantID", `SELECT id FROM {schema}.record_tenants WHERE grp = $1 AND name IS NOT DISTINCT FROM $2::text`)

	// A create starts above every version a deleted record of its group
	// had, as its snapshot saw the group; sqlRecordCreateFloor, run next
	// in the same transaction, raises it should the id have been created
	// and deleted by others while this statement ran. @channel is the
	// NOTIFY channel.
	sqlRecordCreate = declare("sqlRecordCreate", `INSERT INTO {schema}.records AS r
	(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
SELECT @id::text, @grp::text, @tenant_id::bigint, @status::text, @parked::boolean,
	coalesce((SELECT g.deleted_version FROM {schema}.record_groups g WHERE g.name = @grp), 0) + 1,
	@lease_owner::text, @lease_incarnation::bigint, @lease_expiry::timestamptz, coalesce(@now::timestamptz, now()), @payload::bytea
ON CONFLICT (id) DO NOTHING
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
	CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
		CASE WHEN (SELECT g.wanted_until > now() FROM {schema}.record_groups g WHERE g.name = r.grp FOR KEY SHARE)
		THEN pg_notify(@channel, r.grp) END
	END`)

	// An update either keeps the stored grant (@lease_owner the stored
	// owner, @lease_incarnation its incarnation) or releases the lease
	// (@lease_owner empty, @lease_expiry the expiry to store); @version is
	// the stored version it expects.
	sqlRecordUpdate = declare("sqlRecordUpdate", `UPDATE {schema}.records AS r
SET tenant_id = @tenant_id, status = @status, parked = @parked, payload = @payload, version = r.version + 1,
	updated_at = coalesce(@now::timestamptz, now()),
	lease_owner = @lease_owner, lease_expiry = CASE WHEN @lease_owner = '' THEN @lease_expiry ELSE r.lease_expiry END
WHERE r.id = @id AND r.grp = @grp AND r.version = @version AND (@lease_owner = '' OR (r.lease_owner = @lease_owner AND r.lease_incarnation = @lease_incarnation))
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
	CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
		CASE WHEN (SELECT g.wanted_until > now() FROM {schema}.record_groups g WHERE g.name = r.grp FOR KEY SHARE)
		THEN pg_notify(@channel, r.grp) END
	END`)

	// sqlRecordUpdate for a save that parks the record or keeps its
	// lease, written only if the row as written is not claimable (parked,
	// or its kept lease has not lapsed), so without a notify column: a
	// checkpoint or a completion does not pay for the group row's check.
	sqlRecordUpdateUnclaimable = declare("sqlRecordUpdateUnclaimable", `UPDATE {schema}.records AS r
SET tenant_id = @tenant_id, status = @status, parked = @parked, payload = @payload, version = r.version + 1,
	updated_at = coalesce(@now::timestamptz, now()),
	lease_owner = @lease_owner, lease_expiry = CASE WHEN @lease_owner = '' THEN @lease_expiry ELSE r.lease_expiry END
WHERE r.id = @id AND r.grp = @grp AND r.version = @version AND (@lease_owner = '' OR (r.lease_owner = @lease_owner AND r.lease_incarnation = @lease_incarnation))
	AND (@parked OR r.lease_expiry > coalesce(@now::timestamptz, now()))
RETURNING r.version, r.lease_incarnation, r.lease_expiry, r.updated_at`)

	// A batch of updates, no id twice: sqlRecordUpdate's, one row of the
	// arrays each ($11, ats: NULL elements are the database's now()). It
	// returns the rows written. It first locks, in id order,
	// every row of the batch, so that two batches do not deadlock; should
	// they all the same, the statement, which then changed nothing, is run
	// again. A batch without creates runs it, not sqlRecordSaveMany,
	// whose creates and union cost every batch (docs/BENCHMARKS.md).
	sqlRecordUpdateMany = declare("sqlRecordUpdateMany", `WITH i AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[],
		$8::timestamptz[], $9::boolean[], $10::bytea[], $11::timestamptz[])
		AS i (id, grp, version, tenant_id, status, lease_owner, lease_incarnation, lease_expiry, parked, payload, at)
), locked AS (
	SELECT r.id FROM {schema}.records r JOIN i ON i.id = r.id ORDER BY r.id FOR UPDATE OF r
)
UPDATE {schema}.records AS r
SET tenant_id = i.tenant_id, status = i.status, parked = i.parked, payload = i.payload, version = r.version + 1,
	updated_at = coalesce(i.at, now()),
	lease_owner = i.lease_owner, lease_expiry = CASE WHEN i.lease_owner = '' THEN i.lease_expiry ELSE r.lease_expiry END
FROM i JOIN locked l ON l.id = i.id
WHERE r.id = i.id AND r.grp = i.grp AND r.version = i.version
	AND (i.lease_owner = '' OR (r.lease_owner = i.lease_owner AND r.lease_incarnation = i.lease_incarnation))
RETURNING r.id, r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
	CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
		CASE WHEN (SELECT g.wanted_until > now() FROM {schema}.record_groups g WHERE g.name = r.grp FOR KEY SHARE)
		THEN pg_notify($12, r.grp) END
	END`)

	// A batch of saves with creates, no id twice: sqlRecordUpdateMany's
	// updates and sqlRecordCreate's creates, with the same parameters. It
	// also locks the existing rows of the creates' ids (a create's
	// conflict check would otherwise wait on another batch updating it),
	// and creates insert in id order (a create waits on another's
	// uncommitted insert of its id).
	sqlRecordSaveMany = declare("sqlRecordSaveMany", `WITH i AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::bigint[],
		$8::timestamptz[], $9::boolean[], $10::bytea[], $11::timestamptz[])
		AS i (id, grp, version, tenant_id, status, lease_owner, lease_incarnation, lease_expiry, parked, payload, at)
), locked AS (
	SELECT r.id FROM {schema}.records r JOIN i ON i.id = r.id ORDER BY r.id FOR UPDATE OF r
), updated AS (
	UPDATE {schema}.records AS r
	SET tenant_id = i.tenant_id, status = i.status, parked = i.parked, payload = i.payload, version = r.version + 1,
		updated_at = coalesce(i.at, now()),
		lease_owner = i.lease_owner, lease_expiry = CASE WHEN i.lease_owner = '' THEN i.lease_expiry ELSE r.lease_expiry END
	FROM i JOIN locked l ON l.id = i.id
	WHERE r.id = i.id AND r.grp = i.grp AND r.version = i.version
		AND (i.lease_owner = '' OR (r.lease_owner = i.lease_owner AND r.lease_incarnation = i.lease_incarnation))
	RETURNING r.id, r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
		CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
			CASE WHEN (SELECT g.wanted_until > now() FROM {schema}.record_groups g WHERE g.name = r.grp FOR KEY SHARE)
			THEN pg_notify($12, r.grp) END
		END AS notified
), created AS (
	INSERT INTO {schema}.records AS r
		(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
	SELECT id, grp, tenant_id, status, parked,
		coalesce((SELECT g.deleted_version FROM {schema}.record_groups g WHERE g.name = i.grp), 0) + 1,
		lease_owner, lease_incarnation, lease_expiry, coalesce(at, now()), payload
	FROM i WHERE version = 0 ORDER BY id
	ON CONFLICT (id) DO NOTHING
	RETURNING r.id, r.version, r.lease_incarnation, r.lease_expiry, r.updated_at,
		CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN
			CASE WHEN (SELECT g.wanted_until > now() FROM {schema}.record_groups g WHERE g.name = r.grp FOR KEY SHARE)
			THEN pg_notify($12, r.grp) END
		END AS notified
)
SELECT id, version, lease_incarnation, lease_expiry, updated_at, notified FROM updated
UNION ALL
SELECT id, version, lease_incarnation, lease_expiry, updated_at, notified FROM created`)

	// The records of ids this transaction created whose version is not
	// above their group's deleted_version, raised above it. Run in a new
	// statement after the creates: a delete of the id that committed
	// while a create's statement ran (the create waited on it) committed
	// before this statement's snapshot. $1 ids. It returns the records
	// raised.
	sqlRecordCreateFloor = declare("sqlRecordCreateFloor", `UPDATE {schema}.records AS r SET version = g.deleted_version + 1
FROM {schema}.record_groups g
WHERE r.id = ANY ($1::text[]) AND g.name = r.grp AND r.version <= g.deleted_version
	AND r.xmin = pg_current_xact_id_if_assigned()::xid
RETURNING r.id, r.version`)

	// A record's columns, in scanRecord's order. $1 id; lookup adds $2
	// now.
	sqlRecordLoad = declare("sqlRecordLoad", `SELECT r.id, r.grp, t.name, r.status, r.version, r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
FROM {schema}.records r JOIN {schema}.record_tenants t ON t.id = r.tenant_id
WHERE r.id = $1`)
	sqlRecordLookup = declare("sqlRecordLookup", `SELECT r.id, r.grp, t.name, r.status, r.version, r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload,
	coalesce($2::timestamptz, now())
FROM {schema}.records r JOIN {schema}.record_tenants t ON t.id = r.tenant_id
WHERE r.id = $1`)
	// A delete raises its group's deleted_version to the record's
	// version, in the same statement. $1 id.
	sqlRecordDelete = declare("sqlRecordDelete", `WITH d AS (DELETE FROM {schema}.records WHERE id = $1 RETURNING grp, version)
UPDATE {schema}.record_groups g SET deleted_version = d.version
FROM d WHERE g.name = d.grp AND g.deleted_version < d.version`)

	// Claiming reads a group's records through records_unleased and
	// records_leased; ORDER BY id COLLATE "POSIX" orders them as those
	// indexes do (see the migration). The listing sorts every expired
	// lease of the group by id: ordering that branch by id would invite a
	// plan walking the primary key through every group. $1 group, $2 now,
	// $3 limit.
	sqlRecordList = declare("sqlRecordList", `SELECT c.id, c.grp, t.name, c.status, c.version, c.lease_owner, c.lease_incarnation, c.lease_expiry, c.updated_at, c.payload
FROM (
	(SELECT * FROM {schema}.records WHERE grp = $1 AND NOT parked AND lease_owner = '' ORDER BY id COLLATE "POSIX" LIMIT $3)
	UNION ALL
	(SELECT * FROM {schema}.records WHERE grp = $1 AND NOT parked AND lease_owner <> '' AND lease_expiry <= coalesce($2::timestamptz, now()))
) c JOIN {schema}.record_tenants t ON t.id = c.tenant_id
ORDER BY c.id LIMIT $3`)

	// The group's live leases, a range of records_leased from now on, so
	// the group's held leases are read, never its other records; ids
	// compared and ordered "POSIX", which the primary key cannot serve, so
	// that no plan walks every record of the store in id order instead.
	sqlRecordListLeased = declare("sqlRecordListLeased", `SELECT c.id, c.grp, t.name, c.status, c.version, c.lease_owner, c.lease_incarnation, c.lease_expiry, c.updated_at, c.payload
FROM {schema}.records c JOIN {schema}.record_tenants t ON t.id = c.tenant_id
WHERE c.grp = $1 AND NOT c.parked AND c.lease_owner <> '' AND c.lease_expiry > coalesce($2::timestamptz, now())
	AND c.id COLLATE "POSIX" > $3
ORDER BY c.id COLLATE "POSIX" LIMIT $4`)

	sqlRecordClaim = declare("sqlRecordClaim", `UPDATE {schema}.records AS r
SET version = r.version + 1, lease_owner = @owner, lease_incarnation = r.lease_incarnation + 1,
	lease_expiry = coalesce(@now::timestamptz, now()) + @ttl::interval, updated_at = coalesce(@now::timestamptz, now())
WHERE r.id = @id AND r.grp = @grp AND (r.lease_owner IN ('', @owner) OR r.lease_expiry <= coalesce(@now::timestamptz, now()))
RETURNING r.id, r.grp, (SELECT name FROM {schema}.record_tenants WHERE id = r.tenant_id), r.status, r.version,
	r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload`)

	// Expired leases first, then unleased records. A WITH query runs only
	// as far as it is read, so the unleased one runs, and locks, only when
	// there are fewer than $5 (n) expired leases. = ANY (ARRAY (...)), not IN (...): with IN, a
	// generic plan that guesses many ids joins them to a sequential scan
	// of every group.
	sqlRecordClaimNext = declare("sqlRecordClaimNext", `UPDATE {schema}.records AS r
SET version = r.version + 1, lease_owner = $1, lease_incarnation = r.lease_incarnation + 1,
	lease_expiry = coalesce($3::timestamptz, now()) + $2::interval, updated_at = coalesce($3::timestamptz, now())
WHERE r.id = ANY (ARRAY (
	WITH expired AS (
		SELECT id FROM {schema}.records
		WHERE grp = $4 AND NOT parked AND lease_owner <> '' AND lease_expiry <= coalesce($3::timestamptz, now())
		ORDER BY lease_expiry, id COLLATE "POSIX" LIMIT $5 FOR UPDATE SKIP LOCKED
	), unleased AS (
		SELECT id FROM {schema}.records
		WHERE grp = $4 AND NOT parked AND lease_owner = ''
		ORDER BY id COLLATE "POSIX" LIMIT $5 FOR UPDATE SKIP LOCKED
	)
	SELECT id FROM expired UNION ALL SELECT id FROM unleased LIMIT $5
))
RETURNING r.id, r.grp, (SELECT name FROM {schema}.record_tenants WHERE id = r.tenant_id), r.status, r.version,
	r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload`)

	sqlRecordRenew = declare("sqlRecordRenew", `UPDATE {schema}.records SET lease_expiry = coalesce(@now::timestamptz, now()) + @ttl::interval
WHERE id = @id AND grp = @grp AND lease_owner = @owner AND lease_incarnation = @incarnation
RETURNING lease_expiry`)

	// A waiter marks its group wanted until now() + $2, unless the mark
	// already lasts until now() + $3 or later: then it locks and writes
	// nothing. It returns the mark it wrote, or else the one its snapshot
	// saw (older, or NULL, when another waiter marked the group
	// meanwhile), and now(); no row for a group not registered. Marks only
	// grow.
	//
	// No wake-up is lost between a waiter, which marks, then probes, then
	// sleeps until notified, and a save that makes a record claimable. The
	// mark locks the group row FOR UPDATE, which conflicts with the FOR KEY
	// SHARE the save's notify column takes on it (a plain UPDATE would
	// not: it takes FOR NO KEY UPDATE), and a locking read in READ
	// COMMITTED returns the newest committed version of the row, waiting
	// for one being written. So either the mark commits before the save
	// locks the row, and the save sees it and notifies, or the save locks
	// it first, the mark waits for the save's commit, and the waiter's
	// probe, a later statement, sees the record. A mark that is not
	// rewritten because it lasts long enough was committed before this
	// statement, so the same holds for it. The waiter holds no other lock,
	// so the mark joins no deadlock; deletes (FOR NO KEY UPDATE of the row)
	// do not conflict with saves (FOR KEY SHARE).
	sqlRecordWant = declare("sqlRecordWant", `WITH l AS (
	SELECT name FROM {schema}.record_groups
	WHERE name = $1 AND NOT coalesce(wanted_until >= now() + $3::interval, false)
	FOR UPDATE
), m AS (
	UPDATE {schema}.record_groups g SET wanted_until = greatest(g.wanted_until, now() + $2::interval)
	FROM l WHERE g.name = l.name
	RETURNING g.wanted_until
)
SELECT coalesce((SELECT wanted_until FROM m), g.wanted_until), now() FROM {schema}.record_groups g WHERE g.name = $1`)

	// sqlRecordWantLockTimeout bounds the lock waits of the rest of its
	// transaction to $1: sent with sqlRecordWant in one batch, one
	// transaction.
	sqlRecordWantLockTimeout = declare("sqlRecordWantLockTimeout", `SELECT set_config('lock_timeout', $1, true)`)

	// sqlRecordGenericPlan makes the rest of its transaction run its
	// prepared statements' generic plans: sent with sqlRecordClaimNext in
	// one batch, one transaction. The planner never picks the generic plan
	// of sqlRecordClaimNext by itself (it costs LIMIT $5 as a tenth of the
	// group), so every claim was planned anew, which took as long as
	// running it; the generic plan is the custom one's, the same index
	// scans.
	sqlRecordGenericPlan = declare("sqlRecordGenericPlan", `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`)

	// $1 group, $2 now. The first unleased record, and the earliest lease:
	// expired, the group has recovery work; else it is when the next lease
	// lapses. Each is read in its index's order, one entry: as EXISTS or
	// min(), a generic plan may scan the whole table for it.
	sqlRecordProbe = declare("sqlRecordProbe", `SELECT
	(SELECT id FROM {schema}.records WHERE grp = $1 AND NOT parked AND lease_owner = '' ORDER BY id COLLATE "POSIX" LIMIT 1) IS NOT NULL,
	(SELECT lease_expiry FROM {schema}.records WHERE grp = $1 AND NOT parked AND lease_owner <> '' ORDER BY lease_expiry LIMIT 1),
	coalesce($2::timestamptz, now())`)
)

func (r *records) init(e *Engine) {
	r.e = e
	r.channel = fmt.Sprintf("stead_records_%016x", uint64(e.lockKey("records")))
	r.commit = groupcommit.NewOnce(saveFlushers, maxBatchSaves, maxBatchSaveBytes, r.flush)
	r.wantFor = defaultWantFor
	r.wanted = map[string]time.Time{}
	r.closing, r.close = context.WithCancel(context.Background())
}

// tenantName is how a tenant's name is stored: NULL for the default.
func tenantName(tenant string) any {
	if tenant == "" {
		return nil
	}
	return tenant
}

// scanRecord reads the columns of sqlRecordLoad, then extra.
func scanRecord(row pgx.Row, extra ...any) (record.Record, error) {
	var rec record.Record
	var tenant *string
	err := row.Scan(append([]any{&rec.ID, &rec.Group, &tenant, &rec.Status, &rec.Version,
		&rec.Lease.Owner, &rec.Lease.Incarnation, &rec.Lease.Expiry, &rec.UpdatedAt, &rec.Payload}, extra...)...)
	if tenant != nil {
		rec.Tenant = *tenant
	}
	rec.Lease.Expiry, rec.UpdatedAt = rec.Lease.Expiry.UTC(), rec.UpdatedAt.UTC()
	if rec.Payload == nil {
		rec.Payload = []byte{}
	}
	return rec, err
}

func (r *records) RegisterGroup(ctx context.Context, group string) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	_, err := r.e.pool.Exec(ctx, r.e.sql(sqlRecordRegisterGroup), group)
	return interpretError(err)
}

func (r *records) GroupExists(ctx context.Context, group string) (bool, error) {
	if err := r.e.check(ctx); err != nil {
		return false, err
	}
	var ok bool
	err := listError(r.e.pool.QueryRow(ctx, r.e.sql(sqlRecordGroupExists), group).Scan(&ok))
	return ok, err
}

// saveReq is one save through the group commit: rec with its tenant's
// id, and once flushed, whether it matched and the record as stored.
type saveReq struct {
	rec      record.Record
	tenantID int64
	now      time.Time
	matched  bool
	saved    record.Record
}

func (q *saveReq) Size() int        { return len(q.rec.Payload) }
func (q *saveReq) BatchKey() string { return q.rec.ID }

func (r *records) Save(ctx context.Context, p record.SaveParams) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	rec := p.Record
	return sqlengine.Conditional(ctx, func() (record.Record, bool, error) {
		tid, ok := r.tenants.ID(rec.Group, rec.Tenant)
		if !ok {
			return r.saveResolving(ctx, rec, p.Now)
		}
		q := &saveReq{rec: rec, tenantID: tid, now: p.Now}
		err := r.commit.Put(ctx, q)
		if isForeignKey(err) { // the cached tenant is gone: resolve it again
			r.tenants.Forget(rec.Group, rec.Tenant)
			return r.saveResolving(ctx, rec, p.Now)
		}
		return q.saved, q.matched, err
	}, func() error {
		stored, exists, _, err := r.lookupAt(ctx, rec.ID, p.Now)
		if err != nil {
			return err
		}
		return check.Save(rec, stored, exists)
	})
}

// flush runs a batch of saves as one statement.
func (r *records) flush(ctx context.Context, batch []*groupcommit.Request[*saveReq]) error {
	qs := make([]*saveReq, len(batch))
	for i, req := range batch {
		qs[i] = req.Item
	}
	return r.saveMany(ctx, qs)
}

// saveMany runs saves qs, no id twice, as one statement (one alone, several
// as sqlRecordUpdateMany or sqlRecordSaveMany): one round trip, one commit.
func (r *records) saveMany(ctx context.Context, qs []*saveReq) error {
	if len(qs) == 1 {
		q := qs[0]
		err := r.e.retryTransient(ctx, func() error {
			var err error
			q.saved, err = r.write(ctx, r.e.pool, q.rec, q.tenantID, q.now)
			return err
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		q.matched = err == nil
		return err
	}
	n := len(qs)
	ids, groups, statuses, owners := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, tenants, incarnations := make([]int64, n), make([]int64, n), make([]int64, n)
	expiries, ats := make([]time.Time, n), make([]pgtype.Timestamptz, n)
	parked, payloads := make([]bool, n), make([][]byte, n)
	byID := make(map[string]*saveReq, n)
	var creates []string
	for i, q := range qs {
		rec := q.rec
		ids[i], groups[i], versions[i], tenants[i], statuses[i] = rec.ID, rec.Group, rec.Version, q.tenantID, string(rec.Status)
		owners[i], incarnations[i], expiries[i] = rec.Lease.Owner, rec.Lease.Incarnation, rec.Lease.Expiry
		parked[i], payloads[i] = rec.Status.Parked(), rec.Payload
		ats[i] = pgtype.Timestamptz{Time: q.now, Valid: !q.now.IsZero()}
		byID[rec.ID] = q
		if rec.Version == 0 {
			creates = append(creates, rec.ID)
		}
	}
	// Positional arguments, as sqlRecordUpdateMany's text lists them: pgx
	// rewrites a named statement's text on every call.
	args := []any{ids, groups, versions, tenants, statuses, owners, incarnations, expiries, parked, payloads, ats, r.channel}
	return r.e.retryTransient(ctx, func() error {
		return r.saveManyOnce(ctx, byID, creates, args)
	})
}

// saveManyOnce runs sqlRecordUpdateMany with args, or if there are creates
// sqlRecordSaveMany and then sqlRecordCreateFloor on them, in one round
// trip and one transaction, and marks the saves of byID it wrote.
func (r *records) saveManyOnce(ctx context.Context, byID map[string]*saveReq, creates []string, args []any) error {
	b := &pgx.Batch{}
	if len(creates) == 0 {
		b.Queue(r.e.sql(sqlRecordUpdateMany), args...)
	} else {
		b.Queue(r.e.sql(sqlRecordSaveMany), args...)
		b.Queue(r.e.sql(sqlRecordCreateFloor), creates)
	}
	for _, q := range byID { // a retried attempt decides afresh
		q.matched, q.saved = false, record.Record{}
	}
	br := r.e.pool.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return interpretError(err)
	}
	for rows.Next() {
		var id string
		var version int64
		var lease record.Lease
		var updated time.Time
		if err := rows.Scan(&id, &version, &lease.Incarnation, &lease.Expiry, &updated, nil); err != nil {
			rows.Close()
			return interpretError(err)
		}
		q := byID[id]
		q.matched, q.saved = true, saved(q.rec, version, lease.Incarnation, lease.Expiry, updated)
	}
	if err := rows.Err(); err != nil {
		return interpretError(err)
	}
	if len(creates) == 0 {
		return interpretError(br.Close())
	}
	if rows, err = br.Query(); err != nil {
		return interpretError(err)
	}
	for rows.Next() {
		var id string
		var version int64
		if err := rows.Scan(&id, &version); err != nil {
			rows.Close()
			return interpretError(err)
		}
		byID[id].saved.Version = version
	}
	if err := rows.Err(); err != nil {
		return interpretError(err)
	}
	return interpretError(br.Close())
}

// saved returns rec as written: at version, with the stored lease's
// incarnation and expiry, updated at updated.
func saved(rec record.Record, version, incarnation int64, expiry, updated time.Time) record.Record {
	rec.Version = version
	rec.Lease.Incarnation, rec.Lease.Expiry, rec.UpdatedAt = incarnation, expiry.UTC(), updated.UTC()
	return rec
}

// saveResolving finds or creates rec's tenant and writes rec in one
// transaction, so a write that matches no row leaves no tenant behind. The
// tenant's insert and select are two statements: the select's snapshot
// must see a row a concurrent insert committed while this one waited on
// it.
func (r *records) saveResolving(ctx context.Context, rec record.Record, now time.Time) (written record.Record, matched bool, err error) {
	err = r.e.retryTransient(ctx, func() error {
		var err error
		written, matched, err = r.saveResolvingOnce(ctx, rec, now)
		return err
	})
	return written, matched, err
}

// saveResolvingOnce is one attempt of saveResolving.
func (r *records) saveResolvingOnce(ctx context.Context, rec record.Record, now time.Time) (_ record.Record, matched bool, err error) {
	tx, err := r.e.pool.Begin(ctx)
	if err != nil {
		return rec, false, interpretError(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	_, err = tx.Exec(ctx, r.e.sql(sqlRecordEnsureTenant), rec.Group, tenantName(rec.Tenant))
	if isForeignKey(err) {
		return rec, false, fmt.Errorf("%w: group %q is not registered", steaderr.ErrUnknownGroup, rec.Group)
	}
	var tid int64
	if err == nil {
		err = tx.QueryRow(ctx, r.e.sql(sqlRecordTenantID), rec.Group, tenantName(rec.Tenant)).Scan(&tid)
	}
	if err != nil {
		return rec, false, interpretError(err)
	}
	written, err := r.write(ctx, tx, rec, tid, now)
	if errors.Is(err, pgx.ErrNoRows) {
		return written, false, nil
	}
	if err == nil {
		err = commit(ctx, tx)
	}
	if err != nil {
		return written, false, interpretError(err)
	}
	r.tenants.Add(rec.Group, rec.Tenant, tid)
	return written, true, nil
}

// write runs Save's create or conditional update; pgx.ErrNoRows when it
// matched no row. A create runs with sqlRecordCreateFloor, in one round
// trip and one transaction. An update that parks the record or keeps its
// lease first runs sqlRecordUpdateUnclaimable, then, if that matched no
// row and the record stays unparked, sqlRecordUpdate.
func (r *records) write(ctx context.Context, q sender, rec record.Record, tenantID int64, now time.Time) (record.Record, error) {
	var version, incarnation int64
	var expiry, updated time.Time
	var err error
	if rec.Version == 0 {
		b := &pgx.Batch{}
		b.Queue(r.e.sql(sqlRecordCreate), pgx.StrictNamedArgs{
			"id": rec.ID, "grp": rec.Group, "tenant_id": tenantID, "status": rec.Status, "parked": rec.Status.Parked(),
			"lease_owner": rec.Lease.Owner, "lease_incarnation": rec.Lease.Incarnation, "lease_expiry": rec.Lease.Expiry,
			"payload": rec.Payload, "now": nowArg(now), "channel": r.channel,
		})
		b.Queue(r.e.sql(sqlRecordCreateFloor), []string{rec.ID})
		br := q.SendBatch(ctx, b)
		err = br.QueryRow().Scan(&version, &incarnation, &expiry, &updated, nil)
		if err == nil {
			switch ferr := br.QueryRow().Scan(nil, &version); {
			case errors.Is(ferr, pgx.ErrNoRows):
			case ferr != nil:
				err = ferr
			}
		}
		if cerr := br.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
			err = cerr
		}
	} else {
		args := pgx.StrictNamedArgs{
			"id": rec.ID, "grp": rec.Group, "version": rec.Version, "tenant_id": tenantID, "status": rec.Status,
			"lease_owner": rec.Lease.Owner, "lease_incarnation": rec.Lease.Incarnation, "lease_expiry": rec.Lease.Expiry,
			"parked": rec.Status.Parked(), "payload": rec.Payload, "now": nowArg(now),
		}
		err = pgx.ErrNoRows
		if rec.Status.Parked() || rec.Lease.Owner != "" {
			err = q.QueryRow(ctx, r.e.sql(sqlRecordUpdateUnclaimable), args).Scan(&version, &incarnation, &expiry, &updated)
		}
		if errors.Is(err, pgx.ErrNoRows) && !rec.Status.Parked() {
			// Claimable as written (released, or under a lapsed lease),
			// or no match: the statement that notifies.
			args["channel"] = r.channel
			err = q.QueryRow(ctx, r.e.sql(sqlRecordUpdate), args).Scan(&version, &incarnation, &expiry, &updated, nil)
		}
	}
	if err != nil {
		return rec, err
	}
	return saved(rec, version, incarnation, expiry, updated), nil
}

// sender runs statements: the pool, or a transaction.
type sender interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// lookupAt returns the record stored under id, if any, and the instant
// now stands for (the database's now() for the zero time).
func (r *records) lookupAt(ctx context.Context, id string, now time.Time) (_ record.Record, exists bool, at time.Time, _ error) {
	rec, err := scanRecord(r.e.pool.QueryRow(ctx, r.e.sql(sqlRecordLookup), id, nowArg(now)), &at)
	switch err = interpretError(err); {
	case errors.Is(err, steaderr.ErrNotFound):
		return record.Record{}, false, now, nil
	case err != nil:
		return record.Record{}, false, now, err
	}
	return rec, true, at.UTC(), nil
}

func (r *records) SaveAll(ctx context.Context, p record.SaveAllParams) []record.SaveResult {
	out := make([]record.SaveResult, len(p.Records))
	if err := r.e.check(ctx); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	// In order: records of cached tenants gather into one statement until
	// one repeats an id or their payloads would pass maxBatchSaveBytes (as
	// a group commit's do: a statement's parameters are bounded); a record
	// whose tenant is not cached is saved alone, resolving it. Each
	// statement commits on its own.
	var stmt []*saveReq
	var at []int
	var stmtBytes int
	inStmt := map[string]bool{}
	run := func() {
		switch {
		case len(stmt) == 0:
		case ctx.Err() != nil:
			for _, i := range at {
				out[i].Err = ctx.Err()
			}
		default:
			r.saveStatement(ctx, stmt, at, p, out)
		}
		stmt, at, stmtBytes = stmt[:0], at[:0], 0
		clear(inStmt)
	}
	for i, rec := range p.Records {
		tid, ok := r.tenants.ID(rec.Group, rec.Tenant)
		if !ok {
			run()
			out[i].Record, out[i].Err = r.Save(ctx, record.SaveParams{Record: rec, Now: p.Now})
			continue
		}
		if inStmt[rec.ID] || len(stmt) > 0 && stmtBytes+len(rec.Payload) > maxBatchSaveBytes {
			run()
		}
		inStmt[rec.ID] = true
		stmtBytes += len(rec.Payload)
		stmt = append(stmt, &saveReq{rec: rec, tenantID: tid, now: p.Now})
		at = append(at, i)
	}
	run()
	return out
}

// saveStatement runs qs, the saves of p.Records at indexes at, as one
// statement, and sets their outcomes in out. Once started, the statement
// runs to its end whatever ctx does, so that every outcome is known: a
// save reported failed changed nothing. A save that matched no row is
// explained from the stored record, or saved alone if that changed since.
func (r *records) saveStatement(ctx context.Context, qs []*saveReq, at []int, p record.SaveAllParams, out []record.SaveResult) {
	err := r.saveMany(context.WithoutCancel(ctx), qs)
	if isForeignKey(err) { // a cached tenant is gone: save each alone, resolving it
		for j, q := range qs {
			r.tenants.Forget(q.rec.Group, q.rec.Tenant)
			o := &out[at[j]]
			o.Record, o.Err = r.Save(ctx, record.SaveParams{Record: q.rec, Now: p.Now})
		}
		return
	}
	for j, q := range qs {
		o := &out[at[j]]
		switch {
		case err != nil:
			o.Err = err
		case q.matched:
			o.Record = q.saved
		default:
			stored, exists, _, lerr := r.lookupAt(ctx, q.rec.ID, p.Now)
			if o.Err = lerr; lerr == nil {
				o.Err = check.Save(q.rec, stored, exists)
			}
			if o.Err == nil { // changed since the statement: try again alone
				o.Record, o.Err = r.Save(ctx, record.SaveParams{Record: q.rec, Now: p.Now})
			}
		}
	}
}

func (r *records) Load(ctx context.Context, id string) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	rec, err := scanRecord(r.e.pool.QueryRow(ctx, r.e.sql(sqlRecordLoad), id))
	if err = readError(err); err != nil {
		return record.Record{}, err
	}
	return rec, nil
}

func (r *records) Delete(ctx context.Context, id string) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	return r.e.retryTransient(ctx, func() error {
		_, err := r.e.pool.Exec(ctx, r.e.sql(sqlRecordDelete), id)
		return err
	})
}

// queryRecords runs query, again should it fail with a deadlock or
// serialization failure, and reads the records it returns, in id order.
func (r *records) queryRecords(ctx context.Context, query string, args ...any) (out []record.Record, err error) {
	err = r.e.retryTransient(ctx, func() error {
		out, err = r.queryRecordsOnce(ctx, query, args...)
		return err
	})
	return out, err
}

// queryRecordsOnce is one attempt of queryRecords.
func (r *records) queryRecordsOnce(ctx context.Context, query string, args ...any) ([]record.Record, error) {
	rows, err := r.e.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	return scanRecords(rows)
}

// scanRecords reads and closes rows of records, and returns them sorted
// by id.
func scanRecords(rows pgx.Rows) ([]record.Record, error) {
	defer rows.Close()
	var out []record.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	slices.SortFunc(out, func(a, b record.Record) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (r *records) ListClaimable(ctx context.Context, p record.ListParams) ([]record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return nil, err
	}
	recs, err := r.queryRecords(ctx, r.e.sql(sqlRecordList), p.Group, nowArg(p.Now), p.Limit)
	return recs, listError(err)
}

func (r *records) ListLeased(ctx context.Context, p record.ListLeasedParams) ([]record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return nil, err
	}
	recs, err := r.queryRecords(ctx, r.e.sql(sqlRecordListLeased), p.Group, nowArg(p.Now), p.After, p.Limit)
	return recs, listError(err)
}

func (r *records) Claim(ctx context.Context, p record.ClaimParams) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	return sqlengine.Conditional(ctx, func() (record.Record, bool, error) {
		recs, err := r.queryRecords(ctx, r.e.sql(sqlRecordClaim), pgx.StrictNamedArgs{
			"owner": p.Owner, "ttl": interval(p.TTL), "now": nowArg(p.Now), "grp": p.Group, "id": p.ID,
		})
		if len(recs) != 1 {
			return record.Record{}, false, err
		}
		return recs[0], true, err
	}, func() error {
		stored, exists, now, err := r.lookupAt(ctx, p.ID, p.Now)
		if err != nil {
			return err
		}
		return check.Claim(p.Group, p.Owner, now, stored, exists)
	})
}

func (r *records) ClaimNext(ctx context.Context, p record.ClaimNextParams) ([]record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return nil, err
	}
	args := []any{p.Owner, interval(p.TTL), nowArg(p.Now), p.Group, p.N}
	var out []record.Record
	err := r.e.retryTransient(ctx, func() error {
		b := &pgx.Batch{}
		b.Queue(r.e.sql(sqlRecordGenericPlan))
		b.Queue(r.e.sql(sqlRecordClaimNext), args...)
		br := r.e.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return interpretError(err)
		}
		rows, err := br.Query()
		if err != nil {
			return interpretError(err)
		}
		if out, err = scanRecords(rows); err != nil {
			return err
		}
		return interpretError(br.Close())
	})
	return out, err
}

func (r *records) Renew(ctx context.Context, p record.RenewParams) (record.Lease, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Lease{}, err
	}
	return sqlengine.Conditional(ctx, func() (record.Lease, bool, error) {
		lease := record.Lease{Owner: p.Owner, Incarnation: p.Incarnation}
		err := r.e.retryTransient(ctx, func() error {
			return r.e.pool.QueryRow(ctx, r.e.sql(sqlRecordRenew), pgx.StrictNamedArgs{
				"now": nowArg(p.Now), "ttl": interval(p.TTL), "id": p.ID, "grp": p.Group, "owner": p.Owner, "incarnation": p.Incarnation,
			}).Scan(&lease.Expiry)
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return lease, false, nil
		}
		lease.Expiry = lease.Expiry.UTC()
		return lease, err == nil, err
	}, func() error {
		stored, exists, now, err := r.lookupAt(ctx, p.ID, p.Now)
		if err != nil {
			return err
		}
		at := p
		at.Now = now
		return check.Renew(at, stored, exists)
	})
}

func (r *records) Probe(ctx context.Context, p record.ProbeParams) (record.Probe, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Probe{}, err
	}
	var unleased bool
	var earliest *time.Time
	var now time.Time
	err := listError(r.e.pool.QueryRow(ctx, r.e.sql(sqlRecordProbe), p.Group, nowArg(p.Now)).Scan(&unleased, &earliest, &now))
	switch {
	case err != nil:
		return record.Probe{}, err
	case unleased || earliest != nil && !earliest.After(now):
		return record.Probe{Claimable: true}, nil
	case earliest != nil:
		return record.Probe{Until: earliest.Sub(now)}, nil
	}
	return record.Probe{}, nil
}

// WatchClaimable subscribes to the engine's listener and, while it
// listens, marks group wanted (sqlRecordWant) before it returns, so that
// saves notify, and keeps the mark while the watch lasts. It is live only
// when both succeed: without a listener (PgBouncer mode without a listen
// URL) the channel is nil, and with one not listening yet or a group that
// could not be marked (not registered, or an error) waiters poll.
func (r *records) WatchClaimable(ctx context.Context, group string) (<-chan struct{}, bool, func(), error) {
	if err := r.e.check(ctx); err != nil {
		return nil, false, func() {}, err
	}
	if r.e.listen == nil {
		return nil, false, func() {}, nil
	}
	wake, live, stop, err := r.e.listen.watch(r.channel, group)
	if err != nil || !live {
		return wake, live, stop, err
	}
	if ok, _ := r.want(ctx, group); !ok {
		return wake, false, stop, nil
	}
	keep, cancel := context.WithCancel(r.closing)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.keepWanted(keep, group)
	}()
	return wake, true, sync.OnceFunc(func() { cancel(); <-done; stop() }), nil
}

// keepWanted renews group's mark every wantFor/8 until ctx ends. Should
// renewals fail until the mark has less than wantFor/4 left, it wakes the
// group's watchers while the mark still holds: they look again, and mark
// anew or poll.
func (r *records) keepWanted(ctx context.Context, group string) {
	t := time.NewTicker(r.wantFor / 8)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wctx, cancel := context.WithTimeout(ctx, r.wantFor/8)
		ok, err := r.want(wctx, group)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if !ok {
			r.e.listen.wake(r.channel, group)
		}
		if errors.Is(err, steaderr.ErrClosed) {
			return
		}
	}
}

// wantLockTimeout bounds how long a mark waits for the group row's lock.
// Claimable saves hold a share lock on it until they commit, and new ones
// take it without queueing behind a waiting mark, so under a steady stream
// of them a mark could wait indefinitely; it gives up, and the waiter
// polls this round (docs/decisions/0020-record-notify-when-wanted.md).
const wantLockTimeout = "100ms"

// want marks group wanted for wantFor, unless this engine knows the mark
// lasts more than wantFor/2 still. It reports whether the mark holds for
// more than wantFor/4 from now: false for a group not registered, and
// for a mark that failed, with its error, unless the last one still holds
// that long.
func (r *records) want(ctx context.Context, group string) (bool, error) {
	if err := r.e.check(ctx); err != nil {
		return false, err
	}
	sent := time.Now()
	r.wantMu.Lock()
	known := r.wanted[group]
	r.wantMu.Unlock()
	if known.Sub(sent) > r.wantFor/2 {
		return true, nil
	}
	b := &pgx.Batch{}
	b.Queue(r.e.sql(sqlRecordWantLockTimeout), wantLockTimeout)
	b.Queue(r.e.sql(sqlRecordWant), group, interval(r.wantFor), interval(r.wantFor/2))
	br := r.e.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	var until *time.Time
	var now time.Time
	if err == nil {
		err = br.QueryRow().Scan(&until, &now)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return known.Sub(time.Now()) > r.wantFor/4, interpretError(err)
	case until != nil:
		// The statement's now() came after sent: the mark lasts at least
		// as long from sent.
		r.wantMu.Lock()
		if at := sent.Add(until.Sub(now)); at.After(r.wanted[group]) {
			r.wanted[group] = at
		}
		r.wantMu.Unlock()
	}
	return true, nil
}
