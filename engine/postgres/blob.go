package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/steaderr"
)

const (
	// putFlushers is how many group commits run at once: one commits while
	// the next forms. More flushers make smaller batches and more commits
	// (docs/decisions/0002-group-commit.md).
	putFlushers = 2
	// maxBatchPuts and maxBatchBytes bound one group commit.
	maxBatchPuts  = 64
	maxBatchBytes = 4 << 20
)

// The blob statements. A put is one statement per batch: the blobs are
// inserted with ON CONFLICT DO UPDATE … WHERE false, which locks an existing
// row against arbitration's FOR UPDATE without writing a new row version
// (and inserts again a row arbitration deleted first). A new row carries
// its put's pin (pin_owner, pin_expiry), so a lone put writes one row; the
// pins of existing rows, and of other owners in the batch, are upserted
// into pins only after every blob row is locked (the scalar subquery runs
// the blob insert to completion first), so batches lock rows in one order:
// blobs by key, then pins by (key, owner). It answers the keys it
// inserted: the puts that stored their blob.
// docs/decisions/0006-put-statement.md, 0021-gc-at-scale.md.
var (
	sqlPut = declare("sqlPut", `WITH b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, pin_owner, pin_expiry)
	SELECT k, s, v, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[], $5::bigint[], $6::timestamptz[]) AS u(k, s, v, o, d, n)
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING key, pin_owner
), pinned AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($7::text[], $8::text[], $9::bigint[], $10::timestamptz[]) AS u(k, o, d, n)
	WHERE (SELECT count(*) FROM b) >= 0
	AND NOT EXISTS (SELECT FROM b WHERE b.key = u.k AND b.pin_owner = u.o)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT key FROM b`)

	// sqlPutOne is sqlPut for a batch of one put without children, its
	// arguments scalars: unnesting one-element arrays costs a lone put a
	// sixth of its time.
	sqlPutOne = declare("sqlPutOne", `WITH b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, pin_owner, pin_expiry)
	VALUES ($1, $2, $3, $4, coalesce($6::timestamptz, now()) + $5::bigint * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING key
), pinned AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT $1, $4, coalesce($6::timestamptz, now()) + $5::bigint * interval '1 microsecond'
	WHERE NOT EXISTS (SELECT FROM b)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT key FROM b`)

	// sqlPutNaive is the known-unsafe put, for tests that prove the
	// torture test sees the race: ON CONFLICT DO NOTHING does not wait on
	// arbitration's row lock, so its pin can commit beside a deletion.
	sqlPutNaive = declare("sqlPutNaive", `WITH b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, pin_owner, pin_expiry)
	SELECT k, s, v, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[], $5::bigint[], $6::timestamptz[]) AS u(k, s, v, o, d, n)
	ON CONFLICT (key) DO NOTHING
	RETURNING key, pin_owner
), pinned AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($7::text[], $8::text[], $9::bigint[], $10::timestamptz[]) AS u(k, o, d, n)
	WHERE (SELECT count(*) FROM b) >= 0
	AND NOT EXISTS (SELECT FROM b WHERE b.key = u.k AND b.pin_owner = u.o)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT key FROM b`)

	// sqlPutEdges is sqlPut for a batch in which some puts declare
	// children ($9 parents, $10 children: the edges). First every stored
	// row of the batch, parents and children alike ($8, sorted), is
	// locked FOR KEY SHARE, one index probe a key, in the array's order:
	// writers share that lock, so parents naming one child (images sharing
	// a base layer) do not queue on its row, while arbitration's FOR
	// UPDATE conflicts with it and waits, or is waited for
	// (docs/decisions/0046-shared-child-locks.md). A parent is refused
	// when one of its children is not stored (missing) or when it is
	// stored without one of them (fixed: a blob's children are those it
	// was stored with). A parent another writer stored after this
	// statement's snapshot (raced: neither locked nor inserted here)
	// cannot be judged by it. Refused and raced parents are not published
	// or pinned by this batch, unless a put of one without children is in
	// the batch too ($7, $15 say which rows and pins come from such puts);
	// the edges of the others are inserted, and the store's declaration of
	// liveness recorded once (gc_declared); the refused (parent, child,
	// edgeMissing or edgeFixed) and raced (parent, '', edgeRaced) rows are
	// answered, and the keys inserted (key, '', putCreated). Every probe of blobs and blob_edges is a correlated
	// subquery (the OFFSET 0 keeps the anti-join from being flattened), so
	// that a plan made while the tables were small, and kept by the
	// prepared statement, never scans them whole as they grow: a child
	// costs an index probe and a lock whatever the tables hold
	// (docs/decisions/0050-put-statement-per-child-cost.md).
	sqlPutEdges = declare("sqlPutEdges", `WITH probe AS MATERIALIZED (
	SELECT (SELECT key FROM {schema}.blobs WHERE key = u.k FOR KEY SHARE) AS key FROM unnest($8::text[]) AS u(k)
), l AS (
	SELECT key FROM probe WHERE key IS NOT NULL
), e AS (
	SELECT p, c FROM unnest($9::text[], $10::text[]) AS u(p, c)
), missing AS (
	SELECT p, c FROM e WHERE (SELECT count(*) FROM l) >= 0 AND c NOT IN (SELECT key FROM l)
), fixed AS (
	SELECT p, c FROM e WHERE p IN (SELECT key FROM l)
	AND NOT EXISTS (SELECT FROM {schema}.blob_edges x WHERE x.parent = e.p AND x.child = e.c OFFSET 0)
), refused AS (
	SELECT p FROM missing UNION SELECT p FROM fixed
), b AS (
	INSERT INTO {schema}.blobs AS t (key, size, value, pin_owner, pin_expiry)
	SELECT k, s, v, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[], $5::bigint[], $6::timestamptz[], $7::boolean[]) AS u(k, s, v, o, d, n, plain)
	WHERE plain OR k NOT IN (SELECT p FROM refused)
	ON CONFLICT (key) DO UPDATE SET size = t.size WHERE false
	RETURNING key, pin_owner
), raced AS (
	SELECT DISTINCT p FROM e
	WHERE p NOT IN (SELECT p FROM refused) AND p NOT IN (SELECT key FROM l) AND p NOT IN (SELECT key FROM b)
), edges AS (
	INSERT INTO {schema}.blob_edges (parent, child)
	SELECT p, c FROM e WHERE p NOT IN (SELECT p FROM refused) AND p NOT IN (SELECT p FROM raced)
	ON CONFLICT DO NOTHING
	RETURNING 1
), declared AS (
	INSERT INTO {schema}.gc_declared (id) SELECT true
	WHERE EXISTS (SELECT FROM edges) AND NOT EXISTS (SELECT FROM {schema}.gc_declared)
	ON CONFLICT DO NOTHING
), pinned AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT k, o, coalesce(n, now()) + d * interval '1 microsecond'
	FROM unnest($11::text[], $12::text[], $13::bigint[], $14::timestamptz[], $15::boolean[]) AS u(k, o, d, n, plain)
	WHERE (SELECT count(*) FROM b) >= 0
	AND (plain OR k NOT IN (SELECT p FROM refused UNION ALL SELECT p FROM raced))
	AND NOT EXISTS (SELECT FROM b WHERE b.key = u.k AND b.pin_owner = u.o)
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
)
SELECT p, c, 'missing' FROM missing UNION ALL SELECT p, c, 'fixed' FROM fixed UNION ALL SELECT p, '', 'raced' FROM raced
UNION ALL SELECT key, '', 'created' FROM b ORDER BY 1, 2`)

	sqlStat     = declare("sqlStat", `SELECT size FROM {schema}.blobs WHERE key = $1`)
	sqlListPage = declare("sqlListPage", `SELECT key, size FROM {schema}.blobs WHERE key > $1 ORDER BY key LIMIT $2`)

	// sqlPin locks the blob row FOR KEY SHARE (pins of one key by several
	// owners do not queue on it; an arbitration's FOR UPDATE waits), then
	// pins it in pins; 0 rows: the blob is absent.
	sqlPin = declare("sqlPin", `WITH b AS (
	SELECT key FROM {schema}.blobs WHERE key = $1 FOR KEY SHARE
), p AS (
	INSERT INTO {schema}.pins AS p (key, owner, expiry)
	SELECT key, $2, coalesce($4::timestamptz, now()) + $3 * interval '1 microsecond' FROM b
	ON CONFLICT (key, owner) DO UPDATE SET expiry = greatest(p.expiry, excluded.expiry)
	RETURNING 1
)
SELECT count(*) FROM b`)

	// sqlRenewPin extends a live pin only: the owner's row in pins, else
	// the pin in the blob's row; an expired or absent one stays so.
	// Liveness is judged at clock_timestamp(), the instant the row is
	// read, not at now(), the statement's start: a renewal that started
	// before the pin expired but reached the row after an arbitration had
	// judged it expired (and deleted the blob) would otherwise resurrect
	// it. The new expiry runs from now(), the earlier instant. The inline
	// update runs only when pins had no live row (an initplan), so a
	// renewal locks one of the two rows, never both.
	sqlRenewPin = declare("sqlRenewPin", `WITH p AS (
	UPDATE {schema}.pins
	SET expiry = greatest(expiry, coalesce($4::timestamptz, now()) + $3 * interval '1 microsecond')
	WHERE key = $1 AND owner = $2 AND expiry > coalesce($4::timestamptz, clock_timestamp())
	RETURNING 1
), i AS (
	UPDATE {schema}.blobs
	SET pin_expiry = greatest(pin_expiry, coalesce($4::timestamptz, now()) + $3 * interval '1 microsecond')
	WHERE key = $1 AND pin_owner = $2 AND pin_expiry > coalesce($4::timestamptz, clock_timestamp())
	AND NOT EXISTS (SELECT FROM p)
	RETURNING 1
)
SELECT (SELECT count(*) FROM p) + (SELECT count(*) FROM i)`)

	// sqlUnpin removes the owner's pin, in the blob's row while it is live
	// there, then in pins: rows are locked in the order a put locks them
	// (the initplan runs the blob update first), so an unpin never
	// deadlocks with an arbitration holding the blob row.
	sqlUnpin = declare("sqlUnpin", `WITH i AS (
	UPDATE {schema}.blobs SET pin_owner = NULL, pin_expiry = NULL
	WHERE key = $1 AND pin_owner = $2 AND pin_expiry > now()
	RETURNING 1
)
DELETE FROM {schema}.pins WHERE key = $1 AND owner = $2 AND (SELECT count(*) FROM i) >= 0`)
)

type blobs struct {
	e      *Engine
	commit *groupcommit.Committer[*groupcommit.Put]
	// naive selects sqlPutNaive (tests only).
	naive atomic.Bool
}

func (b *blobs) init(e *Engine) {
	b.e = e
	b.commit = groupcommit.New(putFlushers, maxBatchPuts, maxBatchBytes, b.flush)
}

// Put batches inline values; a chunked value is published on its own, its
// statement the batch's for one row plus the upload's end
// (engine/postgres/chunks.go).
func (b *blobs) Put(ctx context.Context, p blob.PutParams) (bool, error) {
	if err := b.e.check(ctx); err != nil {
		return false, err
	}
	if p.Chunks != 0 {
		return b.publish(ctx, p)
	}
	put := &groupcommit.Put{Key: p.Key.String(), Value: p.Value, Pin: groupcommit.Pin{Owner: p.Owner, TTL: p.TTL, Now: p.Now}, Children: keyTexts(p.Children)}
	if err := b.commit.Put(ctx, put); err != nil {
		return false, err
	}
	return put.Created, nil
}

// keyTexts returns keys' text forms; nil for none.
func keyTexts(keys []blob.Key) []string {
	if len(keys) == 0 {
		return nil
	}
	texts := make([]string, len(keys))
	for i, k := range keys {
		texts[i] = k.String()
	}
	return texts
}

// The verdicts sqlPutEdges answers for a parent it does not store.
const (
	edgeMissing = "missing" // (parent, child): the child is not stored
	edgeFixed   = "fixed"   // (parent, child): the parent is stored without this child
	edgeRaced   = "raced"   // (parent, ""): another writer stored the parent meanwhile
	// putCreated (key, ""): the statement inserted key.
	putCreated = "created"
)

// flush stores one batch, blobs and pins, in one statement: one round
// trip, one commit. The batch is sorted and de-duplicated by key (pins by
// key and owner), so that concurrent batches lock the rows they share in
// one order; a deadlock or serialization failure that still happens (with
// another writer of the schema) is retried here, not handed to every
// caller of the batch. Of the puts of a key the statement inserted, the
// first in the batch is told it stored the blob (Put.Created).
func (b *blobs) flush(ctx context.Context, batch []*groupcommit.Request[*groupcommit.Put]) error {
	stmt, args, edges := b.putStatement(batch)
	if !edges {
		created := map[string]bool{}
		err := b.e.retryTransient(ctx, func() error {
			clear(created)
			rows, err := b.e.pool.Query(ctx, stmt, args...)
			if err != nil {
				return err
			}
			return readCreated(rows, created)
		})
		if err != nil {
			return err
		}
		tellCreated(batch, created)
		return nil
	}
	missing, fixed, raced, created := map[string][]string{}, map[string][]string{}, map[string]bool{}, map[string]bool{}
	err := b.e.retryTransient(ctx, func() error {
		clear(missing)
		clear(fixed)
		clear(raced)
		clear(created)
		rows, err := b.e.pool.Query(ctx, stmt, args...)
		if err != nil {
			return err
		}
		var p, c, kind string
		_, err = pgx.ForEachRow(rows, []any{&p, &c, &kind}, func() error {
			switch kind {
			case edgeMissing:
				missing[p] = append(missing[p], c)
			case edgeFixed:
				fixed[p] = append(fixed[p], c)
			case edgeRaced:
				raced[p] = true
			case putCreated:
				created[p] = true
			default:
				return fmt.Errorf("postgres: put: unknown edge verdict %q", kind)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	var again []*groupcommit.Request[*groupcommit.Put]
	for _, r := range batch {
		r.Err = nil
		r.Item.Created = false
		if len(r.Item.Children) == 0 {
			continue
		}
		if m := missing[r.Item.Key]; len(m) > 0 {
			r.Err = missingChildren(m)
		} else if f := fixed[r.Item.Key]; len(f) > 0 {
			r.Err = blob.ChildrenFixedError(r.Item.Key, f)
		} else if raced[r.Item.Key] {
			again = append(again, r)
		}
	}
	tellCreated(batch, created)
	if len(again) > 0 {
		// Stored by another writer meanwhile: a new statement sees its
		// row and edges, and judges these puts as re-puts.
		return b.flush(ctx, again)
	}
	return nil
}

// putStatement returns the statement storing batch, sorted and
// de-duplicated by key (pins by key and owner) so that concurrent batches
// lock the rows they share in one order, and its arguments: sqlPut's, or
// sqlPutOne's for a batch of one, unless edges, when some put declares
// children and it is sqlPutEdges's. Without edges the statement answers
// the keys it inserted (readCreated).
func (b *blobs) putStatement(batch []*groupcommit.Request[*groupcommit.Put]) (stmt string, args []any, edges bool) {
	// A row or pin is plain when a put of it declaring no children is in
	// the batch: it is stored whatever children the others miss.
	plainKey := map[string]bool{}
	plainPin := map[[2]string]bool{}
	var parents, children []string
	for _, r := range batch {
		if len(r.Item.Children) == 0 {
			plainKey[r.Item.Key] = true
			plainPin[[2]string{r.Item.Key, r.Item.Pin.Owner}] = true
		}
		for _, c := range r.Item.Children {
			parents, children = append(parents, r.Item.Key), append(children, c)
		}
	}
	pins := slices.Clone(batch)
	slices.SortFunc(pins, func(x, y *groupcommit.Request[*groupcommit.Put]) int {
		return cmp.Or(strings.Compare(x.Item.Key, y.Item.Key), strings.Compare(x.Item.Pin.Owner, y.Item.Pin.Owner), -laterPin(x.Item.Pin, y.Item.Pin))
	})
	pins = slices.CompactFunc(pins, func(x, y *groupcommit.Request[*groupcommit.Put]) bool {
		return x.Item.Key == y.Item.Key && x.Item.Pin.Owner == y.Item.Pin.Owner
	})
	// Requests with equal keys carry equal values (the key is their digest).
	blobRows := slices.CompactFunc(slices.Clone(pins), func(x, y *groupcommit.Request[*groupcommit.Put]) bool { return x.Item.Key == y.Item.Key })

	keys := make([]string, len(blobRows))
	sizes := make([]int64, len(blobRows))
	values := make([][]byte, len(blobRows))
	blobOwners := make([]string, len(blobRows))
	blobTTLs := make([]int64, len(blobRows))
	blobNows := make([]pgtype.Timestamptz, len(blobRows))
	blobPlain := make([]bool, len(blobRows))
	for i, r := range blobRows {
		keys[i], sizes[i], values[i] = r.Item.Key, int64(len(r.Item.Value)), r.Item.Value
		blobOwners[i], blobTTLs[i], blobNows[i] = r.Item.Pin.Owner, r.Item.Pin.TTL.Microseconds(), nowTimestamp(r.Item.Pin.Now)
		blobPlain[i] = plainKey[r.Item.Key]
	}
	pinKeys := make([]string, len(pins))
	owners := make([]string, len(pins))
	ttls := make([]int64, len(pins))
	nows := make([]pgtype.Timestamptz, len(pins))
	pinPlain := make([]bool, len(pins))
	for i, r := range pins {
		pinKeys[i], owners[i], ttls[i], nows[i] = r.Item.Key, r.Item.Pin.Owner, r.Item.Pin.TTL.Microseconds(), nowTimestamp(r.Item.Pin.Now)
		pinPlain[i] = plainPin[[2]string{r.Item.Key, r.Item.Pin.Owner}]
	}
	if len(children) == 0 {
		switch {
		case b.naive.Load():
			stmt = b.e.sql(sqlPutNaive)
		case len(batch) == 1:
			return b.e.sql(sqlPutOne), []any{keys[0], sizes[0], values[0], owners[0], ttls[0], nows[0]}, false
		default:
			stmt = b.e.sql(sqlPut)
		}
		// Positional arguments: pgx rewrites a named statement's text on
		// every call, a fifth of a lone put's client CPU.
		return stmt, []any{keys, sizes, values, blobOwners, blobTTLs, blobNows, pinKeys, owners, ttls, nows}, false
	}
	lock := slices.Concat(keys, children)
	slices.Sort(lock)
	lock = slices.Compact(lock)
	return b.e.sql(sqlPutEdges), []any{keys, sizes, values, blobOwners, blobTTLs, blobNows, blobPlain, lock, parents, children, pinKeys, owners, ttls, nows, pinPlain}, true
}

// readCreated reads the keys a put statement without edges inserted
// into created.
func readCreated(rows pgx.Rows, created map[string]bool) error {
	var key string
	_, err := pgx.ForEachRow(rows, []any{&key}, func() error {
		created[key] = true
		return nil
	})
	return err
}

// tellCreated marks, for each key in created, the first put of it in the
// batch that did not fail, and no other, as the one that stored it.
func tellCreated(batch []*groupcommit.Request[*groupcommit.Put], created map[string]bool) {
	for _, r := range batch {
		r.Item.Created = false
		if r.Err == nil && created[r.Item.Key] {
			r.Item.Created = true
			delete(created, r.Item.Key)
		}
	}
}

// missingChildren is the error of a put whose children are not stored.
func missingChildren(keys []string) error {
	if len(keys) > 3 {
		return fmt.Errorf("%w: %d children not stored, %s first", steaderr.ErrNotFound, len(keys), strings.Join(keys[:3], ", "))
	}
	return fmt.Errorf("%w: children not stored: %s", steaderr.ErrNotFound, strings.Join(keys, ", "))
}

// nowTimestamp is a pin's Now as an array element: NULL (the database's
// clock) for the zero time.
func nowTimestamp(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// laterPin compares two pins of one key and owner by the expiry they ask
// for: positive when x's is later.
func laterPin(x, y groupcommit.Pin) int {
	if x.Now.Equal(y.Now) {
		return cmp.Compare(x.TTL, y.TTL)
	}
	return x.Now.Add(x.TTL).Compare(y.Now.Add(y.TTL))
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Info{}, err
	}
	info := blob.Info{Key: key}
	if err := readError(b.e.pool.QueryRow(ctx, b.e.sql(sqlStat), key.String()).Scan(&info.Size)); err != nil {
		return blob.Info{}, err
	}
	return info, nil
}

// List reads one page with one statement.
func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if limit < 1 {
		return fmt.Errorf("%w: list limit %d, want at least 1", steaderr.ErrInvalidArgument, limit)
	}
	rows, err := b.e.pool.Query(ctx, b.e.sql(sqlListPage), after.String(), limit)
	if err == nil {
		err = yieldRows(rows, yield)
	}
	return listError(err)
}

// yieldRows hands (key, size) rows to yield. When yield stops, the rest of
// this result is discarded.
func yieldRows(rows pgx.Rows, yield func(blob.Info) bool) error {
	defer rows.Close()
	var text string
	var info blob.Info
	for rows.Next() {
		if err := rows.Scan(&text, &info.Size); err != nil {
			return err
		}
		key, err := blob.ParseKey(text)
		if err != nil {
			return fmt.Errorf("stored key: %w", err)
		}
		info.Key = key
		if !yield(info) {
			return nil
		}
	}
	return rows.Err()
}

func (b *blobs) Pin(ctx context.Context, p blob.PinParams) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	var n int
	err := b.e.retryTransient(ctx, func() error {
		return b.e.pool.QueryRow(ctx, b.e.sql(sqlPin), p.Key.String(), p.Owner, p.TTL.Microseconds(), nowArg(p.Now)).Scan(&n)
	})
	switch {
	case err != nil:
		return readError(err)
	case n == 0:
		return steaderr.ErrNotFound
	}
	return nil
}

func (b *blobs) RenewPin(ctx context.Context, p blob.PinParams) (bool, error) {
	if err := b.e.check(ctx); err != nil {
		return false, err
	}
	var n int64
	if err := b.e.pool.QueryRow(ctx, b.e.sql(sqlRenewPin), p.Key.String(), p.Owner, p.TTL.Microseconds(), nowArg(p.Now)).Scan(&n); err != nil {
		return false, interpretError(err)
	}
	return n == 1, nil
}

func (b *blobs) Unpin(ctx context.Context, p blob.UnpinParams) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	_, err := b.e.pool.Exec(ctx, b.e.sql(sqlUnpin), p.Key.String(), p.Owner)
	return interpretError(err)
}
