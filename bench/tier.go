package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	gblob "gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob"

	"github.com/steadkit/stead"
)

// The bytes-tier group (docs/decisions/0027-bytes-tier.md): one value of
// -large-mib per operation, put and got by stead over PostgreSQL with its
// bytes in a file:// bucket, by the raw gocloud.dev path writing the same
// bytes to the same kind of bucket (with and without the fsync stead adds),
// and by stead over PostgreSQL chunk rows. Run with -callers 1; multiply
// ops/s by the size for MiB/s. The database bytes per tier blob are printed
// after the table.
func tierScenarios() []scenario {
	var all []scenario
	for _, sc := range []scenario{
		{name: "put gocloud+fsync", setup: tierRawPut(true)},
		{name: "put gocloud", base: "put gocloud+fsync", setup: tierRawPut(false)},
		{name: "put stead pg+tier", base: "put gocloud+fsync", setup: largeSteadPut(openSteadPGTier)},
		{name: "put stead pg chunks", base: "put gocloud+fsync", setup: largeSteadPut(openSteadPG)},
		{name: "get gocloud", setup: tierRawGet},
		{name: "get stead pg+tier", base: "get gocloud", setup: largeSteadGet(openSteadPGTier)},
		{name: "get stead pg chunks", base: "get gocloud", setup: largeSteadGet(openSteadPG)},
	} {
		sc.group = "large-tier"
		sc.setup = withRSS(sc.group+"/"+sc.name, sc.setup)
		all = append(all, sc)
	}
	return all
}

// openSteadPGTier opens a stead store in a fresh schema with a bytes tier
// in a fresh directory, and records the schema for printTierRows.
func openSteadPGTier(ctx context.Context) (*stead.Store, func(), error) {
	dir, err := os.MkdirTemp("", "bench-tier-")
	if err != nil {
		return nil, nil, err
	}
	schema, drop, err := scratchSchema(ctx, "tier")
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	u, err := url.Parse(*pgURL)
	if err != nil {
		return nil, nil, err
	}
	q := u.Query()
	q.Set("schema", schema)
	q.Set("bytes", "file://"+filepath.ToSlash(dir))
	u.RawQuery = q.Encode()
	st, err := stead.Open(ctx, u.String())
	if err != nil {
		drop()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return st, func() {
		tierRows.record(ctx, schema)
		st.Close()
		drop()
		os.RemoveAll(dir)
	}, nil
}

// tierBucket opens a fresh file:// bucket as stead's tier opens one.
func tierBucket(ctx context.Context) (*gblob.Bucket, string, error) {
	dir, err := os.MkdirTemp("", "bench-tier-raw-")
	if err != nil {
		return nil, "", err
	}
	b, err := gblob.OpenBucket(ctx, "file://"+filepath.ToSlash(dir)+"?create_dir=1&no_tmp_dir=1&metadata=skip")
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	return b, dir, nil
}

// tierRawPut writes each value to a new object with gocloud.dev's writer,
// then (with sync) fsyncs the file and its directory, as stead does.
func tierRawPut(sync bool) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		b, dir, err := tierBucket(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, w, i int) error {
			name := fmt.Sprintf("o/bench/%d-%d", w, i)
			wr, err := b.NewWriter(ctx, name, &gblob.WriterOptions{IfNotExist: true, ContentType: "application/octet-stream"})
			if err != nil {
				return err
			}
			if _, err := io.Copy(wr, largeValue(uint64(w<<20|i))); err != nil {
				wr.Close()
				return err
			}
			if err := wr.Close(); err != nil {
				return err
			}
			if sync {
				path := filepath.Join(dir, filepath.FromSlash(name))
				for _, p := range []string{path, filepath.Dir(path)} {
					f, err := os.Open(p)
					if err != nil {
						return err
					}
					err = f.Sync()
					f.Close()
					if err != nil {
						return err
					}
				}
			}
			return b.Delete(ctx, name)
		}, func() { b.Close(); os.RemoveAll(dir) }, nil
	}
}

func tierRawGet(ctx context.Context, n int) (opFunc, func(), error) {
	b, dir, err := tierBucket(ctx)
	if err != nil {
		return nil, nil, err
	}
	name := "o/bench/value"
	err = b.Upload(ctx, name, largeValue(1<<30), &gblob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		b.Close()
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return func(ctx context.Context, w, i int) error {
		r, err := b.NewRangeReader(ctx, name, 0, -1, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(io.Discard, r)
		return err
	}, func() { b.Close(); os.RemoveAll(dir) }, nil
}

// tierRows records the database's bytes per tier blob: the blob rows'
// size and their pins', over the blobs stored.
var tierRows rowTally

type rowTally struct {
	mu    sync.Mutex
	blobs int64
	bytes int64
}

func (t *rowTally) record(ctx context.Context, schema string) {
	pool, err := rawPool(ctx, "")
	if err != nil {
		return
	}
	defer pool.Close()
	var n, size int64
	err = pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce(sum(pg_column_size(b.*)), 0) + coalesce((SELECT sum(pg_column_size(p.*)) FROM %[1]s.pins p), 0)
FROM %[1]s.blobs b WHERE b.object IS NOT NULL`, schema)).Scan(&n, &size)
	if err != nil || n == 0 {
		return
	}
	t.mu.Lock()
	t.blobs += n
	t.bytes += size
	t.mu.Unlock()
}

// printTierRows prints the database bytes per tier blob, if measured.
func printTierRows() {
	tierRows.mu.Lock()
	defer tierRows.mu.Unlock()
	if tierRows.blobs == 0 {
		return
	}
	fmt.Printf("\ndatabase bytes per bytes-tier blob (blob row + pins, pg_column_size): %d over %d blobs\n", tierRows.bytes/tierRows.blobs, tierRows.blobs)
}
