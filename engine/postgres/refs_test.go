package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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

// TestSetsShareCommits races Sets through an engine of one connection, so
// that they share group commits: a Set whose blob is not stored fails
// alone with ErrNotFound, an IfAbsent of a live name alone with
// ErrConflict, both writing nothing; every other commits (IfAbsent ones
// told Created), versions of one name distinct, the last committed
// holding the greatest; and fewer transactions than Sets wrote the refs.
func TestSetsShareCommits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "&pool_max_conns=1")
	ctx := t.Context()
	stored := []byte("sets share commits")
	key := blob.KeyOf(stored)
	if _, err := e.Blobs().Put(ctx, blob.PutParams{Key: key, Value: stored, Owner: "test", TTL: time.Hour}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	held, err := e.Refs().Set(ctx, ref.SetParams{Name: "sb/held", Key: key})
	if err != nil {
		t.Fatalf("Set: %v", err)
	}
	const workers, each = 32, 4
	type outcome struct {
		i   int
		r   ref.Ref
		err error
	}
	outcomes := make([]outcome, workers*each)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			<-start
			for j := range each {
				i := w*each + j
				p := ref.SetParams{Name: fmt.Sprintf("sb/own-%d", i), Key: key}
				switch i % 4 {
				case 0:
					p.Key = blob.KeyOf(fmt.Appendf(nil, "not stored %d", i))
				case 1:
					p.Name, p.Cond = "sb/held", ref.IfAbsent
				case 2:
					p.Cond = ref.IfAbsent
				case 3:
					p.Name, p.Weak = "sb/shared", i%8 == 3
				}
				r, err := e.Refs().Set(ctx, p)
				outcomes[i] = outcome{i, r, err}
			}
		})
	}
	close(start)
	wg.Wait()
	var sharedMax int64
	versions := map[int64]bool{}
	for _, o := range outcomes {
		name := fmt.Sprintf("sb/own-%d", o.i)
		switch o.i % 4 {
		case 0:
			_, gerr := e.Refs().Get(ctx, ref.GetParams{Name: name})
			if !errors.Is(o.err, steaderr.ErrNotFound) || !errors.Is(gerr, steaderr.ErrNotFound) {
				t.Errorf("Set %d of a blob not stored: %v, and Get: %v; want ErrNotFound, nothing written", o.i, o.err, gerr)
			}
			continue
		case 1:
			if !errors.Is(o.err, steaderr.ErrConflict) {
				t.Errorf("IfAbsent Set %d of a live name: %v, want ErrConflict", o.i, o.err)
			}
			continue
		case 2:
			if o.err != nil || !o.r.Created || o.r.Name != name {
				t.Errorf("IfAbsent Set %d: %+v, %v; want %q created", o.i, o.r, o.err, name)
			}
		case 3:
			if o.err != nil || o.r.Name != "sb/shared" {
				t.Errorf("Set %d: %+v, %v", o.i, o.r, o.err)
			}
			sharedMax = max(sharedMax, o.r.Version)
		}
		if versions[o.r.Version] {
			t.Errorf("Set %d: version %d told twice", o.i, o.r.Version)
		}
		versions[o.r.Version] = true
	}
	if got, err := e.Refs().Get(ctx, ref.GetParams{Name: "sb/held"}); err != nil || got.Version != held.Version {
		t.Errorf("held ref after refused IfAbsent Sets: %+v, %v; want version %d", got, err, held.Version)
	}
	if got, err := e.Refs().Get(ctx, ref.GetParams{Name: "sb/shared"}); err != nil || got.Version != sharedMax {
		t.Errorf("shared ref: %+v, %v; want the greatest version told, %d", got, err, sharedMax)
	}
	var sets, txs int
	err = db.Admin.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), count(DISTINCT xmin::text) FROM %s.refs WHERE name LIKE 'sb/own-%%'`, pgx.Identifier{db.Schema}.Sanitize())).Scan(&sets, &txs)
	if err != nil || sets != workers*each/4 || txs >= sets {
		t.Errorf("own refs: %d written in %d transactions, %v; want %d in fewer", sets, txs, err, workers*each/4)
	}
}
