package main

import (
	"context"
	"database/sql"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
)

func blobSQLite() []scenario {
	return []scenario{
		{group: "blob-sqlite", name: "raw put", setup: rawSQLitePut},
		{group: "blob-sqlite", name: "stead put", base: "raw put", setup: steadPut(openSteadSQLite)},
		{group: "blob-sqlite", name: "raw get", setup: rawSQLiteGet},
		{group: "blob-sqlite", name: "stead get", base: "raw get", setup: steadSQLiteGet},
	}
}

// sqliteBlobsDDL is stead's blobs table (engine/sqlite).
const sqliteBlobsDDL = "CREATE TABLE blobs (key TEXT NOT NULL PRIMARY KEY, size INTEGER NOT NULL, value BLOB NOT NULL)"

// rawSQLite creates a database, opened as openSQLite does, and runs ddl on
// it.
func rawSQLite(ddl string) (writer, reader *sql.DB, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "bench-sqlite-")
	if err != nil {
		return nil, nil, nil, err
	}
	writer, reader, err = openSQLite(filepath.Join(dir, "raw.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	cleanup = func() { reader.Close(); writer.Close(); os.RemoveAll(dir) }
	if _, err := writer.Exec(ddl); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return writer, reader, cleanup, nil
}

// openSQLite opens path the way stead does: WAL, synchronous=NORMAL, one
// writer connection, a reader pool of 4.
func openSQLite(path string) (writer, reader *sql.DB, err error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)"
	writer, err = sql.Open("sqlite", dsn+"&_txlock=immediate")
	if err != nil {
		return nil, nil, err
	}
	if reader, err = sql.Open("sqlite", dsn+"&_pragma=query_only(1)"); err != nil {
		writer.Close()
		return nil, nil, err
	}
	writer.SetMaxOpenConns(1)
	reader.SetMaxOpenConns(4)
	reader.SetMaxIdleConns(4)
	return writer, reader, nil
}

// preloadSQLite stores preload values in one transaction, then checkpoints
// the WAL into the database file, so that reads start from the same state
// on every file loaded this way.
func preloadSQLite(ctx context.Context, writer *sql.DB) ([]string, error) {
	vals := newValues(1)
	keys := make([]string, preload)
	tx, err := writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	for i := range keys {
		v := vals.next(0, i)
		keys[i] = keyText(v)
		if _, err := tx.ExecContext(ctx, sqliteInsert, keys[i], len(v), v); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	_, err = writer.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return keys, err
}

const sqliteInsert = "INSERT INTO blobs (key, size, value) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING"

func rawSQLitePut(ctx context.Context, n int) (opFunc, func(), error) {
	writer, _, cleanup, err := rawSQLite(sqliteBlobsDDL)
	if err != nil {
		return nil, nil, err
	}
	stmt, err := writer.PrepareContext(ctx, sqliteInsert)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	vals := newValues(n)
	return func(ctx context.Context, w, i int) error {
		v := vals.next(w, i)
		_, err := stmt.ExecContext(ctx, keyText(v), len(v), v)
		return err
	}, cleanup, nil
}

func rawSQLiteGet(ctx context.Context, n int) (opFunc, func(), error) {
	writer, reader, cleanup, err := rawSQLite(sqliteBlobsDDL)
	if err != nil {
		return nil, nil, err
	}
	keys, err := preloadSQLite(ctx, writer)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	stmt, err := reader.PrepareContext(ctx, "SELECT value FROM blobs WHERE key = ?")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return func(ctx context.Context, w, i int) error {
		var value []byte
		return stmt.QueryRowContext(ctx, keys[mrand.IntN(len(keys))]).Scan(&value)
	}, cleanup, nil
}

// steadSQLiteGet reads through stead a file preloaded exactly as raw get's
// is, so that the two differ only in the read path.
func steadSQLiteGet(ctx context.Context, n int) (opFunc, func(), error) {
	st, path, cleanup, err := openSteadSQLiteFile(ctx)
	if err != nil {
		return nil, nil, err
	}
	writer, reader, err := openSQLite(path)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	texts, err := preloadSQLite(ctx, writer)
	writer.Close()
	reader.Close()
	var keys []blob.Key
	if err == nil {
		keys, err = parseKeys(texts)
	}
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return steadGetOp(st, keys), cleanup, nil
}

func openSteadSQLite(ctx context.Context) (*stead.Store, func(), error) {
	st, _, cleanup, err := openSteadSQLiteFile(ctx)
	return st, cleanup, err
}

// openSteadSQLiteTier opens a stead store in a fresh SQLite file with a
// file:// bytes tier in a fresh directory beside it.
func openSteadSQLiteTier(ctx context.Context) (*stead.Store, func(), error) {
	dir, err := os.MkdirTemp("", "bench-sqlite-tier-")
	if err != nil {
		return nil, nil, err
	}
	bucket := filepath.Join(dir, "bucket")
	if err := os.Mkdir(bucket, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	st, err := stead.Open(ctx, "sqlite://"+filepath.Join(dir, "stead.db")+"?bytes="+url.QueryEscape("file://"+filepath.ToSlash(bucket)))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return st, func() { st.Close(); os.RemoveAll(dir) }, nil
}

// openSteadSQLiteFile opens a stead store in a fresh SQLite file and
// returns the file's path too.
func openSteadSQLiteFile(ctx context.Context) (*stead.Store, string, func(), error) {
	dir, err := os.MkdirTemp("", "bench-sqlite-")
	if err != nil {
		return nil, "", nil, err
	}
	path := filepath.Join(dir, "stead.db")
	st, err := stead.Open(ctx, "sqlite://"+path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	return st, path, func() { st.Close(); os.RemoveAll(dir) }, nil
}
