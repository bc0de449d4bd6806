package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/groupcommit"
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
	// listFetch is how many rows a streaming list fetches per round trip.
	listFetch = 1000
)

type blobs struct {
	e        *Engine
	commit   *groupcommit.Committer
	chunkSQL chunkSQL
	sql      struct {
		put, putMany, stat, page, declare, del string
	}
}

func (b *blobs) init(e *Engine) {
	b.e = e
	b.commit = groupcommit.New(putFlushers, maxBatchPuts, maxBatchBytes, b.flush)
	t := e.ident + ".blobs"
	b.sql.put = "INSERT INTO " + t + " (key, size, value) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING"
	b.sql.putMany = "INSERT INTO " + t + " (key, size, value) SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[]) ON CONFLICT (key) DO NOTHING"
	b.sql.stat = "SELECT size FROM " + t + " WHERE key = $1"
	b.sql.page = "SELECT key, size FROM " + t + " WHERE key > $1 ORDER BY key LIMIT $2"
	b.sql.declare = "DECLARE stead_list NO SCROLL CURSOR FOR SELECT key, size FROM " + t + " WHERE key > $1 ORDER BY key"
	b.sql.del = "DELETE FROM " + t + " WHERE key = $1"
	b.chunkSQL.init(e)
}

func (b *blobs) Put(ctx context.Context, key blob.Key, value []byte) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	return b.commit.Put(ctx, key.String(), value)
}

// flush stores one batch in one statement: one round trip, one commit.
func (b *blobs) flush(ctx context.Context, batch []*groupcommit.Request) error {
	if len(batch) == 1 {
		_, err := b.e.pool.Exec(ctx, b.sql.put, batch[0].Key, len(batch[0].Value), batch[0].Value)
		return interpretError(err)
	}
	keys := make([]string, len(batch))
	sizes := make([]int64, len(batch))
	values := make([][]byte, len(batch))
	for i, r := range batch {
		keys[i], sizes[i], values[i] = r.Key, int64(len(r.Value)), r.Value
	}
	_, err := b.e.pool.Exec(ctx, b.sql.putMany, keys, sizes, values)
	return interpretError(err)
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Info{}, err
	}
	info := blob.Info{Key: key}
	err := interpretError(b.e.pool.QueryRow(ctx, b.sql.stat, key.String()).Scan(&info.Size))
	switch {
	case errors.Is(err, errNoSchema):
		return blob.Info{}, steaderr.ErrNotFound
	case err != nil:
		return blob.Info{}, err
	}
	return info, nil
}

// List reads a bounded page with one statement. An unbounded listing uses a
// cursor in a read-only transaction instead: one snapshot, fetched
// listFetch rows at a time, so memory stays bounded and stopping early ends
// the transaction rather than draining every remaining row.
func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	var err error
	if limit > 0 {
		var rows pgx.Rows
		rows, err = b.e.pool.Query(ctx, b.sql.page, after.String(), limit)
		if err == nil {
			_, err = yieldRows(rows, yield)
		}
	} else {
		err = b.e.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, b.sql.declare, after.String()); err != nil {
				return err
			}
			fetch := fmt.Sprintf("FETCH %d FROM stead_list", listFetch)
			for {
				rows, err := tx.Query(ctx, fetch)
				if err != nil {
					return err
				}
				n, err := yieldRows(rows, yield)
				if err != nil || n < listFetch {
					return err
				}
			}
		})
	}
	if err = interpretError(err); errors.Is(err, errNoSchema) {
		return nil
	}
	return err
}

// yieldRows hands (key, size) rows to yield and reports how many it read.
// When yield stops, the rest of this result is discarded.
func yieldRows(rows pgx.Rows, yield func(blob.Info) bool) (int, error) {
	defer rows.Close()
	n := 0
	var text string
	var info blob.Info
	for rows.Next() {
		n++
		if err := rows.Scan(&text, &info.Size); err != nil {
			return n, err
		}
		key, err := blob.ParseKey(text)
		if err != nil {
			return n, fmt.Errorf("stored key: %w", err)
		}
		info.Key = key
		if !yield(info) {
			return -1, nil
		}
	}
	return n, rows.Err()
}

func (b *blobs) Delete(ctx context.Context, key blob.Key) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	tag, err := b.e.pool.Exec(ctx, b.sql.del, key.String())
	if err != nil {
		return interpretError(err)
	}
	if tag.RowsAffected() == 0 {
		return steaderr.ErrNotFound
	}
	return nil
}
