package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
)

// The chunked-push group (docs/decisions/0045-durable-uploads.md): one
// blob of -large-mib per operation pushed through /v2/ to PostgreSQL, as
// skopeo, crane and docker push (POST, one PATCH with the whole blob and
// no Content-Range, an empty PUT ?digest=), each request to the other of
// two servers over one database, with the bytes tier and without it (chunk
// rows), against a monolithic push (POST ?digest= with the blob) to one
// server with the tier. Run with -callers 1; multiply ops/s by the size
// for MiB/s. Peak RSS per scenario and the database bytes per GiB the
// tiered chunked pushes left are printed after the table.
func chunkedScenarios() []scenario {
	var all []scenario
	for _, sc := range []scenario{
		{name: "mono 1 server pg+tier", setup: chunkedPush(true, false)},
		{name: "chunked 2 servers pg+tier", base: "mono 1 server pg+tier", setup: chunkedPush(true, true)},
		{name: "chunked 2 servers pg rows", base: "mono 1 server pg+tier", setup: chunkedPush(false, true)},
	} {
		sc.group = "oci-chunked"
		sc.setup = withRSS(sc.group+"/"+sc.name, sc.setup)
		all = append(all, sc)
	}
	return all
}

// chunkedPush serves two stores over one fresh schema (with a bytes tier
// in one fresh directory when tier) and returns an op pushing a new blob
// of -large-mib, chunked across both servers or monolithic to the first.
// The blobs' digests are taken before the clock runs, a pool of them.
func chunkedPush(tier, chunked bool) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		if n != 1 {
			return nil, nil, fmt.Errorf("run oci-chunked with -callers 1")
		}
		stores, schema, cleanup, err := openPGPair(ctx, tier)
		if err != nil {
			return nil, nil, err
		}
		var bases []string
		var stops []func()
		done := func() {
			for _, stop := range stops {
				stop()
			}
			if tier && chunked {
				chunkRows.record(ctx, schema)
			}
			cleanup()
		}
		for _, st := range stores {
			base, _, stop, err := serveBench(st, registry.Options{})
			if err != nil {
				done()
				return nil, nil, err
			}
			bases, stops = append(bases, base), append(stops, stop)
		}
		// Enough blobs for the pushes of -duration each round, at 1 GiB
		// a few seconds each, smaller ones faster.
		pool := 4 * *rounds * max(1, 1024 / *largeMiB)
		digests := make([]string, pool)
		var wg sync.WaitGroup
		for k := range digests {
			wg.Go(func() {
				h := sha256.New()
				io.Copy(h, largeValue(uint64(k)))
				digests[k] = "sha256:" + hex.EncodeToString(h.Sum(nil))
			})
		}
		wg.Wait()
		client := &http.Client{}
		var next atomic.Int64
		return func(ctx context.Context, w, i int) error {
			k := int(next.Add(1) - 1)
			if k >= pool {
				return fmt.Errorf("more than %d pushes in a run: lower -duration", pool)
			}
			if !chunked {
				return send(ctx, client, "POST", bases[0]+"/v2/bench/chunked/blobs/uploads/?digest="+digests[k], largeValue(uint64(k)), http.StatusCreated, nil)
			}
			var loc string
			if err := send(ctx, client, "POST", bases[0]+"/v2/bench/chunked/blobs/uploads/", nil, http.StatusAccepted, &loc); err != nil {
				return err
			}
			if err := send(ctx, client, "PATCH", bases[1]+loc, largeValue(uint64(k)), http.StatusAccepted, &loc); err != nil {
				return err
			}
			sep := "?"
			if strings.Contains(loc, "?") {
				sep = "&"
			}
			return send(ctx, client, "PUT", bases[0]+loc+sep+"digest="+url.QueryEscape(digests[k]), nil, http.StatusCreated, nil)
		}, done, nil
	}
}

// send sends one request with a streamed body and drains the answer;
// loc, when not nil, gets its Location (a path).
func send(ctx context.Context, client *http.Client, method, u string, body io.Reader, want int, loc *string) error {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s = %d, want %d: %s", method, u, resp.StatusCode, want, msg)
	}
	if loc != nil {
		l, err := url.Parse(resp.Header.Get("Location"))
		if err != nil {
			return err
		}
		*loc = l.RequestURI()
	}
	return nil
}

// openPGPair opens two stead stores over one fresh schema, with a bytes
// tier in one fresh directory when tier: two servers of a fleet.
func openPGPair(ctx context.Context, tier bool) (stores []*stead.Store, schema string, cleanup func(), err error) {
	schema, drop, err := scratchSchema(ctx, "chunked")
	if err != nil {
		return nil, "", nil, err
	}
	dir, err := os.MkdirTemp("", "bench-chunked-")
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	cleanup = func() {
		for _, st := range stores {
			st.Close()
		}
		drop()
		os.RemoveAll(dir)
	}
	u, err := url.Parse(*pgURL)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	q := u.Query()
	q.Set("schema", schema)
	if tier {
		q.Set("bytes", "file://"+filepath.ToSlash(dir))
	}
	u.RawQuery = q.Encode()
	for range 2 {
		st, err := stead.Open(ctx, u.String())
		if err != nil {
			cleanup()
			return nil, "", nil, err
		}
		stores = append(stores, st)
	}
	return stores, schema, cleanup, nil
}

// chunkRows tallies the database bytes the tiered chunked pushes left:
// every row of blobs, blob_chunks, blob_uploads and pins (pg_column_size),
// against the bytes the blobs hold.
var chunkRows dbTally

type dbTally struct {
	mu           sync.Mutex
	rows, stored int64
}

// record adds schema's rows and stored bytes to the tally.
func (t *dbTally) record(ctx context.Context, schema string) {
	pool, err := rawPool(ctx, "")
	if err != nil {
		return
	}
	defer pool.Close()
	var rows, stored int64
	err = pool.QueryRow(ctx, fmt.Sprintf(`SELECT
  coalesce((SELECT sum(pg_column_size(b.*)) FROM %[1]s.blobs b), 0)
+ coalesce((SELECT sum(pg_column_size(c.*)) FROM %[1]s.blob_chunks c), 0)
+ coalesce((SELECT sum(pg_column_size(u.*)) FROM %[1]s.blob_uploads u), 0)
+ coalesce((SELECT sum(pg_column_size(p.*)) FROM %[1]s.pins p), 0),
  coalesce((SELECT sum(size) FROM %[1]s.blobs), 0)`, schema)).Scan(&rows, &stored)
	if err != nil || stored == 0 {
		return
	}
	t.mu.Lock()
	t.rows += rows
	t.stored += stored
	t.mu.Unlock()
}

// printChunkRows prints the database bytes per GiB the tiered chunked
// pushes stored, if measured.
func printChunkRows() {
	chunkRows.mu.Lock()
	defer chunkRows.mu.Unlock()
	if chunkRows.stored == 0 {
		return
	}
	fmt.Printf("\ndatabase bytes per GiB pushed chunked to pg+tier (all rows, pg_column_size): %d (%d bytes of rows for %d MiB)\n",
		chunkRows.rows*(1<<30)/chunkRows.stored, chunkRows.rows, chunkRows.stored>>20)
}
