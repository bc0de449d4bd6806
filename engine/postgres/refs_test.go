package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

func refStores(t *testing.T) (*pgtest.DB, *blob.Store, *ref.Store) {
	t.Helper()
	db := pgtest.New(t)
	e := open(t, db, "")
	return db, blob.NewStore(e.Blobs(), blob.Options{}), ref.NewStore(e.Refs(), ref.Options{})
}

func putValue(t *testing.T, bs *blob.Store, v string) blob.Key {
	t.Helper()
	key, err := bs.Put(context.Background(), bytes.NewReader([]byte(v)))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// waitForLockWait returns once a statement matching like waits on a lock.
func waitForLockWait(t *testing.T, db *pgtest.DB, like string) {
	t.Helper()
	testkit.Until(t, "a statement waiting on a lock", func() bool {
		var n int
		err := db.Admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE $1 AND pid <> pg_backend_pid()`, like).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// TestRefVersionsPastInt4: every ref statement takes versions as bigint.
func TestRefVersionsPastInt4(t *testing.T) {
	t.Parallel()
	db, bs, rs := refStores(t)
	ctx := context.Background()
	key := putValue(t, bs, "v")
	if _, err := db.Admin.Exec(ctx, fmt.Sprintf("SELECT setval('%s.ref_versions', 2147483647)", pgx.Identifier{db.Schema}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	r, err := rs.Set(ctx, "big", key, ref.SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err = rs.Set(ctx, "big", key, ref.SetOptions{IfVersion: r.Version}); err != nil {
		t.Fatalf("Set IfVersion %d: %v", r.Version, err)
	}
	if err := rs.Delete(ctx, "big", r.Version); err != nil {
		t.Fatalf("Delete IfVersion %d: %v", r.Version, err)
	}
}

// TestRefSwapAfterDelete: a compare-and-swap waiting on the key's blob row
// while its ref is deleted fails: the version it was to swap is gone.
func TestRefSwapAfterDelete(t *testing.T) {
	t.Parallel()
	db, bs, rs := refStores(t)
	ctx := context.Background()
	key := putValue(t, bs, "v")
	r, err := rs.Set(ctx, "tag", key, ref.SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Hold the blob row as an arbitration or a put would.
	tx, err := db.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s.blobs WHERE key = $1 FOR UPDATE", pgx.Identifier{db.Schema}.Sanitize()), key.String()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rs.Set(ctx, "tag", key, ref.SetOptions{IfVersion: r.Version})
		done <- err
	}()
	waitForLockWait(t, db, "%refs%")
	if err := rs.Delete(ctx, "tag", r.Version); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, steaderr.ErrConflict) {
		t.Fatalf("Set IfVersion %d after the ref's delete = %v, want ErrConflict", r.Version, err)
	}
	if _, err := rs.Get(ctx, "tag"); !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("Get after the delete = %v, want ErrNotFound", err)
	}
}

// TestRefVersionsIncrease: sets of one name to different keys (so under
// different blob row locks) commit in version order: a reader never sees
// a version smaller than one it saw before.
func TestRefVersionsIncrease(t *testing.T) {
	t.Parallel()
	_, bs, rs := refStores(t)
	ctx := context.Background()
	var keys []blob.Key
	for i := range 6 {
		keys = append(keys, putValue(t, bs, fmt.Sprint("v", i)))
	}
	if _, err := rs.Set(ctx, "hot", keys[0], ref.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := rs.Set(ctx, "hot", key, ref.SetOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var last int64
	for range 5000 {
		r, err := rs.Get(ctx, "hot")
		if err != nil {
			t.Fatal(err)
		}
		if r.Version < last {
			t.Errorf("version went down from %d to %d", last, r.Version)
			break
		}
		last = r.Version
	}
	close(stop)
	wg.Wait()
}

// TestRefDeleteOfDeleted: a Delete that waits on a row another delete
// removes answers ErrNotFound, as if it ran second.
func TestRefDeleteOfDeleted(t *testing.T) {
	t.Parallel()
	db, bs, rs := refStores(t)
	ctx := context.Background()
	r, err := rs.Set(ctx, "tag", putValue(t, bs, "v"), ref.SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf("DELETE FROM %s.refs WHERE name = 'tag'", pgx.Identifier{db.Schema}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rs.Delete(ctx, "tag", r.Version) }()
	waitForLockWait(t, db, "%refs%")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, steaderr.ErrNotFound) {
		t.Errorf("Delete of a ref deleted meanwhile = %v, want ErrNotFound", err)
	}
}
