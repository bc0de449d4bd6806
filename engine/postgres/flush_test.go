package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// A group commit whose statement fails (a trigger refuses one row) fails
// every put in it and stores none of them: nothing is half stored, and no
// put reports success for a row that was rolled back.
func TestFailedFlush(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	e := open(t, db, "")
	poison := []byte("poison")
	schema := pgx.Identifier{db.Schema}.Sanitize()
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE FUNCTION %s.poison() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.key = '%s' THEN RAISE EXCEPTION 'injected fault'; END IF; RETURN NEW; END $$`, schema, blob.KeyOf(poison)),
		fmt.Sprintf(`CREATE TRIGGER poison BEFORE INSERT ON %s.blobs FOR EACH ROW EXECUTE FUNCTION %[1]s.poison()`, schema),
	} {
		if _, err := db.Admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}

	// Whether the poisoned put shares its batch depends on scheduling: try
	// until it does, a few times.
	attemptOnce := func(attempt int) int {
		// Lock the table so that the first puts' flushes wait and the others
		// queue behind them, to be flushed together once it is unlocked.
		tx, err := db.Admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "LOCK TABLE "+schema+".blobs IN SHARE MODE"); err != nil {
			t.Fatal(err)
		}
		values := [][]byte{fmt.Appendf(nil, "first %d", attempt), fmt.Appendf(nil, "second %d", attempt)}
		for i := range 20 {
			values = append(values, fmt.Appendf(nil, "queued %d %d", attempt, i))
		}
		const poisoned = 12
		values[poisoned] = poison
		errs := make([]error, len(values))
		var wg sync.WaitGroup
		for i := range 2 { // one per flusher
			wg.Go(func() {
				_, errs[i] = e.Blobs().Put(ctx, blob.PutParams{Key: blob.KeyOf(values[i]), Value: values[i], Owner: "test", TTL: time.Minute})
			})
		}
		time.Sleep(50 * time.Millisecond) // they lead; not an assertion
		for i := 2; i < len(values); i++ {
			wg.Go(func() {
				_, errs[i] = e.Blobs().Put(ctx, blob.PutParams{Key: blob.KeyOf(values[i]), Value: values[i], Owner: "test", TTL: time.Minute})
			})
		}
		time.Sleep(200 * time.Millisecond) // let them queue; not an assertion
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()

		sharedFailure := 0
		for i, v := range values {
			_, getErr := e.Blobs().Get(ctx, blob.KeyOf(v))
			stored := getErr == nil
			if getErr != nil && !errors.Is(getErr, steaderr.ErrNotFound) {
				t.Fatal(getErr)
			}
			switch {
			case errs[i] == nil && !stored:
				t.Errorf("put %d reported success but is not stored", i)
			case errs[i] != nil && stored:
				t.Errorf("put %d failed (%v) but is stored: half a batch committed", i, errs[i])
			case errs[i] != nil && i != poisoned:
				sharedFailure++
			}
		}
		if errs[poisoned] == nil {
			t.Fatal("the poisoned put succeeded")
		}
		return sharedFailure
	}
	for attempt := range 5 {
		if attemptOnce(attempt) > 0 {
			return
		}
	}
	t.Errorf("in 5 attempts no put shared the poisoned put's batch: the test did not exercise a failed group commit")
}
