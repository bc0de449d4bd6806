package postgres

import (
	"context"
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
)

type blobs struct {
	e      *Engine
	commit *groupcommit.Committer[groupcommit.Put]
	sql    struct {
		put, putMany, get, stat, page, del string
	}
}

func (b *blobs) init(e *Engine) {
	b.e = e
	b.commit = groupcommit.New(putFlushers, maxBatchPuts, maxBatchBytes, b.flush)
	t := e.ident + ".blobs"
	b.sql.put = "INSERT INTO " + t + " (key, size, value) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING"
	b.sql.putMany = "INSERT INTO " + t + " (key, size, value) SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[]) ON CONFLICT (key) DO NOTHING"
	b.sql.get = "SELECT value FROM " + t + " WHERE key = $1"
	b.sql.stat = "SELECT size FROM " + t + " WHERE key = $1"
	b.sql.page = "SELECT key, size FROM " + t + " WHERE key > $1 ORDER BY key LIMIT $2"
	b.sql.del = "DELETE FROM " + t + " WHERE key = $1"
}

func (b *blobs) Put(ctx context.Context, key blob.Key, value []byte) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	return b.commit.Put(ctx, groupcommit.Put{Key: key.String(), Value: value})
}

// flush stores one batch in one statement: one round trip, one commit.
func (b *blobs) flush(ctx context.Context, batch []*groupcommit.Request[groupcommit.Put]) error {
	if len(batch) == 1 {
		_, err := b.e.pool.Exec(ctx, b.sql.put, batch[0].Item.Key, len(batch[0].Item.Value), batch[0].Item.Value)
		return interpretError(err)
	}
	keys := make([]string, len(batch))
	sizes := make([]int64, len(batch))
	values := make([][]byte, len(batch))
	for i, r := range batch {
		keys[i], sizes[i], values[i] = r.Item.Key, int64(len(r.Item.Value)), r.Item.Value
	}
	_, err := b.e.pool.Exec(ctx, b.sql.putMany, keys, sizes, values)
	return interpretError(err)
}

func (b *blobs) Get(ctx context.Context, key blob.Key) ([]byte, error) {
	if err := b.e.check(ctx); err != nil {
		return nil, err
	}
	var value []byte
	if err := readError(b.e.pool.QueryRow(ctx, b.sql.get, key.String()).Scan(&value)); err != nil {
		return nil, err
	}
	return value, nil
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Info{}, err
	}
	info := blob.Info{Key: key}
	if err := readError(b.e.pool.QueryRow(ctx, b.sql.stat, key.String()).Scan(&info.Size)); err != nil {
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
	rows, err := b.e.pool.Query(ctx, b.sql.page, after.String(), limit)
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
