package sqlengine

import "context"

// Conditional runs a conditional write: it calls write until it matches a
// row, fails, or explain gives the reason it cannot match. write reports
// matched == false when its conditional statement matched no row; explain
// then reads the stored state and returns why the write cannot apply, or
// nil when the state changed since the write, which may match now. It
// stops with ctx's error once ctx ends.
func Conditional[T any](ctx context.Context, write func() (T, bool, error), explain func() error) (T, error) {
	for {
		v, matched, err := write()
		if err != nil || matched {
			return v, err
		}
		if err := explain(); err != nil {
			var zero T
			return zero, err
		}
		if err := ctx.Err(); err != nil {
			var zero T
			return zero, err
		}
	}
}
