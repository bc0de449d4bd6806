package sqlengine

import (
	"errors"
	"fmt"

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

// NotFound returns an error whose text is steaderr.ErrNotFound's alone and
// which matches both steaderr.ErrNotFound and driverErr (the driver's "no
// rows") with errors.Is, so engine code may still test for the driver's
// error.
func NotFound(driverErr error) error { return notFound{driverErr} }

type notFound struct{ driver error }

func (e notFound) Error() string   { return steaderr.ErrNotFound.Error() }
func (e notFound) Unwrap() []error { return []error{steaderr.ErrNotFound, e.driver} }

// ErrNoSchema marks the error of a statement that met a database never
// migrated. Writes return it (it wraps steaderr.ErrSchema); reads turn it
// into absent or empty answers with ReadError and ListError.
var ErrNoSchema = fmt.Errorf("%w: schema not initialized: run stead migrate", steaderr.ErrSchema)

// ErrAbsent is a point read's answer on a database never migrated.
var ErrAbsent = fmt.Errorf("%w: schema not initialized", steaderr.ErrNotFound)

// ReadError returns err, an error the engine interpreted, as a point
// read's answer: on a database never migrated nothing is stored, so
// ErrNoSchema becomes ErrAbsent (steaderr.ErrNotFound).
func ReadError(err error) error {
	if errors.Is(err, ErrNoSchema) {
		return ErrAbsent
	}
	return err
}

// ListError returns err, an error the engine interpreted, as a listing's,
// count's or probe's answer: on a database never migrated nothing is
// stored, so ErrNoSchema becomes nil, an empty answer.
func ListError(err error) error {
	if errors.Is(err, ErrNoSchema) {
		return nil
	}
	return err
}
