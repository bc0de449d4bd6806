package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
)

// inlinePostgres measures raw single-row put and get of random values of
// growing size, under each TOAST storage strategy: the data behind the
// inline limit (docs/decisions/0003-inline-limit.md). Multiply ops/s by the
// size for bytes/s.
func inlinePostgres() []scenario {
	var all []scenario
	for _, storage := range []string{"EXTENDED", "EXTERNAL", "MAIN"} {
		for _, size := range []int{4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20} {
			if storage == "MAIN" && size > 4<<10 {
				continue // beyond a page MAIN stores out of line too, and compresses like EXTENDED
			}
			all = append(all,
				scenario{group: "inline-pg", name: fmt.Sprintf("put %s %dKiB", storage, size>>10), setup: inlinePut(storage, size)},
				scenario{group: "inline-pg", name: fmt.Sprintf("get %s %dKiB", storage, size>>10), setup: inlineGet(storage, size)})
		}
	}
	return all
}

func inlineTable(ctx context.Context, storage string) (func(context.Context, string, []byte) error, func(context.Context, string) error, func(), error) {
	pool, table, cleanup, err := rawBlobTable(ctx, "")
	if err != nil {
		return nil, nil, nil, err
	}
	// blobTableDDL says EXTERNAL; set the strategy under test.
	if _, err := pool.Exec(ctx, "ALTER TABLE "+table+" ALTER COLUMN value SET STORAGE "+storage); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	put := func(ctx context.Context, key string, v []byte) error {
		_, err := pool.Exec(ctx, "INSERT INTO "+table+" (key, size, value) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING", key, len(v), v)
		return err
	}
	get := func(ctx context.Context, key string) error {
		var v []byte
		return pool.QueryRow(ctx, "SELECT value FROM "+table+" WHERE key = $1", key).Scan(&v)
	}
	return put, get, cleanup, nil
}

func inlinePut(storage string, size int) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		put, _, cleanup, err := inlineTable(ctx, storage)
		if err != nil {
			return nil, nil, err
		}
		bufs := make([][]byte, n)
		for w := range bufs {
			bufs[w] = make([]byte, size)
			rand.Read(bufs[w])
		}
		return func(ctx context.Context, w, i int) error {
			binary.LittleEndian.PutUint64(bufs[w], uint64(i))
			return put(ctx, keyText(bufs[w]), bufs[w])
		}, cleanup, nil
	}
}

func inlineGet(storage string, size int) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		put, get, cleanup, err := inlineTable(ctx, storage)
		if err != nil {
			return nil, nil, err
		}
		keys := make([]string, max(8, (64<<20)/size)) // 64 MiB of values
		v := make([]byte, size)
		rand.Read(v)
		for i := range keys {
			binary.LittleEndian.PutUint64(v, uint64(i))
			keys[i] = keyText(v)
			if err := put(ctx, keys[i], v); err != nil {
				cleanup()
				return nil, nil, err
			}
		}
		return func(ctx context.Context, w, i int) error {
			return get(ctx, keys[mrand.IntN(len(keys))])
		}, cleanup, nil
	}
}
