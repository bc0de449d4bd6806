package postgres

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"
)

// maxTransientRetries bounds how often a statement failing with a deadlock
// or serialization failure is run again before its error is returned.
const maxTransientRetries = 8

// retryTransient runs fn, and runs it again (up to maxTransientRetries
// times, after a short random pause, while ctx lasts) when it fails with
// deadlock_detected (40P01) or serialization_failure (40001): both roll the
// transaction back whole, so running it again is safe. Its result is
// interpreted by interpretError. Each retry is logged at debug level.
func (e *Engine) retryTransient(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt > maxTransientRetries || !isTransient(err) {
			return interpretError(err)
		}
		e.log.LogAttrs(ctx, slog.LevelDebug, "stead: postgres: retrying a statement after a deadlock or serialization failure",
			slog.Int("attempt", attempt), slog.Any("error", err))
		pause := time.Duration(rand.Int64N(int64(attempt) * int64(time.Millisecond)))
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(pause):
		}
	}
}
