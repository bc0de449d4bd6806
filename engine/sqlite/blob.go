package sqlite

import (
	"context"
	"errors"
	"fmt"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/groupcommit"
	"github.com/steadkit/stead/steaderr"
)

// blobs is the engine's blob.Engine. Writes go through the single writer
// connection (puts through a group committer, which batches concurrent ones),
// reads through the reader pool; each read is one statement. On a database
// never migrated, writes fail with steaderr.ErrSchema (interpretError) and
// reads answer absent or empty (readError, listError).
type blobs struct {
	e                    *Engine
	commit               *groupcommit.Committer
	put, del             stmt
	getStored, stat      stmt
	listAfter, readChunk stmt
}

func (b *blobs) init(e *Engine) {
	b.e = e
	b.commit = groupcommit.New(1, maxBatchPuts, maxBatchBytes, b.flush)
	b.put = stmt{db: e.writer, query: "INSERT INTO blobs (key, size, value) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING"}
	b.del = stmt{db: e.writer, query: "DELETE FROM blobs WHERE key = ?"}
	b.getStored = stmt{db: e.reader, query: sqlGet}
	b.readChunk = stmt{db: e.reader, query: sqlReadChunk}
	b.stat = stmt{db: e.reader, query: "SELECT size FROM blobs WHERE key = ?"}
	// Every key sorts after '' and LIMIT -1 is no limit, so one statement
	// serves every cursor and limit.
	b.listAfter = stmt{db: e.reader, query: "SELECT key, size FROM blobs WHERE key > ? ORDER BY key LIMIT ?"}
}

func (b *blobs) close() error {
	return errors.Join(b.put.close(), b.del.close(), b.getStored.close(), b.stat.close(), b.listAfter.close(), b.readChunk.close())
}

// readError interprets err from a read; on a database never migrated the
// blob is absent.
func readError(ctx context.Context, err error) error {
	interpreted := interpretError(ctx, err)
	if errors.Is(interpreted, errNoSchema) {
		return fmt.Errorf("%w: %w", steaderr.ErrNotFound, err)
	}
	return interpreted
}

// listError interprets err from List; on a database never migrated the
// list is empty.
func listError(ctx context.Context, err error) error {
	err = interpretError(ctx, err)
	if errors.Is(err, errNoSchema) {
		return nil
	}
	return err
}

func (b *blobs) Put(ctx context.Context, key blob.Key, value []byte) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	if value == nil {
		value = []byte{} // nil binds as NULL
	}
	return b.commit.Put(ctx, key.String(), value)
}

// Group commit bounds: the single writer runs one batch at a time.
const (
	maxBatchPuts  = 64
	maxBatchBytes = 4 << 20
)

// flush stores a batch of puts: alone as one autocommit statement, else in
// one write transaction.
func (b *blobs) flush(ctx context.Context, group []*groupcommit.Request) error {
	return interpretError(ctx, b.insert(ctx, group))
}

func (b *blobs) insert(ctx context.Context, group []*groupcommit.Request) (err error) {
	s, err := b.put.get(ctx)
	if err != nil {
		return err
	}
	if len(group) == 1 {
		r := group[0]
		_, err := s.ExecContext(ctx, r.Key, len(r.Value), r.Value)
		return err
	}
	tx, err := b.e.writer.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	ts := tx.StmtContext(ctx, s)
	for _, r := range group {
		if _, err := ts.ExecContext(ctx, r.Key, len(r.Value), r.Value); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	if err := b.e.check(ctx); err != nil {
		return blob.Info{}, err
	}
	s, err := b.stat.get(ctx)
	if err != nil {
		return blob.Info{}, readError(ctx, err)
	}
	info := blob.Info{Key: key}
	if err := s.QueryRowContext(ctx, key.String()).Scan(&info.Size); err != nil {
		return blob.Info{}, readError(ctx, err)
	}
	return info, nil
}

func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) (err error) {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	s, err := b.listAfter.get(ctx)
	if err != nil {
		return listError(ctx, err)
	}
	if limit <= 0 {
		limit = -1
	}
	// One statement is one read transaction: every row comes from the
	// snapshot taken at its first step.
	rows, err := s.QueryContext(ctx, after.String(), limit)
	if err != nil {
		return listError(ctx, err)
	}
	defer func() { err = errors.Join(err, interpretError(ctx, rows.Close())) }()
	for rows.Next() {
		var text string
		var info blob.Info
		if err := rows.Scan(&text, &info.Size); err != nil {
			return interpretError(ctx, err)
		}
		if info.Key, err = blob.ParseKey(text); err != nil {
			return fmt.Errorf("sqlite: stored key: %w", err)
		}
		if !yield(info) {
			return nil
		}
	}
	return interpretError(ctx, rows.Err())
}

func (b *blobs) Delete(ctx context.Context, key blob.Key) error {
	if err := b.e.check(ctx); err != nil {
		return err
	}
	s, err := b.del.get(ctx)
	if err != nil {
		return interpretError(ctx, err)
	}
	res, err := s.ExecContext(ctx, key.String())
	if err != nil {
		return interpretError(ctx, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return interpretError(ctx, err)
	}
	if n == 0 {
		return steaderr.ErrNotFound
	}
	return nil
}
