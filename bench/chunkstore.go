package main

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// chunkStoreSize is the value each chunkstore-pg operation writes or reads.
const chunkStoreSize = 64 << 20

// chunkStorePostgres measures the two ways PostgreSQL can hold a value too
// large for one row, with raw pgx: chunk rows (bytea, STORAGE EXTERNAL) of
// a few sizes, each chunk its own short statement, and a large object
// written and read in 1 MiB calls inside one transaction. Each operation
// moves 64 MiB; multiply ops/s by 64 for MiB/s
// (docs/decisions/0011-large-blobs.md).
func chunkStorePostgres() []scenario {
	var all []scenario
	for _, size := range []int{256 << 10, 1 << 20, 4 << 20} {
		all = append(all,
			scenario{group: "chunkstore-pg", name: fmt.Sprintf("put rows %dKiB", size>>10), setup: chunkRowsOp(size, false)},
			scenario{group: "chunkstore-pg", name: fmt.Sprintf("get rows %dKiB", size>>10), setup: chunkRowsOp(size, true)})
	}
	all = append(all,
		scenario{group: "chunkstore-pg", name: "put largeobject", setup: largeObjectOp(false)},
		scenario{group: "chunkstore-pg", name: "get largeobject", setup: largeObjectOp(true)})
	return all
}

func chunkRowsOp(chunk int, get bool) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		pool, table, cleanup, err := rawBlobTable(ctx, "")
		if err != nil {
			return nil, nil, err
		}
		chunks := table[:len(table)-len("blobs")] + "chunks"
		if _, err := pool.Exec(ctx, "CREATE TABLE "+chunks+" (set_id bigint NOT NULL, off bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (set_id, off)); ALTER TABLE "+chunks+" ALTER COLUMN data SET STORAGE EXTERNAL"); err != nil {
			cleanup()
			return nil, nil, err
		}
		buf := make([]byte, chunk)
		rand.Read(buf)
		put := func(ctx context.Context, set int) error {
			for off := 0; off < chunkStoreSize; off += chunk {
				if _, err := pool.Exec(ctx, "INSERT INTO "+chunks+" (set_id, off, data) VALUES ($1, $2, $3)", set, off, buf); err != nil {
					return err
				}
			}
			return nil
		}
		if !get {
			return func(ctx context.Context, w, i int) error {
				return put(ctx, w<<32|i)
			}, cleanup, nil
		}
		if err := put(ctx, 0); err != nil {
			cleanup()
			return nil, nil, err
		}
		return func(ctx context.Context, w, i int) error {
			var data []byte
			for off := 0; off < chunkStoreSize; off += len(data) {
				if err := pool.QueryRow(ctx, "SELECT data FROM "+chunks+" WHERE set_id = 0 AND off = $1", off).Scan(&data); err != nil {
					return err
				}
			}
			return nil
		}, cleanup, nil
	}
}

func largeObjectOp(get bool) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		pool, _, cleanup, err := rawBlobTable(ctx, "")
		if err != nil {
			return nil, nil, err
		}
		buf := make([]byte, 1<<20)
		rand.Read(buf)
		var oids []uint32
		put := func(ctx context.Context) (uint32, error) {
			var oid uint32
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				los := tx.LargeObjects()
				var err error
				if oid, err = los.Create(ctx, 0); err != nil {
					return err
				}
				lo, err := los.Open(ctx, oid, pgx.LargeObjectModeWrite)
				if err != nil {
					return err
				}
				for off := 0; off < chunkStoreSize; off += len(buf) {
					if _, err := lo.Write(buf); err != nil {
						return err
					}
				}
				return lo.Close()
			})
			return oid, err
		}
		unlink := func() {
			for _, oid := range oids {
				pool.Exec(context.Background(), "SELECT lo_unlink($1)", oid)
			}
			cleanup()
		}
		if !get {
			return func(ctx context.Context, w, i int) error {
				oid, err := put(ctx)
				oids = append(oids, oid) // one caller at a time (-callers 1)
				return err
			}, unlink, nil
		}
		oid, err := put(ctx)
		oids = append(oids, oid)
		if err != nil {
			unlink()
			return nil, nil, err
		}
		return func(ctx context.Context, w, i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				los := tx.LargeObjects()
				lo, err := los.Open(ctx, oid, pgx.LargeObjectModeRead)
				if err != nil {
					return err
				}
				rb := make([]byte, 1<<20)
				for off := 0; off < chunkStoreSize; {
					k, err := lo.Read(rb)
					off += k
					if err != nil {
						return err
					}
				}
				return lo.Close()
			})
		}, unlink, nil
	}
}
