package sqlite_test

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/steaderr"
)

// A group commit whose transaction fails part-way (a trigger refuses one
// row) fails every put in it and stores none of them: nothing is half
// stored, and no put reports success for a row that was rolled back.
func TestFailedFlush(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	e := openEngine(t, path)
	mustMigrate(t, e)
	poison := []byte("poison")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), fmt.Sprintf(
		`CREATE TRIGGER poison BEFORE INSERT ON blobs WHEN NEW.key = '%s' BEGIN SELECT RAISE(ABORT, 'injected fault'); END`,
		blob.KeyOf(poison))); err != nil {
		t.Fatal(err)
	}
	db.Close()

	// Whether the poisoned put shares its batch depends on scheduling: try
	// until it does, a few times.
	attemptOnce := func(attempt int) int {
		// Hold the write lock so that the first put's flush waits and the
		// others queue behind it, to be flushed together once it is released.
		release := sqlite.HoldWriteLock(t, path)
		values := [][]byte{fmt.Appendf(nil, "first %d", attempt)}
		for i := range 20 {
			values = append(values, fmt.Appendf(nil, "queued %d %d", attempt, i))
		}
		values[10] = poison
		errs := make([]error, len(values))
		var wg sync.WaitGroup
		wg.Go(func() {
			_, errs[0] = e.Blobs().Put(t.Context(), blob.PutParams{Key: blob.KeyOf(values[0]), Value: values[0], Owner: "test", TTL: time.Minute})
		})
		time.Sleep(50 * time.Millisecond) // the first put leads; not an assertion
		for i := 1; i < len(values); i++ {
			wg.Go(func() {
				_, errs[i] = e.Blobs().Put(t.Context(), blob.PutParams{Key: blob.KeyOf(values[i]), Value: values[i], Owner: "test", TTL: time.Minute})
			})
		}
		time.Sleep(200 * time.Millisecond) // let them queue; not an assertion
		release()
		wg.Wait()

		sharedFailure := 0
		for i, v := range values {
			_, getErr := e.Blobs().Get(t.Context(), blob.KeyOf(v))
			stored := getErr == nil
			if getErr != nil && !errors.Is(getErr, steaderr.ErrNotFound) {
				t.Fatal(getErr)
			}
			switch {
			case errs[i] == nil && !stored:
				t.Errorf("put %d reported success but is not stored", i)
			case errs[i] != nil && stored:
				t.Errorf("put %d failed (%v) but is stored: half a batch committed", i, errs[i])
			case errs[i] != nil && i != 10:
				sharedFailure++
			}
		}
		if errs[10] == nil {
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
