// Package notfound turns a driver's "no rows" error into
// steaderr.ErrNotFound without the driver's words.
package notfound

import "github.com/steadkit/stead/steaderr"

// Wrap returns an error whose text is steaderr.ErrNotFound's alone and
// which matches both steaderr.ErrNotFound and driverErr with errors.Is, so
// engine code may still test for the driver's error.
func Wrap(driverErr error) error { return wrapped{driverErr} }

type wrapped struct{ driver error }

func (e wrapped) Error() string   { return steaderr.ErrNotFound.Error() }
func (e wrapped) Unwrap() []error { return []error{steaderr.ErrNotFound, e.driver} }
