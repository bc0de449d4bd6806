// Package engineerr holds what the engines' error policies share: the one
// prefix rule (a driver error leaves an engine named by it, once) and the
// test for an error already decided.
package engineerr

import (
	"errors"

	"github.com/steadkit/stead/steaderr"
)

// Error is a driver error prefixed with the name of the engine it came
// through: "postgres: …", "sqlite: …". Unwrap gives the driver's error.
type Error struct {
	Engine string
	Err    error
}

func (e *Error) Error() string { return e.Engine + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// decided are the sentinels an engine's own code returns.
var decided = []error{
	steaderr.ErrNotFound, steaderr.ErrConflict, steaderr.ErrClosed, steaderr.ErrSchema,
	steaderr.ErrUnavailable, steaderr.ErrLeased, steaderr.ErrUnknownGroup,
	steaderr.ErrWrongGroup, steaderr.ErrInvalidArgument, steaderr.ErrLost,
}

// Decided reports whether err was interpreted already: it holds an *Error,
// or wraps a sentinel the engine chose itself. An engine's interpretError
// returns such an error unchanged.
func Decided(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return true
	}
	for _, s := range decided {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
