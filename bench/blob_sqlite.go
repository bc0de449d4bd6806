package main

import (
	"context"
	"database/sql"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/steadkit/stead"
)

func blobSQLite() []scenario {
	return []scenario{
		{group: "blob-sqlite", name: "raw put", setup: rawSQLitePut},
		{group: "blob-sqlite", name: "stead put", base: "raw put", setup: steadPut(openSteadSQLite)},
		{group: "blob-sqlite", name: "raw get", setup: rawSQLiteGet},
		{group: "blob-sqlite", name: "stead get", base: "raw get", setup: steadGet(openSteadSQLite)},
	}
}

// rawSQLite opens a database the way stead does — WAL, synchronous=NORMAL,
// one writer connection, a reader pool of 4 — with stead's blobs table.
func rawSQLite() (writer, reader *sql.DB, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "bench-sqlite-")
	if err != nil {
		return nil, nil, nil, err
	}
	dsn := "file:" + filepath.Join(dir, "raw.db") + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)"
	writer, err = sql.Open("sqlite", dsn+"&_txlock=immediate")
	if err == nil {
		reader, err = sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	writer.SetMaxOpenConns(1)
	reader.SetMaxOpenConns(4)
	reader.SetMaxIdleConns(4)
	cleanup = func() { reader.Close(); writer.Close(); os.RemoveAll(dir) }
	if _, err := writer.Exec("CREATE TABLE blobs (key TEXT NOT NULL PRIMARY KEY, size INTEGER NOT NULL, value BLOB NOT NULL)"); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return writer, reader, cleanup, nil
}

const sqliteInsert = "INSERT INTO blobs (key, size, value) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING"

func rawSQLitePut(ctx context.Context, n int) (opFunc, func(), error) {
	writer, _, cleanup, err := rawSQLite()
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
	writer, reader, cleanup, err := rawSQLite()
	if err != nil {
		return nil, nil, err
	}
	vals := newValues(1)
	keys := make([]string, preload)
	tx, err := writer.BeginTx(ctx, nil)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	for i := range keys {
		v := vals.next(0, i)
		keys[i] = keyText(v)
		if _, err := tx.ExecContext(ctx, sqliteInsert, keys[i], len(v), v); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	if err := tx.Commit(); err != nil {
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

func openSteadSQLite(ctx context.Context) (*stead.Store, func(), error) {
	dir, err := os.MkdirTemp("", "bench-sqlite-")
	if err != nil {
		return nil, nil, err
	}
	st, err := stead.Open(ctx, fmt.Sprintf("sqlite://%s", filepath.Join(dir, "stead.db")))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return st, func() { st.Close(); os.RemoveAll(dir) }, nil
}
