package postgres_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// autovacuumWait bounds a wait for autovacuum, which a 1 s naptime starts
// within seconds on an idle server; a loaded one may take longer.
const autovacuumWait = 2 * time.Minute

// TestAutovacuumReturnsBlobSpace: deleted blob bytes come back without an
// operator's VACUUM. In a server of its own (autovacuum_naptime is
// server-wide) with a 1 s naptime, 160 MiB of large blobs are kept and
// vacuumed, and 20 MiB more are put and deleted: an eighth of the table's
// rows, under the default 20% that leaves them dead (this test failed so
// before migration 11), over the 16 MiB and 1% that start a vacuum now.
// blob_chunks with its TOAST table and indexes must shrink back to the
// kept size, give or take 2 MiB. The cluster neither flushes nor throttles
// vacuum (durability and I/O pacing are not what it tests), so it takes
// seconds on a loaded machine too.
func TestAutovacuumReturnsBlobSpace(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t, "autovacuum = on", "autovacuum_naptime = 1s", "autovacuum_vacuum_cost_delay = 0",
		"fsync = off", "synchronous_commit = off", "full_page_writes = off")
	e, _ := openCluster(t, c)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	s := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
	// Random, so that no chunk compresses; read whole, as a byte-by-byte
	// fill costs seconds under the race detector.
	rng := rand.NewChaCha8([32]byte{22, 5})
	put := func(n int) []blob.Key {
		t.Helper()
		keys := make([]blob.Key, n)
		value := make([]byte, 1<<20) // one chunk of DefaultChunkSize
		for i := range keys {
			rng.Read(value)
			if keys[i], err = s.Put(ctx, bytes.NewReader(value)); err != nil {
				t.Fatal(err)
			}
		}
		return keys
	}
	size := func() int64 {
		t.Helper()
		var n int64
		if err := admin.QueryRow(ctx, `SELECT pg_total_relation_size('stead.blob_chunks')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(autovacuumWait); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("still waiting, after %v, for %s", autovacuumWait, what)
			}
		}
	}

	put(160)
	// The table as a long-lived one is: vacuumed before, so autovacuum's
	// thresholds scale with the rows it holds.
	if _, err := admin.Exec(ctx, `VACUUM stead.blob_chunks`); err != nil {
		t.Fatal(err)
	}
	kept := size()
	doomed := put(20)
	time.Sleep(5 * time.Millisecond) // their pins lapse
	if _, err := s.DeleteMany(ctx, doomed); err != nil {
		t.Fatal(err)
	}
	peak := size()
	t.Logf("blob_chunks: %d MiB kept, %d MiB with the deleted blobs", kept>>20, peak>>20)
	const slack = 2 << 20
	wait("blob_chunks to shrink back to its kept size", func() bool { return size() <= kept+slack })
	t.Logf("blob_chunks: %d MiB after autovacuum", size()>>20)
}
