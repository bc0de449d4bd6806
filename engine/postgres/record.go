package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/steadkit/stead/internal/cas"
	"github.com/steadkit/stead/internal/tenantid"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/record/check"
	"github.com/steadkit/stead/steaderr"
)

// records is the engine's record.Engine. Every operation is one
// statement: a write is conditional (a compare-and-swap), and when it
// matches no row the stored record is read back to say why
// (record/check). A write that may make a record claimable at once calls
// pg_notify in the same statement, so waiters learn of it on commit.
type records struct {
	e       *Engine
	tenants tenantid.Cache
	// channel is the NOTIFY channel of records made claimable, one per
	// schema; its payload is the group.
	channel string
	sql     struct {
		registerGroup, groupExists, ensureTenant, tenantID string
		create, keep, release, load, lookup, del           string
		list, claim, claimNext, renew, probe               string
	}
}

func (r *records) init(e *Engine) {
	r.e = e
	r.channel = fmt.Sprintf("stead_records_%016x", uint64(e.lockKey("records")))
	recs, groups, tenants := e.ident+".records", e.ident+".record_groups", e.ident+".record_tenants"
	// colsOf lists a record's columns, in scanRecord's order, of records
	// aliased a joined to its tenant t.
	colsOf := func(a string) string {
		return strings.ReplaceAll("a.id, a.grp, t.name, a.status, a.version, a.lease_owner, a.lease_incarnation, a.lease_expiry, a.updated_at, a.payload", "a.", a+".")
	}
	cols := colsOf("r")
	returning := strings.Replace(cols, "t.name", "(SELECT name FROM "+tenants+" WHERE id = r.tenant_id)", 1)
	from := " FROM " + recs + " r JOIN " + tenants + " t ON t.id = r.tenant_id "
	// notify wakes the group's waiters when the row, as written, is
	// claimable at the instant it was written. The channel is stead's own
	// name (hex digits), not input.
	notify := ", CASE WHEN NOT r.parked AND (r.lease_owner = '' OR r.lease_expiry <= r.updated_at) THEN pg_notify('" + r.channel + "', r.grp) END"
	s := &r.sql
	s.registerGroup = "INSERT INTO " + groups + " (name) VALUES ($1) ON CONFLICT DO NOTHING"
	s.groupExists = "SELECT EXISTS (SELECT 1 FROM " + groups + " WHERE name = $1)"
	s.ensureTenant = "INSERT INTO " + tenants + " (grp, name) VALUES ($1, $2) ON CONFLICT DO NOTHING"
	s.tenantID = "SELECT id FROM " + tenants + " WHERE grp = $1 AND name IS NOT DISTINCT FROM $2::text"
	s.create = "INSERT INTO " + recs + ` AS r
		(id, grp, tenant_id, status, parked, version, lease_owner, lease_incarnation, lease_expiry, updated_at, payload)
		VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, ` + nowSQL(10) + `, $9)
		ON CONFLICT (id) DO NOTHING RETURNING r.updated_at` + notify
	// An update either keeps the stored grant or releases the lease: $1
	// id, $2 group, $3 version, $4 tenant id, $5 status, $6 parked, $7
	// now, $8 payload; to keep, $9 owner and $10 incarnation; to release,
	// $9 the expiry to store.
	update := "UPDATE " + recs + " AS r SET tenant_id = $4, status = $5, parked = $6, payload = $8, version = r.version + 1, updated_at = " + nowSQL(7)
	where := " WHERE r.id = $1 AND r.grp = $2 AND r.version = $3"
	returning3 := " RETURNING r.lease_incarnation, r.lease_expiry, r.updated_at" + notify
	s.keep = update + where + " AND r.lease_owner = $9 AND r.lease_incarnation = $10" + returning3
	s.release = update + ", lease_owner = '', lease_expiry = $9" + where + returning3
	s.load = "SELECT " + cols + from + "WHERE r.id = $1"
	s.lookup = "SELECT " + cols + ", " + nowSQL(2) + from + "WHERE r.id = $1"
	s.del = "DELETE FROM " + recs + " WHERE id = $1"
	// unleased and expired select a group's claimable records, through
	// records_unleased and records_leased: the group is $g, now is $n.
	// byID orders them as those indexes do (see the migration).
	const byID = `id COLLATE "POSIX"`
	unleased := func(g int) string {
		return fmt.Sprintf(" FROM %s WHERE grp = $%d AND NOT parked AND lease_owner = ''", recs, g)
	}
	expired := func(g, n int) string {
		return fmt.Sprintf(" FROM %s WHERE grp = $%d AND NOT parked AND lease_owner <> '' AND lease_expiry <= %s", recs, g, nowSQL(n))
	}
	// The listing sorts every expired lease of the group by id: ordering
	// that branch by id would invite a plan walking the primary key
	// through every group.
	s.list = "SELECT " + colsOf("c") + " FROM ((SELECT *" + unleased(1) + " ORDER BY " + byID + " LIMIT $3) UNION ALL (SELECT *" +
		expired(1, 2) + ")) c JOIN " + tenants + " t ON t.id = c.tenant_id ORDER BY c.id LIMIT $3"
	// $1 owner, $2 ttl, $3 now, $4 group, $5 id or n.
	claimSet := "UPDATE " + recs + " AS r SET version = r.version + 1, lease_owner = $1, lease_incarnation = r.lease_incarnation + 1, " +
		"lease_expiry = " + nowSQL(3) + " + $2::interval, updated_at = " + nowSQL(3) + " "
	s.claim = claimSet + "WHERE r.id = $5 AND r.grp = $4 AND (r.lease_owner IN ('', $1) OR r.lease_expiry <= " + nowSQL(3) + ") RETURNING " + returning
	// Expired leases first, then unleased records. A WITH query runs only
	// as far as it is read, so the unleased one runs, and locks, only when
	// there are fewer than $5 expired leases. = ANY (ARRAY (...)), not
	// IN (...): with IN, a generic plan that guesses many ids joins them
	// to a sequential scan of every group.
	s.claimNext = claimSet + "WHERE r.id = ANY (ARRAY (WITH " +
		"expired AS (SELECT id" + expired(4, 3) + " ORDER BY lease_expiry, " + byID + " LIMIT $5 FOR UPDATE SKIP LOCKED), " +
		"unleased AS (SELECT id" + unleased(4) + " ORDER BY " + byID + " LIMIT $5 FOR UPDATE SKIP LOCKED) " +
		"SELECT id FROM expired UNION ALL SELECT id FROM unleased LIMIT $5)) RETURNING " + returning
	s.renew = "UPDATE " + recs + " SET lease_expiry = " + nowSQL(1) + ` + $2::interval
		WHERE id = $3 AND grp = $4 AND lease_owner = $5 AND lease_incarnation = $6 RETURNING lease_expiry`
	// The first unleased record, and the earliest lease: expired, the
	// group has recovery work; else it is when the next lease lapses.
	// Each is read in its index's order, one entry: as EXISTS or min(), a
	// generic plan may scan the whole table for it.
	s.probe = "SELECT (SELECT id" + unleased(1) + " ORDER BY " + byID + " LIMIT 1) IS NOT NULL, (SELECT lease_expiry FROM " + recs +
		" WHERE grp = $1 AND NOT parked AND lease_owner <> '' ORDER BY lease_expiry LIMIT 1), " + nowSQL(2)
}

// tenantName is how a tenant's name is stored: NULL for the default.
func tenantName(tenant string) any {
	if tenant == "" {
		return nil
	}
	return tenant
}

// scanRecord reads the columns of records.sql.load, then extra.
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

func isForeignKey(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" // foreign_key_violation
}

func (r *records) RegisterGroup(ctx context.Context, group string) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	_, err := r.e.pool.Exec(ctx, r.sql.registerGroup, group)
	return interpretError(err)
}

func (r *records) GroupExists(ctx context.Context, group string) (bool, error) {
	if err := r.e.check(ctx); err != nil {
		return false, err
	}
	var ok bool
	err := interpretError(r.e.pool.QueryRow(ctx, r.sql.groupExists, group).Scan(&ok))
	if errors.Is(err, errNoSchema) {
		return false, nil
	}
	return ok, err
}

func (r *records) Save(ctx context.Context, p record.SaveParams) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	rec := p.Record
	return cas.Do(ctx, func() (record.Record, bool, error) {
		tid, ok := r.tenants.ID(rec.Group, rec.Tenant)
		if !ok {
			return r.saveResolving(ctx, rec, p.Now)
		}
		saved, err := r.write(ctx, r.e.pool, rec, tid, p.Now)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return saved, false, nil
		case isForeignKey(err): // the cached tenant is gone: resolve it again
			r.tenants.Forget(rec.Group, rec.Tenant)
			return r.saveResolving(ctx, rec, p.Now)
		}
		return saved, err == nil, interpretError(err)
	}, func() error {
		stored, exists, _, err := r.lookupAt(ctx, rec.ID, p.Now)
		if err != nil {
			return err
		}
		return check.Save(rec, stored, exists)
	})
}

// saveResolving finds or creates rec's tenant and writes rec in one
// transaction, so a write that matches no row leaves no tenant behind. The
// tenant's insert and select are two statements: the select's snapshot
// must see a row a concurrent insert committed while this one waited on
// it.
func (r *records) saveResolving(ctx context.Context, rec record.Record, now time.Time) (_ record.Record, matched bool, err error) {
	tx, err := r.e.pool.Begin(ctx)
	if err != nil {
		return rec, false, interpretError(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	_, err = tx.Exec(ctx, r.sql.ensureTenant, rec.Group, tenantName(rec.Tenant))
	if isForeignKey(err) {
		return rec, false, fmt.Errorf("%w: group %q is not registered", steaderr.ErrUnknownGroup, rec.Group)
	}
	var tid int64
	if err == nil {
		err = tx.QueryRow(ctx, r.sql.tenantID, rec.Group, tenantName(rec.Tenant)).Scan(&tid)
	}
	if err != nil {
		return rec, false, interpretError(err)
	}
	saved, err := r.write(ctx, tx, rec, tid, now)
	if errors.Is(err, pgx.ErrNoRows) {
		return saved, false, nil
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return saved, false, interpretError(err)
	}
	r.tenants.Add(rec.Group, rec.Tenant, tid)
	return saved, true, nil
}

// write runs Save's create or conditional update; pgx.ErrNoRows when it
// matched no row.
func (r *records) write(ctx context.Context, q querier, rec record.Record, tenantID int64, now time.Time) (record.Record, error) {
	var err error
	if rec.Version == 0 {
		err = q.QueryRow(ctx, r.sql.create, rec.ID, rec.Group, tenantID, rec.Status, rec.Status.Parked(),
			rec.Lease.Owner, rec.Lease.Incarnation, rec.Lease.Expiry, rec.Payload, nowArg(now),
		).Scan(&rec.UpdatedAt, nil)
	} else {
		query, args := r.sql.keep, []any{rec.ID, rec.Group, rec.Version, tenantID, rec.Status, rec.Status.Parked(), nowArg(now), rec.Payload}
		if rec.Lease.Owner == "" {
			query, args = r.sql.release, append(args, rec.Lease.Expiry)
		} else {
			args = append(args, rec.Lease.Owner, rec.Lease.Incarnation)
		}
		err = q.QueryRow(ctx, query, args...).Scan(&rec.Lease.Incarnation, &rec.Lease.Expiry, &rec.UpdatedAt, nil)
	}
	rec.Version++
	rec.Lease.Expiry, rec.UpdatedAt = rec.Lease.Expiry.UTC(), rec.UpdatedAt.UTC()
	return rec, err
}

// lookupAt returns the record stored under id, if any, and the instant
// now stands for (the database's now() for the zero time).
func (r *records) lookupAt(ctx context.Context, id string, now time.Time) (_ record.Record, exists bool, at time.Time, _ error) {
	rec, err := scanRecord(r.e.pool.QueryRow(ctx, r.sql.lookup, id, nowArg(now)), &at)
	switch err = interpretError(err); {
	case errors.Is(err, steaderr.ErrNotFound):
		return record.Record{}, false, now, nil
	case err != nil:
		return record.Record{}, false, now, err
	}
	return rec, true, at.UTC(), nil
}

func (r *records) Load(ctx context.Context, id string) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	rec, err := scanRecord(r.e.pool.QueryRow(ctx, r.sql.load, id))
	if err = interpretError(err); errors.Is(err, errNoSchema) {
		return record.Record{}, steaderr.ErrNotFound
	}
	return rec, err
}

func (r *records) Delete(ctx context.Context, id string) error {
	if err := r.e.check(ctx); err != nil {
		return err
	}
	_, err := r.e.pool.Exec(ctx, r.sql.del, id)
	return interpretError(err)
}

// queryRecords runs query and reads the records it returns, in id order.
func (r *records) queryRecords(ctx context.Context, query string, args ...any) ([]record.Record, error) {
	rows, err := r.e.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
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
	recs, err := r.queryRecords(ctx, r.sql.list, p.Group, nowArg(p.Now), p.Limit)
	if errors.Is(err, errNoSchema) {
		return nil, nil
	}
	return recs, err
}

func (r *records) Claim(ctx context.Context, p record.ClaimParams) (record.Record, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Record{}, err
	}
	return cas.Do(ctx, func() (record.Record, bool, error) {
		recs, err := r.queryRecords(ctx, r.sql.claim, p.Owner, interval(p.TTL), nowArg(p.Now), p.Group, p.ID)
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
	return r.queryRecords(ctx, r.sql.claimNext, p.Owner, interval(p.TTL), nowArg(p.Now), p.Group, p.N)
}

func (r *records) Renew(ctx context.Context, p record.RenewParams) (record.Lease, error) {
	if err := r.e.check(ctx); err != nil {
		return record.Lease{}, err
	}
	return cas.Do(ctx, func() (record.Lease, bool, error) {
		lease := record.Lease{Owner: p.Owner, Incarnation: p.Incarnation}
		err := r.e.pool.QueryRow(ctx, r.sql.renew, nowArg(p.Now), interval(p.TTL), p.ID, p.Group, p.Owner, p.Incarnation).Scan(&lease.Expiry)
		if errors.Is(err, pgx.ErrNoRows) {
			return lease, false, nil
		}
		lease.Expiry = lease.Expiry.UTC()
		return lease, err == nil, interpretError(err)
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
	err := interpretError(r.e.pool.QueryRow(ctx, r.sql.probe, p.Group, nowArg(p.Now)).Scan(&unleased, &earliest, &now))
	switch {
	case errors.Is(err, errNoSchema):
		return record.Probe{}, nil
	case err != nil:
		return record.Probe{}, err
	case unleased || earliest != nil && !earliest.After(now):
		return record.Probe{Claimable: true}, nil
	case earliest != nil:
		return record.Probe{Until: earliest.Sub(now)}, nil
	}
	return record.Probe{}, nil
}

// WatchClaimable subscribes to the engine's listener, live while it
// listens; without one (PgBouncer mode without a listen URL) the channel
// is nil, so waiters poll.
func (r *records) WatchClaimable(ctx context.Context, group string) (<-chan struct{}, bool, func(), error) {
	if err := r.e.check(ctx); err != nil {
		return nil, false, func() {}, err
	}
	if r.e.listen == nil {
		return nil, false, func() {}, nil
	}
	return r.e.listen.watch(r.channel, group)
}
