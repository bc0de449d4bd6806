package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/internal/groupcommit"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// blobs is the engine's blob.Backend. Writes go through the single writer
// connection (puts through a group committer, which batches concurrent ones),
// reads through the reader pool; each read is one statement. On a database
// never migrated, writes fail with steaderr.ErrSchema (interpretError) and
// reads answer absent or empty (readError, listError).
type blobs struct {
	e                    *Engine
	commit               *groupcommit.Committer[*groupcommit.Put]
	put, putPin          stmt
	get, stat, listAfter stmt
	readChunk            stmt
	pin, renewPin, unpin stmt
	// sources are the Go-function liveness sources, and lease is the
	// sweep lease: one process uses a database file, so both live in
	// process.
	sources gc.FuncSources
	lease   gc.ProcessLease
}

func (b *blobs) init(e *Engine) {
	b.e = e
	b.commit = groupcommit.New(1, maxBatchPuts, maxBatchBytes, b.flush)
	b.put = stmt{db: e.writer, query: "INSERT INTO blobs (key, size, value) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING"}
	// ?1 key, ?2 owner, ?3 expiry: a pin's expiry only ever grows.
	b.putPin = stmt{db: e.writer, query: "INSERT INTO pins (key, owner, expiry) VALUES (?1, ?2, ?3) ON CONFLICT (key, owner) DO UPDATE SET expiry = max(expiry, excluded.expiry)"}
	b.get = stmt{db: e.reader, query: sqlGet}
	b.readChunk = stmt{db: e.reader, query: sqlReadChunk}
	b.stat = stmt{db: e.reader, query: "SELECT size FROM blobs WHERE key = ?"}
	// Every key sorts after '', so one statement serves every cursor.
	b.listAfter = stmt{db: e.reader, query: "SELECT key, size FROM blobs WHERE key > ? ORDER BY key LIMIT ?"}
	// A pin of a stored blob only; the single writer orders it with every
	// put and arbitration.
	b.pin = stmt{db: e.writer, query: "INSERT INTO pins (key, owner, expiry) SELECT key, ?2, ?3 FROM blobs WHERE key = ?1 ON CONFLICT (key, owner) DO UPDATE SET expiry = max(expiry, excluded.expiry)"}
	// ?4 now: only a live pin is renewed.
	b.renewPin = stmt{db: e.writer, query: "UPDATE pins SET expiry = max(expiry, ?3) WHERE key = ?1 AND owner = ?2 AND expiry > ?4"}
	b.unpin = stmt{db: e.writer, query: "DELETE FROM pins WHERE key = ?1 AND owner = ?2"}
}

func (b *blobs) close() error {
	return errors.Join(b.put.close(), b.putPin.close(), b.get.close(), b.stat.close(), b.listAfter.close(),
		b.pin.close(), b.renewPin.close(), b.unpin.close(), b.readChunk.close())
}

func (b *blobs) Put(ctx context.Context, p blob.PutParams) (bool, error) {
	if err := b.e.check(ctx); err != nil {
		return false, err
	}
	if p.Chunks != 0 {
		return b.publish(ctx, p)
	}
	value := p.Value
	if value == nil {
		value = []byte{} // nil binds as NULL
	}
	put := &groupcommit.Put{Key: p.Key.String(), Value: value, Pin: groupcommit.Pin{Owner: p.Owner, TTL: p.TTL, Now: p.Now}, Children: keyTexts(p.Children)}
	if err := b.commit.Put(ctx, put); err != nil {
		return false, err
	}
	return put.Created, nil
}

// Group commit bounds: the single writer runs one batch at a time.
const (
	maxBatchPuts  = 64
	maxBatchBytes = 4 << 20
)

// flush stores a batch of puts and their pins in one write transaction.
func (b *blobs) flush(ctx context.Context, group []*groupcommit.Request[*groupcommit.Put]) error {
	return interpretError(ctx, b.insert(ctx, group))
}

func (b *blobs) insert(ctx context.Context, group []*groupcommit.Request[*groupcommit.Put]) (err error) {
	put, err := b.put.get(ctx)
	if err != nil {
		return err
	}
	putPin, err := b.putPin.get(ctx)
	if err != nil {
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
	tput, tpin := tx.StmtContext(ctx, put), tx.StmtContext(ctx, putPin)
	for _, r := range group {
		r.Item.Created = false
		if len(r.Item.Children) > 0 {
			// The single writer holds every row: the children found now
			// stay until this commit.
			if r.Err, err = addEdges(ctx, tx, r.Item.Key, r.Item.Children); err != nil {
				return err
			}
			if r.Err != nil {
				continue
			}
		}
		if r.Item.Created, err = putRow(ctx, tput, tpin, r.Item); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// putRow stores the inline put's blob, unless stored, and its pin with the
// statements tput and tpin of a write transaction, and reports whether it
// inserted the blob.
func putRow(ctx context.Context, tput, tpin *sql.Stmt, put *groupcommit.Put) (bool, error) {
	res, err := tput.ExecContext(ctx, put.Key, len(put.Value), put.Value)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	expiry := clock.OrNow(put.Pin.Now).Add(put.Pin.TTL).UnixMicro()
	if _, err := tpin.ExecContext(ctx, put.Key, put.Pin.Owner, expiry); err != nil {
		return false, err
	}
	return n == 1, nil
}

// The statements of blob references.
const (
	sqlStoredChildren = `SELECT value FROM json_each(?1) WHERE value NOT IN (SELECT key FROM blobs)`
	// sqlNewChildren answers the children ?2 a stored ?1 was not stored
	// with; none when ?1 is not stored.
	sqlNewChildren = `SELECT value FROM json_each(?2)
WHERE EXISTS (SELECT 1 FROM blobs WHERE key = ?1)
AND value NOT IN (SELECT child FROM blob_edges WHERE parent = ?1)`
	sqlInsertEdges = `INSERT INTO blob_edges (parent, child) SELECT ?1, value FROM json_each(?2) WHERE true ON CONFLICT DO NOTHING`
)

// addEdges records parent's references to children, in tx, unless some
// child is not stored or parent is stored without some of them: then it
// records nothing and returns (as refused) an error wrapping
// steaderr.ErrNotFound or steaderr.ErrChildrenFixed naming them.
func addEdges(ctx context.Context, tx *sql.Tx, parent string, children []string) (refused, err error) {
	all, _ := json.Marshal(children) // strings always marshal
	absent, err := queryKeys(ctx, tx, sqlStoredChildren, string(all))
	if err != nil {
		return nil, err
	}
	if len(absent) > 0 {
		return fmt.Errorf("%w: children not stored: %s", steaderr.ErrNotFound, strings.Join(keyTexts(absent), ", ")), nil
	}
	extra, err := queryKeys(ctx, tx, sqlNewChildren, parent, string(all))
	if err != nil {
		return nil, err
	}
	if len(extra) > 0 {
		return blob.ChildrenFixedError(parent, keyTexts(extra)), nil
	}
	_, err = tx.ExecContext(ctx, sqlInsertEdges, parent, string(all))
	return nil, err
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

func (b *blobs) Pin(ctx context.Context, p blob.PinParams) error {
	n, err := b.exec(ctx, &b.pin, p.Key.String(), p.Owner, clock.OrNow(p.Now).Add(p.TTL).UnixMicro())
	switch {
	case err != nil:
		return readError(ctx, err)
	case n == 0:
		return steaderr.ErrNotFound
	}
	return nil
}

// RenewPin reads the clock once it holds the writer, after any
// arbitration before it has committed: a renewal judged live on a clock
// read earlier could resurrect a pin that arbitration found expired.
func (b *blobs) RenewPin(ctx context.Context, p blob.PinParams) (bool, error) {
	if err := b.e.check(ctx); err != nil {
		return false, err
	}
	s, err := b.renewPin.get(ctx)
	if err != nil {
		return false, interpretError(ctx, err)
	}
	var n int64
	err = b.e.writeTx(ctx, func(tx *sql.Tx) error {
		now := clock.OrNow(p.Now)
		res, err := tx.StmtContext(ctx, s).ExecContext(ctx, p.Key.String(), p.Owner, now.Add(p.TTL).UnixMicro(), now.UnixMicro())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

func (b *blobs) Unpin(ctx context.Context, p blob.UnpinParams) error {
	_, err := b.exec(ctx, &b.unpin, p.Key.String(), p.Owner)
	return err
}

// exec runs a write statement and returns how many rows it changed.
func (b *blobs) exec(ctx context.Context, s *stmt, args ...any) (int64, error) {
	if err := b.e.check(ctx); err != nil {
		return 0, err
	}
	p, err := s.get(ctx)
	if err != nil {
		return 0, interpretError(ctx, err)
	}
	res, err := p.ExecContext(ctx, args...)
	if err != nil {
		return 0, interpretError(ctx, err)
	}
	n, err := res.RowsAffected()
	return n, interpretError(ctx, err)
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
	if limit < 1 {
		return fmt.Errorf("%w: list limit %d, want at least 1", steaderr.ErrInvalidArgument, limit)
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

func (b *blobs) Delete(ctx context.Context, p blob.DeleteParams) ([]blob.Verdict, error) {
	return b.arbitrate(ctx, p.Keys, p.Now, false)
}
