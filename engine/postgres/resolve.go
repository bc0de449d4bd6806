package postgres

import (
	"context"
	"errors"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

var (
	// sqlRefResolve answers the live ref $1 at $2 (NULL: now()) joined to
	// its blob's stored form, one snapshot, and whether it is due a
	// renewal of $3 µs: it expires in less than half of that. A weak ref's
	// blob row goes with the ref, so the join never finds one without the
	// other.
	sqlRefResolve = declare("sqlRefResolve", `SELECT r.name, r.key, r.version, r.annotation, r.expiry, r.weak, b.size, b.value, b.chunks, b.object,
	r.expiry IS NOT NULL AND 2 * (r.expiry - coalesce($2::timestamptz, now())) < $3::bigint * interval '1 microsecond'
FROM {schema}.refs r JOIN {schema}.blobs b ON b.key = r.key
WHERE r.name = $1 AND (r.expiry IS NULL OR r.expiry > coalesce($2::timestamptz, now()))`)

	// sqlRefRenewDue locks the blob row of $2, as sqlRefTouch does, then
	// renews the ref $1 to expire $3 µs from $4 (NULL: clock_timestamp())
	// if it still has version $5 (so still names $2) and is live and due
	// then: it expires in less than half of $3. It answers the ref if it
	// renewed it.
	sqlRefRenewDue = declare("sqlRefRenewDue", `WITH b AS (
	SELECT key FROM {schema}.blobs WHERE key = $2 FOR KEY SHARE
)
UPDATE {schema}.refs
SET expiry = coalesce($4::timestamptz, clock_timestamp()) + ($3::bigint / 1000000) * interval '1 second' + ($3::bigint % 1000000) * interval '1 microsecond'
WHERE name = $1 AND key = (SELECT key FROM b) AND version = $5::bigint
  AND expiry > coalesce($4::timestamptz, clock_timestamp())
  AND 2 * (expiry - coalesce($4::timestamptz, clock_timestamp())) < $3::bigint * interval '1 microsecond'
RETURNING name, key, version, annotation, expiry, weak`)
)

// Resolve reads the ref joined to its blob in one statement. A ref due a
// renewal is renewed under its key's blob row lock only while it keeps
// the version read, so the stored form read is still its blob's (a
// version names one Set, whose key stays stored while the ref lives); a
// ref renewed, moved or gone meanwhile is read again, for as long as ctx
// lasts.
func (r *refs) Resolve(ctx context.Context, p ref.ResolveParams) (ref.Ref, blob.Stored, error) {
	if err := r.e.check(ctx); err != nil {
		return ref.Ref{}, blob.Stored{}, err
	}
	for {
		var rr refRow
		var br blobRow
		var due bool
		err := r.e.pool.QueryRow(ctx, r.e.sql(sqlRefResolve), p.Name, nowArg(p.Now), p.TTL.Microseconds()).Scan(append(append(rr.dest(), br.dest()...), &due)...)
		if err := readError(err); err != nil {
			return ref.Ref{}, blob.Stored{}, err
		}
		got, err := rr.ref()
		if err != nil || !due {
			return got, br.stored(), err
		}
		var renewed refRow
		err = r.e.retryTransient(ctx, func() error {
			return r.e.pool.QueryRow(ctx, r.e.sql(sqlRefRenewDue), p.Name, got.Key.String(), p.TTL.Microseconds(), nowArg(p.Now), got.Version).Scan(renewed.dest()...)
		})
		switch err = readError(err); {
		case err == nil:
			got, err := renewed.ref()
			return got, br.stored(), err
		case !errors.Is(err, steaderr.ErrNotFound):
			return ref.Ref{}, blob.Stored{}, err
		}
		if err := ctx.Err(); err != nil {
			return ref.Ref{}, blob.Stored{}, err
		}
	}
}
