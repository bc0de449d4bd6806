package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// waitLockWaiters waits until n statements in db's schema wait on a lock.
func waitLockWaiters(t *testing.T, db *pgtest.DB, n int, what string) {
	t.Helper()
	testkit.Until(t, what, func() bool {
		var got int
		err := db.Admin.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%'", db.Schema).Scan(&got)
		return err == nil && got >= n
	})
}

// waitLapsed waits until the lease of upload set has lapsed.
func waitLapsed(t *testing.T, db *pgtest.DB, set blob.ChunkSet) {
	t.Helper()
	uploads := pgx.Identifier{db.Schema, "blob_uploads"}.Sanitize()
	testkit.Until(t, "the upload's lease to lapse", func() bool {
		var lapsed bool
		err := db.Admin.QueryRow(t.Context(), "SELECT expires_at < now() FROM "+uploads+" WHERE id = $1", int64(set)).Scan(&lapsed)
		return err == nil && lapsed
	})
}

// TestChunkReapRacesChunkWrite holds a lapsed upload's row while a chunk
// write and then the reaper wait on it: whichever goes first, once the
// reaper has discarded the upload no chunk of it may be left behind (a
// chunk no upload or blob names is never reaped).
func TestChunkReapRacesChunkWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	eng := open(t, db, "").Blobs()
	uploads := pgx.Identifier{db.Schema, "blob_uploads"}.Sanitize()
	chunks := pgx.Identifier{db.Schema, "blob_chunks"}.Sanitize()
	set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	waitLapsed(t, db, set)
	tx, err := db.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, "SELECT FROM "+uploads+" WHERE id = $1 FOR UPDATE", int64(set)); err != nil {
		t.Fatal(err)
	}
	// The write renews the lease by a microsecond from its own start, so
	// the reaper, which starts later, still finds it lapsed.
	writeErr := make(chan error, 1)
	go func() {
		writeErr <- eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: []byte("late chunk"), Lease: time.Microsecond})
	}()
	waitLockWaiters(t, db, 1, "the chunk write to wait on the upload's row")
	type reaped struct {
		n   int
		err error
	}
	reap := make(chan reaped, 1)
	go func() {
		n, err := eng.ReapUploads(ctx, blob.ReapUploadsParams{})
		reap <- reaped{n, err}
	}()
	waitLockWaiters(t, db, 2, "the reaper to wait on the upload's row")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	werr, r := <-writeErr, <-reap
	if r.err != nil {
		t.Fatalf("ReapUploads: %v", r.err)
	}
	t.Logf("WriteChunk = %v; ReapUploads = %d", werr, r.n)
	var nu, nc int
	if err := db.Admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+uploads+"), (SELECT count(*) FROM "+chunks+")").Scan(&nu, &nc); err != nil {
		t.Fatal(err)
	}
	if nu == 0 && nc != 0 {
		t.Fatalf("after the reap: no upload and %d chunks of set %d that no reap will find", nc, set)
	}
}

// TestChunkRaces races appends, publishes (of uploads of the same
// content among them), aborts and reaps over two engines, then checks the
// rows: once every upload ended, no upload row and no chunk outside a
// published blob's set is left, and every blob reads back bytes that hash
// to its key.
func TestChunkRaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	engs := []blob.Backend{open(t, db, "&pool_max_conns=1").Blobs(), open(t, db, "").Blobs()}
	store := blob.NewStore(engs[0], blob.Options{InlineLimit: 16, ChunkSize: 64})
	var wg sync.WaitGroup
	for i := range 40 {
		content := bytes.Repeat([]byte{byte('a' + i%5)}, 64*3) // 5 contents, 8 uploads each
		key := blob.KeyOf(content)
		publish := func(eng blob.Backend, set blob.ChunkSet) {
			_, _ = eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(content)), Owner: "o", TTL: time.Hour})
		}
		wg.Go(func() {
			set, err := engs[i%2].BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Hour})
			if err != nil {
				t.Error(err)
				return
			}
			if err := engs[i%2].WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: content[:64], Lease: time.Hour}); err != nil {
				t.Error(err)
				return
			}
			var in sync.WaitGroup
			for c := 1; c < 3; c++ {
				in.Go(func() {
					// The second append conflicts unless the first
					// committed before it.
					_ = engs[(i+c)%2].WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: int64(64 * c), Data: content[64*c : 64*(c+1)], Lease: time.Hour})
				})
			}
			in.Go(func() { publish(engs[(i+1)%2], set) })
			if i%3 == 0 {
				in.Go(func() { _ = engs[i%2].AbortUpload(ctx, set) })
			}
			in.Go(func() { _, _ = engs[(i+1)%2].ReapUploads(ctx, blob.ReapUploadsParams{}) })
			in.Wait()
			publish(engs[i%2], set)
			if err := engs[(i+1)%2].AbortUpload(ctx, set); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s := func(table string) string { return pgx.Identifier{db.Schema, table}.Sanitize() }
	var nu, orphans int
	if err := db.Admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+s("blob_uploads")+"), (SELECT count(*) FROM "+s("blob_chunks")+
		" c WHERE NOT EXISTS (SELECT FROM "+s("blobs")+" b WHERE b.chunks = c.chunks))").Scan(&nu, &orphans); err != nil {
		t.Fatal(err)
	}
	if nu != 0 || orphans != 0 {
		t.Fatalf("after every upload ended: %d upload rows, %d chunks outside any blob", nu, orphans)
	}
	rows, err := db.Admin.Query(ctx, "SELECT key FROM "+s("blobs"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		key, err := blob.ParseKey(k)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := store.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get %s: %v", k, err)
		}
		got, err := io.ReadAll(rd)
		if err != nil || blob.KeyOf(got) != key {
			t.Fatalf("blob %s reads %d bytes hashing elsewhere (%v)", k, len(got), err)
		}
	}
}

// TestChunkPublishRacesReap: a publish and a reap of the same lapsed
// upload, either waiting first on the upload row, end with the value
// published whole and nothing reaped, or reaped and the publish lost;
// never a value without its chunks.
func TestChunkPublishRacesReap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, publishFirst := range []bool{true, false} {
		db := pgtest.New(t)
		eng := open(t, db, "").Blobs()
		uploads := pgx.Identifier{db.Schema, "blob_uploads"}.Sanitize()
		chunks := pgx.Identifier{db.Schema, "blob_chunks"}.Sanitize()
		content := []byte("lapsed upload content")
		key := blob.KeyOf(content)
		set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: content, Lease: time.Microsecond}); err != nil {
			t.Fatal(err)
		}
		waitLapsed(t, db, set)
		tx, err := db.Admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT FROM "+uploads+" WHERE id = $1 FOR UPDATE", int64(set)); err != nil {
			t.Fatal(err)
		}
		pub := make(chan error, 1)
		reap := make(chan int, 1)
		doPub := func() {
			_, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(content)), Owner: "o", TTL: time.Hour})
			pub <- err
		}
		doReap := func() {
			n, err := eng.ReapUploads(ctx, blob.ReapUploadsParams{})
			if err != nil {
				t.Error(err)
			}
			reap <- n
		}
		if publishFirst {
			go doPub()
			waitLockWaiters(t, db, 1, "publish waits")
			go doReap()
		} else {
			go doReap()
			waitLockWaiters(t, db, 1, "reap waits")
			go doPub()
		}
		waitLockWaiters(t, db, 2, "both wait")
		_ = tx.Rollback(ctx)
		perr, n := <-pub, <-reap
		var nchunks, nblobs int
		if err := db.Admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+chunks+"), (SELECT count(*) FROM "+pgx.Identifier{db.Schema, "blobs"}.Sanitize()+")").Scan(&nchunks, &nblobs); err != nil {
			t.Fatal(err)
		}
		switch {
		case perr == nil && (n != 0 || nchunks != 1 || nblobs != 1):
			t.Fatalf("publish first %v: published, but reaped %d, %d blobs, %d chunks; want 0, 1, 1", publishFirst, n, nblobs, nchunks)
		case perr != nil && (!errors.Is(perr, steaderr.ErrLost) || n != 1 || nchunks != 0 || nblobs != 0):
			t.Fatalf("publish first %v: publish %v, reaped %d, %d blobs, %d chunks; want ErrLost, 1, 0, 0", publishFirst, perr, n, nblobs, nchunks)
		}
	}
}
