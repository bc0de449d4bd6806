package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
)

// refsTableDDL is stead's refs table, for the raw upsert to do the same
// work.
const refsTableDDL = `CREATE SEQUENCE %[1]s.ref_versions;
CREATE TABLE %[1]s.refs (
    name       text COLLATE "C" PRIMARY KEY,
    key        text COLLATE "C" NOT NULL,
    version    bigint NOT NULL,
    annotation bytea,
    expiry     timestamptz
) WITH (fillfactor = 80);
CREATE INDEX refs_key ON %[1]s.refs (key)`

// refKeys is how many stored blobs the ref and children scenarios point
// at.
const refKeys = 1000

func refsPostgres() []scenario {
	return []scenario{
		{group: "refs-pg", name: "raw upsert", setup: rawRefUpsert},
		{group: "refs-pg", name: "stead ref set", base: "raw upsert", setup: steadRefSet},
		{group: "children-pg", name: "stead put", setup: steadPut(openSteadPG)},
		{group: "children-pg", name: "stead put, 10 children", base: "stead put", setup: steadPutChildren},
	}
}

// rawRefUpsert upserts a ref row for a new name each op, drawing its
// version from a sequence, as stead's Set writes one.
func rawRefUpsert(ctx context.Context, n int) (opFunc, func(), error) {
	pool, table, cleanup, err := rawBlobTable(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	schema := table[:len(table)-len(".blobs")]
	if _, err := pool.Exec(ctx, fmt.Sprintf(refsTableDDL, schema)); err != nil {
		cleanup()
		return nil, nil, err
	}
	keys, err := preloadRaw(ctx, pool, table)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	upsert := fmt.Sprintf(`INSERT INTO %[1]s.refs (name, key, version) VALUES ($1, $2, nextval('%[1]s.ref_versions'))
ON CONFLICT (name) DO UPDATE SET key = excluded.key, version = excluded.version`, schema)
	return func(ctx context.Context, w, i int) error {
		_, err := pool.Exec(ctx, upsert, fmt.Sprintf("w%d/%d", w, i), keys[(w*7919+i)%refKeys])
		return err
	}, cleanup, nil
}

// steadRefSet sets a ref for a new name each op to a stored blob.
func steadRefSet(ctx context.Context, n int) (opFunc, func(), error) {
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
	if err == nil {
		texts = texts[:refKeys]
	}
	keys, perr := parseKeys(texts)
	if err != nil || perr != nil {
		cleanup()
		return nil, nil, fmt.Errorf("preload: %v %v", err, perr)
	}
	return func(ctx context.Context, w, i int) error {
		_, err := st.Refs.Set(ctx, fmt.Sprintf("w%d/%d", w, i), keys[(w*7919+i)%refKeys], ref.SetOptions{})
		return err
	}, cleanup, nil
}

// steadPutChildren puts distinct values, each naming 10 stored blobs as
// its children.
func steadPutChildren(ctx context.Context, n int) (opFunc, func(), error) {
	st, cleanup, err := openSteadPG(ctx)
	if err != nil {
		return nil, nil, err
	}
	children := make([]blob.Key, refKeys)
	for i := range children {
		k, err := st.Blobs.Put(ctx, bytes.NewReader(fmt.Appendf(nil, "child %d", i)))
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		children[i] = k
	}
	vals := newValues(n)
	readers := make([]bytes.Reader, n)
	return func(ctx context.Context, w, i int) error {
		readers[w].Reset(vals.next(w, i))
		kids := make([]blob.Key, 10)
		for j := range kids {
			kids[j] = children[rand.IntN(len(children))]
		}
		_, err := st.Blobs.PutWith(ctx, &readers[w], blob.PutOptions{Children: kids})
		return err
	}, cleanup, nil
}
