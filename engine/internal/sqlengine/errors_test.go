package sqlengine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/steadkit/stead/steaderr"
)

func TestDecided(t *testing.T) {
	t.Parallel()
	driver := errors.New("driver says no")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"driver error", driver, false},
		{"prefixed", &Error{Engine: "x", Err: driver}, true},
		{"wrapped prefixed", fmt.Errorf("ctx: %w", &Error{Engine: "x", Err: driver}), true},
		{"own sentinel", fmt.Errorf("%w: busy", steaderr.ErrConflict), true},
		{"no schema", ErrNoSchema, true},
		{"not found", NotFound(driver), true},
	} {
		if got := Decided(tc.err); got != tc.want {
			t.Errorf("%s: Decided = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestErrorNamesEngineOnce(t *testing.T) {
	t.Parallel()
	driver := errors.New("boom")
	err := &Error{Engine: "sqlite", Err: driver}
	if err.Error() != "sqlite: boom" || !errors.Is(err, driver) {
		t.Fatalf("Error = %q, Is(driver) = %v", err, errors.Is(err, driver))
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	driver := errors.New("no rows in result set")
	err := NotFound(driver)
	if !errors.Is(err, steaderr.ErrNotFound) || !errors.Is(err, driver) {
		t.Fatalf("NotFound matches ErrNotFound %v, the driver's error %v", errors.Is(err, steaderr.ErrNotFound), errors.Is(err, driver))
	}
	if err.Error() != steaderr.ErrNotFound.Error() {
		t.Fatalf("NotFound reads %q: the driver's words leaked", err)
	}
}

func TestReadAndListError(t *testing.T) {
	t.Parallel()
	noSchema := fmt.Errorf("%w: %w", ErrNoSchema, &Error{Engine: "postgres", Err: errors.New(`relation "blobs" does not exist`)})
	other := fmt.Errorf("%w: down", steaderr.ErrUnavailable)
	if err := ReadError(noSchema); !errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrSchema) {
		t.Errorf("ReadError(no schema) = %v, want ErrNotFound", err)
	}
	if err := ListError(noSchema); err != nil {
		t.Errorf("ListError(no schema) = %v, want nil", err)
	}
	for _, f := range []func(error) error{ReadError, ListError} {
		if err := f(other); err != other {
			t.Errorf("another error came back as %v", err)
		}
		if err := f(nil); err != nil {
			t.Errorf("nil came back as %v", err)
		}
	}
}
