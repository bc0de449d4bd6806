package postgres_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// TestOverlappingPuts races many goroutines, through two engines on one
// schema, each putting random overlapping subsets of a small key set. Two
// batches inserting the same new keys in different orders used to deadlock
// (40P01) and fail every caller of both batches: no put may fail. Of the
// puts of each key, batched together or racing, exactly one is told it
// stored the blob.
func TestOverlappingPuts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	engines := []blob.Backend{open(t, db, "&pool_max_conns=4").Blobs(), open(t, db, "&pool_max_conns=4").Blobs()}
	// Each round has its own small key set, new to the store, so that
	// batches meet each other's uncommitted inserts.
	const nkeys, workers, rounds = 8, 32, 60
	value := func(round, i int) []byte { return fmt.Appendf(nil, "overlapping put %d/%d", round, i) }
	var puts, failures atomic.Int64
	var mu sync.Mutex
	created := map[blob.Key]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eng := engines[w%len(engines)]
			for round := range rounds {
				v := value(round, rand.IntN(nkeys))
				puts.Add(1)
				told, err := eng.Put(context.Background(), blob.PutParams{Key: blob.KeyOf(v), Value: v, Owner: "test", TTL: time.Minute})
				if err != nil {
					if failures.Add(1) <= 3 {
						t.Errorf("Put: %v", err)
					}
				}
				if told {
					mu.Lock()
					created[blob.KeyOf(v)]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d overlapping puts failed", n, puts.Load())
	}
	var stored int
	for round := range rounds {
		for i := range nkeys {
			key := blob.KeyOf(value(round, i))
			want := 0
			if _, err := engines[0].Stat(context.Background(), key); err == nil {
				stored++
				want = 1
			}
			if created[key] != want {
				t.Errorf("round %d key %d: %d puts told they stored it, want %d", round, i, created[key], want)
			}
		}
	}
	if stored == 0 {
		t.Fatal("no put stored anything")
	}
}

func bytesReader(i int) io.Reader { return strings.NewReader(fmt.Sprint("value ", i)) }

// TestPutEdgesPlanStaysSmall proves a put naming children costs a few
// buffers a child however large the tables have grown since its prepared
// statement was planned: the plan is generic (kept by the statement cache)
// and made while the tables were nearly empty, and autovacuum is off, so
// no ANALYZE replans it. A plan that hash-joins or scans blobs or
// blob_edges whole reads every page of them.
func TestPutEdgesPlanStaysSmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	e := open(t, db, "")
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	key := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	schema := pgx.Identifier{db.Schema}.Sanitize()
	for _, s := range []string{
		"SET plan_cache_mode = force_generic_plan",
		"ALTER TABLE " + schema + ".blobs SET (autovacuum_enabled = false)",
		"ALTER TABLE " + schema + ".blob_edges SET (autovacuum_enabled = false)",
		"INSERT INTO " + schema + ".blobs (key, size, value) SELECT 'sha256:' || encode(sha256(('child ' || i)::bytea), 'hex'), 1, '\\x00' FROM generate_series(1, 10) i",
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	var children []string
	for i := 1; i <= 10; i++ {
		children = append(children, key(fmt.Sprintf("child %d", i)))
	}
	slices.Sort(children)
	if _, err := conn.Prepare(ctx, "put_edges", postgres.Statements(e)["sqlPutEdges"]); err != nil {
		t.Fatal(err)
	}
	array := func(xs ...string) string { return "'{" + strings.Join(xs, ",") + "}'" }
	put := func(parent string) string {
		lock := slices.Sorted(slices.Values(append(slices.Clone(children), parent)))
		parents := slices.Repeat([]string{parent}, len(children))
		return "EXECUTE put_edges(" + strings.Join([]string{
			array(parent), array("1"), `'{"\\\\x00"}'`, array("test"), array("60000000"), array("NULL"), array("f"),
			array(lock...), array(parents...), array(children...),
			array(parent), array("test"), array("60000000"), array("NULL"), array("f"),
		}, ", ") + ")"
	}
	// The first execution plans the statement, over ten blobs and no edge.
	if _, err := conn.Exec(ctx, put(key("first parent"))); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"INSERT INTO " + schema + ".blobs (key, size, value) SELECT 'sha256:' || encode(sha256(('filler ' || i)::bytea), 'hex'), 1, '\\x00' FROM generate_series(1, 20000) i",
		"INSERT INTO " + schema + ".blob_edges (parent, child) SELECT 'sha256:' || encode(sha256(('filler ' || i)::bytea), 'hex'), c FROM generate_series(1, 5000) i, unnest(" + array(children...) + "::text[]) c",
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	var out []map[string]any
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+put(key("second parent"))).Scan(&out); err != nil {
		t.Fatal(err)
	}
	// 50,000 edges and 20,000 blob rows span hundreds of pages; ten
	// children's probes and locks, the edges' and the blob's inserts a
	// few buffers each.
	if n := buffers(out[0]["Plan"].(map[string]any)); n > 250 {
		t.Fatalf("a put naming 10 children read %d buffers over a grown store: its plan scans a table", n)
	}
	var edges int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+schema+".blob_edges WHERE parent = $1", key("second parent")).Scan(&edges); err != nil || edges != len(children) {
		t.Fatalf("the explained put stored %d edges, %v; want %d", edges, err, len(children))
	}
}
