// Package cas runs the SQL engines' conditional writes: a statement that
// matched no row is explained from the stored state, and run again when
// that state changed in between.
package cas

import "context"

// Do calls write until it matches a row, fails, or explain gives the
// reason it cannot match. write reports matched == false when its
// conditional statement matched no row; explain then reads the stored
// state and returns why the write cannot apply, or nil when the state
// changed since the write, which may match now.
func Do[T any](ctx context.Context, write func() (T, bool, error), explain func() error) (T, error) {
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
