package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
)

const (
	blobSize = 4 << 10
	poolSize = 8 // stead's default pool size; the raw loops use the same
	preload  = 10_000
)

// blobTableDDL is stead's blobs table, so raw loops do the same SQL work.
const blobTableDDL = `CREATE TABLE %[1]s.blobs (
    key   text COLLATE "C" NOT NULL,
    size  bigint NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (key) INCLUDE (size)
) WITH (fillfactor = 90);
ALTER TABLE %[1]s.blobs ALTER COLUMN value SET STORAGE EXTERNAL`

func blobPostgres() []scenario {
	return []scenario{
		{group: "blob-pg", name: "raw put", setup: rawPGPut("")},
		{group: "blob-pg", name: "stead put", base: "raw put", setup: steadPut(openSteadPG)},
		{group: "blob-pg", name: "raw put sync=off", base: "raw put", setup: rawPGPut("off")},
		{group: "blob-pg", name: "raw get", setup: rawPGGet},
		{group: "blob-pg", name: "stead get", base: "raw get", setup: steadPGGet},
	}
}

// values hands each worker unique blobSize values: random bytes, with the
// worker and op numbers and a per-run nonce stamped at the front.
type values struct{ bufs [][]byte }

func newValues(workers int) *values {
	v := &values{bufs: make([][]byte, workers)}
	nonce := mrand.Uint64()
	for w := range v.bufs {
		v.bufs[w] = make([]byte, blobSize)
		rand.Read(v.bufs[w])
		binary.LittleEndian.PutUint64(v.bufs[w][0:], nonce)
		binary.LittleEndian.PutUint64(v.bufs[w][8:], uint64(w))
	}
	return v
}

func (v *values) next(w, i int) []byte {
	binary.LittleEndian.PutUint64(v.bufs[w][16:], uint64(i))
	return v.bufs[w]
}

func keyText(value []byte) string {
	sum := sha256.Sum256(value)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// scratchSchema creates a fresh schema and returns it with its drop.
func scratchSchema(ctx context.Context, prefix string) (string, func(), error) {
	admin, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return "", nil, err
	}
	schema := fmt.Sprintf("bench_%s_%x", prefix, mrand.Uint32())
	drop := func() {
		admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		admin.Close(context.Background())
	}
	return schema, drop, nil
}

func rawPool(ctx context.Context, syncCommit string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(*pgURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = poolSize
	if syncCommit != "" {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = syncCommit
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// rawBlobTable opens a raw pool over a fresh copy of stead's blobs table.
func rawBlobTable(ctx context.Context, syncCommit string) (*pgxpool.Pool, string, func(), error) {
	schema, drop, err := scratchSchema(ctx, "raw")
	if err != nil {
		return nil, "", nil, err
	}
	pool, err := rawPool(ctx, syncCommit)
	if err == nil {
		_, err = pool.Exec(ctx, "CREATE SCHEMA "+schema)
	}
	if err == nil {
		_, err = pool.Exec(ctx, fmt.Sprintf(blobTableDDL, schema))
	}
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return pool, schema + ".blobs", func() { pool.Close(); drop() }, nil
}

func rawPGPut(syncCommit string) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		pool, table, cleanup, err := rawBlobTable(ctx, syncCommit)
		if err != nil {
			return nil, nil, err
		}
		vals := newValues(n)
		insert := "INSERT INTO " + table + " (key, size, value) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING"
		return func(ctx context.Context, w, i int) error {
			v := vals.next(w, i)
			_, err := pool.Exec(ctx, insert, keyText(v), len(v), v)
			return err
		}, cleanup, nil
	}
}

func openSteadPG(ctx context.Context) (*stead.Store, func(), error) {
	st, _, cleanup, err := openSteadPGSchema(ctx)
	return st, cleanup, err
}

// openSteadPGSchema opens a stead store in a fresh schema and returns the
// schema too.
func openSteadPGSchema(ctx context.Context) (*stead.Store, string, func(), error) {
	schema, drop, err := scratchSchema(ctx, "stead")
	if err != nil {
		return nil, "", nil, err
	}
	u, err := url.Parse(*pgURL)
	if err != nil {
		return nil, "", nil, err
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	st, err := stead.Open(ctx, u.String())
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return st, schema, func() { st.Close(); drop() }, nil
}

// steadPut puts distinct values into a fresh store from open.
func steadPut(open opener) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		st, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		vals := newValues(n)
		readers := make([]bytes.Reader, n)
		return func(ctx context.Context, w, i int) error {
			readers[w].Reset(vals.next(w, i))
			_, err := st.Blobs.Put(ctx, &readers[w])
			return err
		}, cleanup, nil
	}
}

func rawPGGet(ctx context.Context, n int) (opFunc, func(), error) {
	pool, table, cleanup, err := rawBlobTable(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	keys, err := preloadRaw(ctx, pool, table)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	query := "SELECT value FROM " + table + " WHERE key = $1"
	return func(ctx context.Context, w, i int) error {
		var value []byte
		return pool.QueryRow(ctx, query, keys[mrand.IntN(len(keys))]).Scan(&value)
	}, cleanup, nil
}

func preloadRaw(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	vals := newValues(1)
	keys := make([]string, preload)
	sizes := make([]int64, preload)
	data := make([][]byte, preload)
	for i := range keys {
		v := bytes.Clone(vals.next(0, i))
		keys[i], sizes[i], data[i] = keyText(v), int64(len(v)), v
	}
	_, err := pool.Exec(ctx, "INSERT INTO "+table+" (key, size, value) SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])", keys, sizes, data)
	if err == nil {
		_, err = pool.Exec(ctx, "VACUUM ANALYZE "+table)
	}
	return keys, err
}

// steadPGGet reads through stead a table preloaded exactly as raw get's
// is, so that the two differ only in the read path.
func steadPGGet(ctx context.Context, n int) (opFunc, func(), error) {
	st, schema, cleanup, err := openSteadPGSchema(ctx)
	if err != nil {
		return nil, nil, err
	}
	pool, err := rawPool(ctx, "")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	texts, err := preloadRaw(ctx, pool, schema+".blobs")
	pool.Close()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	keys, err := parseKeys(texts)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return steadGetOp(st, keys), cleanup, nil
}

func parseKeys(texts []string) ([]blob.Key, error) {
	keys := make([]blob.Key, len(texts))
	for i, text := range texts {
		var err error
		if keys[i], err = blob.ParseKey(text); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// steadGetOp gets and reads a random one of keys.
func steadGetOp(st *stead.Store, keys []blob.Key) opFunc {
	return func(ctx context.Context, w, i int) error {
		r, err := st.Blobs.Get(ctx, keys[mrand.IntN(len(keys))])
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, r)
		return err
	}
}
