package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/internal/pgtest"
	"github.com/steadkit/stead/internal/poll"
)

// waitLockWaiters waits until n statements in db's schema wait on a lock.
func waitLockWaiters(t *testing.T, db *pgtest.DB, n int, what string) {
	t.Helper()
	poll.Until(t, what, func() bool {
		var got int
		err := db.Admin.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%'", db.Schema).Scan(&got)
		return err == nil && got >= n
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
	set, err := eng.BeginUpload(ctx, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the upload's lease to lapse", func() bool {
		var lapsed bool
		err := db.Admin.QueryRow(ctx, "SELECT expires_at < now() FROM "+uploads+" WHERE id = $1", int64(set)).Scan(&lapsed)
		return err == nil && lapsed
	})
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
	go func() { writeErr <- eng.WriteChunk(ctx, set, 0, []byte("late chunk"), time.Microsecond) }()
	waitLockWaiters(t, db, 1, "the chunk write to wait on the upload's row")
	type reaped struct {
		n   int
		err error
	}
	reap := make(chan reaped, 1)
	go func() {
		n, err := eng.ReapUploads(ctx)
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
