package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/engine/internal/sqlengine"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/record/check"
	"github.com/steadkit/stead/steaderr"
)

// records is the engine's record.Backend. Each write is one conditional
// statement on the writer, in a write transaction: concurrent saves share
// one (group commit), and claims roll back unless read back whole. When a
// write matches no row, the stored record is read back to say why
// (record/check). Reads are one statement each on the reader pool. Times
// are stored as microseconds since the Unix epoch.
type records struct {
	e       *Engine
	tenants sqlengine.TenantCache
	commit  *groupcommit.Committer[*saveReq]
	// On the writer.
	registerGroup, ensureTenant, tenantID, create, update, claim, claimNext, renew, del stmt
	// On the reader pool.
	groupExists, load, list, leased, probe stmt
}

// The record statements, each whole. Claiming reads a group's records
// through records_unleased and records_leased.
const (
	sqlRecordRegisterGroup = `INSERT INTO record_groups (name) VALUES (?) ON CONFLICT DO NOTHING`
	sqlRecordEnsureTenant  = `INSERT INTO record_tenants (grp, name) VALUES (?, ?) ON CONFLICT DO NOTHING`
	sqlRecordTenantID      = `SELECT id FROM record_tenants WHERE grp = ? AND name IS ?`
	// A create starts above every version a deleted record of its group
	// had.
	sqlRecordCreate = `INSERT INTO records
	(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
VALUES (@id, @grp, @tenant_id, @status, @parked, coalesce((SELECT deleted_version FROM record_groups WHERE name = @grp), 0) + 1, @lease_owner, @lease_incarnation, @lease_expiry, @now, @payload)
ON CONFLICT (id) DO NOTHING
RETURNING version`

	// An update keeps the stored grant (@lease_owner the stored owner,
	// @lease_incarnation its incarnation) or releases the lease
	// (@lease_owner empty, @lease_expiry the expiry to store).
	sqlRecordUpdate = `UPDATE records SET
	tenant_id = @tenant_id, status = @status, parked = @parked, payload = @payload, version = version + 1, updated_at = @now,
	lease_owner = @lease_owner, lease_expiry = CASE WHEN @lease_owner = '' THEN @lease_expiry ELSE lease_expiry END
WHERE id = @id AND grp = @grp AND version = @version AND (@lease_owner = '' OR (lease_owner = @lease_owner AND lease_incarnation = @lease_incarnation))
RETURNING lease_incarnation, lease_expiry`

	sqlRecordClaim = `UPDATE records
SET version = version + 1, lease_owner = @owner, lease_incarnation = lease_incarnation + 1, lease_expiry = @expiry, updated_at = @now
WHERE id = @id AND grp = @grp AND (lease_owner IN ('', @owner) OR lease_expiry <= @now)
RETURNING id, grp, (SELECT name FROM record_tenants WHERE id = tenant_id), status, version,
	lease_owner, lease_incarnation, lease_expiry, updated_at, payload`

	// Expired leases first, then unleased records.
	sqlRecordClaimNext = `UPDATE records
SET version = version + 1, lease_owner = @owner, lease_incarnation = lease_incarnation + 1, lease_expiry = @expiry, updated_at = @now
WHERE id IN (
	SELECT id FROM (
		SELECT id FROM records WHERE grp = @grp AND parked = 0 AND lease_owner <> '' AND lease_expiry <= @now
		ORDER BY lease_expiry, id LIMIT @n
	)
	UNION ALL
	SELECT id FROM (
		SELECT id FROM records WHERE grp = @grp AND parked = 0 AND lease_owner = ''
		ORDER BY id LIMIT @n
	)
	LIMIT @n
)
RETURNING id, grp, (SELECT name FROM record_tenants WHERE id = tenant_id), status, version,
	lease_owner, lease_incarnation, lease_expiry, updated_at, payload`

	sqlRecordRenew = `UPDATE records SET lease_expiry = @expiry
WHERE id = @id AND grp = @grp AND lease_owner = @owner AND lease_incarnation = @incarnation
RETURNING lease_expiry`
	sqlRecordDelete      = `DELETE FROM records WHERE id = ?`
	sqlRecordGroupExists = `SELECT EXISTS (SELECT 1 FROM record_groups WHERE name = ?)`

	// A record's columns, in scanRecord's order.
	sqlRecordLoad = `SELECT r.id, r.grp, t.name, r.status, r.version, r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
FROM records r JOIN record_tenants t ON t.id = r.tenant_id
WHERE r.id = ?`

	// ?1 group, ?2 now, ?3 limit.
	sqlRecordList = `SELECT r.id, r.grp, t.name, r.status, r.version, r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
FROM (
	SELECT * FROM (SELECT * FROM records WHERE grp = ?1 AND parked = 0 AND lease_owner = '' ORDER BY id LIMIT ?3)
	UNION ALL
	SELECT * FROM records WHERE grp = ?1 AND parked = 0 AND lease_owner <> '' AND lease_expiry <= ?2
) r JOIN record_tenants t ON t.id = r.tenant_id
ORDER BY r.id LIMIT ?3`

	// ?1 group, ?2 now, ?3 after, ?4 limit. The group's live leases
	// through records_leased, a range of it from now on: the group's
	// held leases are read, never its other records, and sorted by id.
	sqlRecordListLeased = `SELECT r.id, r.grp, t.name, r.status, r.version, r.lease_owner, r.lease_incarnation, r.lease_expiry, r.updated_at, r.payload
FROM records r INDEXED BY records_leased JOIN record_tenants t ON t.id = r.tenant_id
WHERE r.grp = ?1 AND r.parked = 0 AND r.lease_owner <> '' AND r.lease_expiry > ?2 AND r.id > ?3
ORDER BY r.id LIMIT ?4`

	// ?1 group. The first unleased record, and the earliest lease:
	// expired, the group has recovery work; else it is when the next lease
	// lapses.
	sqlRecordProbe = `SELECT
	EXISTS (SELECT 1 FROM records WHERE grp = ?1 AND parked = 0 AND lease_owner = ''),
	(SELECT lease_expiry FROM records WHERE grp = ?1 AND parked = 0 AND lease_owner <> '' ORDER BY lease_expiry LIMIT 1)`
)

func (r *records) init(e *Engine) {
	r.e = e
	r.commit = groupcommit.NewOnce(1, maxBatchSaves, maxBatchSaveBytes, r.flush)
	w, rd := e.writer, e.reader
	r.registerGroup = stmt{db: w, query: sqlRecordRegisterGroup}
	r.ensureTenant = stmt{db: w, query: sqlRecordEnsureTenant}
	r.tenantID = stmt{db: w, query: sqlRecordTenantID}
	r.create = stmt{db: w, query: sqlRecordCreate}
	r.update = stmt{db: w, query: sqlRecordUpdate}
	r.claim = stmt{db: w, query: sqlRecordClaim}
	r.claimNext = stmt{db: w, query: sqlRecordClaimNext}
	r.renew = stmt{db: w, query: sqlRecordRenew}
	r.del = stmt{db: w, query: sqlRecordDelete}
	r.groupExists = stmt{db: rd, query: sqlRecordGroupExists}
	r.load = stmt{db: rd, query: sqlRecordLoad}
	r.list = stmt{db: rd, query: sqlRecordList}
	r.leased = stmt{db: rd, query: sqlRecordListLeased}
	r.probe = stmt{db: rd, query: sqlRecordProbe}
}

func (r *records) close() error {
	var errs []error
	for _, s := range []*stmt{&r.registerGroup, &r.ensureTenant, &r.tenantID, &r.create, &r.update, &r.claim,
		&r.claimNext, &r.renew, &r.del, &r.groupExists, &r.load, &r.list, &r.leased, &r.probe} {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// scanRecord reads the columns recordCols names.
func scanRecord(row interface{ Scan(...any) error }) (record.Record, error) {
	var rec record.Record
	var tenant sql.NullString
	var expiry, updated int64
	err := row.Scan(&rec.ID, &rec.Group, &tenant, &rec.Status, &rec.Version,
		&rec.Lease.Owner, &rec.Lease.Incarnation, &expiry, &updated, &rec.Payload)
	rec.Tenant = tenant.String
	rec.Lease.Expiry, rec.UpdatedAt = fromMicros(expiry), fromMicros(updated)
	if rec.Payload == nil {
		rec.Payload = []byte{} // the driver reads an empty blob as nil
	}
	return rec, err
}

// tenantName is how a tenant's name is stored: NULL for the default.
func tenantName(tenant string) sql.NullString {
	return sql.NullString{String: tenant, Valid: tenant != ""}
}

func (r *records) RegisterGroup(ctx context.Context, group string) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	return r.exec(ctx, &r.registerGroup, group)
}

// exec runs s with args.
func (r *records) exec(ctx context.Context, s *stmt, args ...any) error {
	p, err := s.get(ctx)
	if err == nil {
		_, err = p.ExecContext(ctx, args...)
	}
	return interpretError(ctx, err)
}

// queryRow runs s with args; a database never migrated is sqlengine.ErrNoSchema.
func (r *records) queryRow(ctx context.Context, s *stmt, args ...any) (*sql.Row, error) {
	p, err := s.get(ctx)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	return p.QueryRowContext(ctx, args...), nil
}

func (r *records) GroupExists(ctx context.Context, group string) (bool, error) {
	if err := r.e.check(ctx); err != nil {
		return false, err
	}
	var ok bool
	row, err := r.queryRow(ctx, &r.groupExists, group)
	if err == nil {
		err = row.Scan(&ok)
	}
	return ok, listError(ctx, err)
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

func (q *saveReq) Size() int { return len(q.rec.Payload) }

// BatchKey implements groupcommit.Item: a batch runs its saves one after
// another, in queue order, so one record may appear in it twice.
func (q *saveReq) BatchKey() string { return "" }

// Group commit bounds of saves: the single writer runs one batch at a
// time.
const (
	maxBatchSaves     = 64
	maxBatchSaveBytes = 4 << 20
)

func (r *records) Save(ctx context.Context, p record.SaveParams) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	rec, now := p.Record, clock.OrNow(p.Now)
	return sqlengine.Conditional(ctx, func() (record.Record, bool, error) {
		tid, ok := r.tenants.ID(rec.Group, rec.Tenant)
		if !ok {
			return r.saveResolving(ctx, rec, now)
		}
		q := &saveReq{rec: rec, tenantID: tid, now: now}
		err := r.commit.Put(ctx, q)
		if isForeignKey(err) { // the cached tenant is gone: resolve it again
			r.tenants.Forget(rec.Group, rec.Tenant)
			return r.saveResolving(ctx, rec, now)
		}
		return q.saved, q.matched, err
	}, func() error {
		stored, exists, err := r.lookup(ctx, rec.ID)
		if err != nil {
			return err
		}
		return check.Save(rec, stored, exists)
	})
}

// flush runs a batch of saves in one write transaction, in queue order.
// A save the database refuses (a foreign key: a tenant gone) fails alone.
func (r *records) flush(ctx context.Context, batch []*groupcommit.Request[*saveReq]) error {
	err := r.inTx(ctx, func(tx *sql.Tx) error {
		for _, req := range batch {
			q := req.Item
			var err error
			q.saved, q.matched, err = r.write(ctx, tx, q.rec, q.tenantID, q.now)
			switch {
			case isForeignKey(err):
				req.Err = interpretError(ctx, err)
			case err != nil:
				return err
			}
		}
		return nil
	})
	return interpretError(ctx, err)
}

func (r *records) SaveAll(ctx context.Context, p record.SaveAllParams) []record.SaveResult {
	out := make([]record.SaveResult, len(p.Records))
	now := clock.OrNow(p.Now)
	var added []int // indexes of records whose tenant the transaction resolved
	tids := make([]int64, len(p.Records))
	err := r.e.check(ctx)
	if err == nil {
		err = r.inTx(ctx, func(tx *sql.Tx) error {
			for i, rec := range p.Records {
				err := r.saveInTx(ctx, tx, rec, now, &out[i], &tids[i])
				if err != nil {
					return err
				}
				if out[i].Err == nil && tids[i] != 0 {
					added = append(added, i)
				}
			}
			return nil
		})
	}
	if err != nil {
		err = interpretError(ctx, err)
		for i := range out {
			out[i] = record.SaveResult{Err: err}
		}
		return out
	}
	for _, i := range added {
		r.tenants.Add(p.Records[i].Group, p.Records[i].Tenant, tids[i])
	}
	return out
}

// saveInTx saves rec in tx, a transaction of SaveAll, and sets its
// outcome in o. A tenant not cached is resolved under a savepoint, rolled
// back with the write when the write does not apply, and its id set in
// *resolved. The error returned fails the whole transaction.
func (r *records) saveInTx(ctx context.Context, tx *sql.Tx, rec record.Record, now time.Time, o *record.SaveResult, resolved *int64) error {
	tid, cached := r.tenants.ID(rec.Group, rec.Tenant)
	if !cached {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT save_all"); err != nil {
			return err
		}
		var err error
		tid, err = r.resolveTenant(ctx, tx, rec.Group, rec.Tenant)
		if errors.Is(err, steaderr.ErrUnknownGroup) {
			o.Err = err
			return r.rollbackTo(ctx, tx)
		}
		if err != nil {
			return err
		}
	}
	saved, matched, err := r.write(ctx, tx, rec, tid, now)
	switch {
	case isForeignKey(err):
		o.Err = interpretError(ctx, err)
	case err != nil:
		return err
	case matched:
		o.Record = saved
	default:
		stored, serr := scanRecord(tx.QueryRowContext(ctx, r.load.query, rec.ID))
		exists := serr == nil
		if serr != nil && !errors.Is(serr, sql.ErrNoRows) {
			return serr
		}
		if o.Err = check.Save(rec, stored, exists); o.Err == nil {
			o.Err = fmt.Errorf("%w: the write did not apply", steaderr.ErrConflict)
		}
	}
	if cached {
		return nil
	}
	if o.Err != nil {
		return r.rollbackTo(ctx, tx)
	}
	*resolved = tid
	_, err = tx.ExecContext(ctx, "RELEASE save_all")
	return err
}

// rollbackTo undoes tx's work since its savepoint save_all, and ends it.
func (r *records) rollbackTo(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, "ROLLBACK TO save_all"); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "RELEASE save_all")
	return err
}

// saveResolving finds or creates rec's tenant and writes rec in one
// transaction, so a write that matches no row leaves no tenant behind.
func (r *records) saveResolving(ctx context.Context, rec record.Record, now time.Time) (saved record.Record, matched bool, err error) {
	var tid int64
	err = r.inTx(ctx, func(tx *sql.Tx) error {
		if tid, err = r.resolveTenant(ctx, tx, rec.Group, rec.Tenant); err != nil {
			return err
		}
		saved, matched, err = r.write(ctx, tx, rec, tid, now)
		if err == nil && !matched {
			return errNoMatch
		}
		return err
	})
	switch {
	case errors.Is(err, errNoMatch):
		return saved, false, nil
	case err != nil:
		return saved, false, interpretError(ctx, err)
	}
	r.tenants.Add(rec.Group, rec.Tenant, tid)
	return saved, true, nil
}

// errNoMatch rolls back a transaction whose conditional write matched no
// row.
var errNoMatch = errors.New("no row matched")

// inTx runs fn in a write transaction, committed if fn returns nil and
// rolled back otherwise.
func (r *records) inTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	// Prepare first: preparing takes the writer's one connection, which
	// the transaction holds.
	for _, s := range []*stmt{&r.ensureTenant, &r.tenantID, &r.create, &r.update, &r.claim, &r.claimNext} {
		if _, err := s.get(ctx); err != nil {
			return err
		}
	}
	tx, err := r.e.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, ignoreDone(tx.Rollback()))
	}
	return tx.Commit()
}

// resolveTenant finds or creates tenant in group, in tx, and returns its
// id.
func (r *records) resolveTenant(ctx context.Context, tx *sql.Tx, group, tenant string) (int64, error) {
	ensure, err := r.ensureTenant.get(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := tx.StmtContext(ctx, ensure).ExecContext(ctx, group, tenantName(tenant)); isForeignKey(err) {
		return 0, fmt.Errorf("%w: group %q is not registered", steaderr.ErrUnknownGroup, group)
	} else if err != nil {
		return 0, err
	}
	sel, err := r.tenantID.get(ctx)
	if err != nil {
		return 0, err
	}
	var id int64
	return id, tx.StmtContext(ctx, sel).QueryRowContext(ctx, group, tenantName(tenant)).Scan(&id)
}

// write runs Save's create or conditional update in tx; matched is false
// when it matched no row.
func (r *records) write(ctx context.Context, tx *sql.Tx, rec record.Record, tenantID int64, now time.Time) (_ record.Record, matched bool, err error) {
	if rec.Version == 0 {
		s, err := r.create.get(ctx)
		if err != nil {
			return rec, false, err
		}
		err = tx.StmtContext(ctx, s).QueryRowContext(ctx,
			sql.Named("id", rec.ID), sql.Named("grp", rec.Group), sql.Named("tenant_id", tenantID),
			sql.Named("status", rec.Status), sql.Named("parked", rec.Status.Parked()),
			sql.Named("lease_owner", rec.Lease.Owner), sql.Named("lease_incarnation", rec.Lease.Incarnation),
			sql.Named("lease_expiry", micros(rec.Lease.Expiry)), sql.Named("now", micros(now)), sql.Named("payload", rec.Payload),
		).Scan(&rec.Version)
		if errors.Is(err, sql.ErrNoRows) {
			return rec, false, nil
		}
		rec.UpdatedAt = now
		return rec, err == nil, err
	}
	s, err := r.update.get(ctx)
	if err != nil {
		return rec, false, err
	}
	var expiry int64
	err = tx.StmtContext(ctx, s).QueryRowContext(ctx,
		sql.Named("id", rec.ID), sql.Named("grp", rec.Group), sql.Named("version", rec.Version),
		sql.Named("lease_owner", rec.Lease.Owner), sql.Named("lease_incarnation", rec.Lease.Incarnation),
		sql.Named("lease_expiry", micros(rec.Lease.Expiry)), sql.Named("tenant_id", tenantID),
		sql.Named("status", rec.Status), sql.Named("parked", rec.Status.Parked()), sql.Named("now", micros(now)),
		sql.Named("payload", rec.Payload),
	).Scan(&rec.Lease.Incarnation, &expiry)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, false, nil
	}
	rec.Version++
	rec.Lease.Expiry, rec.UpdatedAt = fromMicros(expiry), now
	return rec, err == nil, err
}

// lookup returns the record stored under id, if any.
func (r *records) lookup(ctx context.Context, id string) (record.Record, bool, error) {
	rec, err := r.Load(ctx, id)
	if errors.Is(err, steaderr.ErrNotFound) {
		return record.Record{}, false, nil
	}
	return rec, err == nil, err
}

func (r *records) Load(ctx context.Context, id string) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	row, err := r.queryRow(ctx, &r.load, id)
	if err != nil {
		return record.Record{}, readError(ctx, err)
	}
	rec, err := scanRecord(row)
	if err != nil {
		return record.Record{}, readError(ctx, err)
	}
	return rec, nil
}

func (r *records) Delete(ctx context.Context, id string) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	return r.exec(ctx, &r.del, id)
}

func (r *records) ListClaimable(ctx context.Context, p record.ListParams) ([]record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return nil, err
	}
	recs, err := r.queryRecords(ctx, nil, &r.list, p.Group, micros(clock.OrNow(p.Now)), p.Limit)
	return recs, listError(ctx, err)
}

func (r *records) ListLeased(ctx context.Context, p record.ListLeasedParams) ([]record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return nil, err
	}
	recs, err := r.queryRecords(ctx, nil, &r.leased, p.Group, micros(clock.OrNow(p.Now)), p.After, p.Limit)
	return recs, listError(ctx, err)
}

// queryRecords runs s, in tx if not nil, with args and reads the records
// it returns.
func (r *records) queryRecords(ctx context.Context, tx *sql.Tx, s *stmt, args ...any) (_ []record.Record, err error) {
	p, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	if tx != nil {
		p = tx.StmtContext(ctx, p)
	}
	rows, err := p.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, rows.Close()) }()
	var out []record.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// claimRecords runs the claim statement s with args in a transaction: a
// claim the engine fails to read back is rolled back, never left held.
func (r *records) claimRecords(ctx context.Context, s *stmt, args ...any) (recs []record.Record, err error) {
	err = r.inTx(ctx, func(tx *sql.Tx) error {
		recs, err = r.queryRecords(ctx, tx, s, args...)
		return err
	})
	return recs, interpretError(ctx, err)
}

func (r *records) Claim(ctx context.Context, p record.ClaimParams) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	now := clock.OrNow(p.Now)
	return sqlengine.Conditional(ctx, func() (record.Record, bool, error) {
		recs, err := r.claimRecords(ctx, &r.claim, sql.Named("owner", p.Owner), sql.Named("expiry", micros(now.Add(p.TTL))),
			sql.Named("now", micros(now)), sql.Named("grp", p.Group), sql.Named("id", p.ID))
		if err != nil || len(recs) != 1 {
			return record.Record{}, false, err
		}
		return recs[0], true, nil
	}, func() error {
		stored, exists, err := r.lookup(ctx, p.ID)
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
	now := clock.OrNow(p.Now)
	recs, err := r.claimRecords(ctx, &r.claimNext, sql.Named("owner", p.Owner), sql.Named("expiry", micros(now.Add(p.TTL))),
		sql.Named("now", micros(now)), sql.Named("grp", p.Group), sql.Named("n", p.N))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(a, b record.Record) int { return strings.Compare(a.ID, b.ID) })
	return recs, nil
}

func (r *records) Renew(ctx context.Context, p record.RenewParams) (record.Lease, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Lease{}, err
	}
	p.Now = clock.OrNow(p.Now)
	return sqlengine.Conditional(ctx, func() (record.Lease, bool, error) {
		var expiry int64
		row, err := r.queryRow(ctx, &r.renew, sql.Named("expiry", micros(p.Now.Add(p.TTL))), sql.Named("id", p.ID),
			sql.Named("grp", p.Group), sql.Named("owner", p.Owner), sql.Named("incarnation", p.Incarnation))
		if err == nil {
			err = row.Scan(&expiry)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return record.Lease{}, false, nil
		}
		return record.Lease{Owner: p.Owner, Incarnation: p.Incarnation, Expiry: fromMicros(expiry)}, err == nil, interpretError(ctx, err)
	}, func() error {
		stored, exists, err := r.lookup(ctx, p.ID)
		if err != nil {
			return err
		}
		return check.Renew(p, stored, exists)
	})
}

func (r *records) Probe(ctx context.Context, p record.ProbeParams) (record.Probe, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Probe{}, err
	}
	now := micros(clock.OrNow(p.Now))
	var unleased bool
	var earliest sql.NullInt64
	row, err := r.queryRow(ctx, &r.probe, p.Group)
	if err == nil {
		err = row.Scan(&unleased, &earliest)
	}
	switch err = listError(ctx, err); {
	case err != nil:
		return record.Probe{}, err
	case unleased || earliest.Valid && earliest.Int64 <= now:
		return record.Probe{Claimable: true}, nil
	case earliest.Valid:
		return record.Probe{Until: time.Duration(earliest.Int64-now) * time.Microsecond}, nil
	}
	return record.Probe{}, nil
}

// WatchClaimable returns a nil channel: SQLite has none, so waiters
// poll.
func (r *records) WatchClaimable(ctx context.Context, _ string) (<-chan struct{}, bool, func(), error) {
	return nil, false, func() {}, r.e.check(ctx)
}
