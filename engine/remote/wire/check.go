package wire

import (
	"fmt"
	"math"

	"github.com/steadkit/stead/steaderr"
)

// A Checker is a request body with ranges of its own: Check refuses a
// decoded value out of them with an error wrapping
// steaderr.ErrInvalidArgument. A server checks every body it decodes.
type Checker interface {
	Check() error
}

// MaxCount bounds every count and limit a request carries: the largest
// 32-bit integer, which every engine stores.
const MaxCount = math.MaxInt32

func checkCount(what string, n int) error {
	if n < 0 || n > MaxCount {
		return fmt.Errorf("%w: %s %d: want 0 to %d", steaderr.ErrInvalidArgument, what, n, MaxCount)
	}
	return nil
}

func checkNonNegative(what string, n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: %s %d: want 0 or more", steaderr.ErrInvalidArgument, what, n)
	}
	return nil
}

// Check implements Checker: the token is not negative.
func (r LockRequest) Check() error { return checkNonNegative("token", r.Token) }

// Check implements Checker: n is a count, the incarnation not negative.
func (r ClaimRequest) Check() error {
	if err := checkCount("n", r.N); err != nil {
		return err
	}
	return checkNonNegative("incarnation", r.Incarnation)
}

// Check implements Checker: the version and lease incarnation are not
// negative.
func (r Record) Check() error {
	if err := checkNonNegative("version", r.Version); err != nil {
		return err
	}
	return checkNonNegative("lease incarnation", r.Lease.Incarnation)
}

// Check implements Checker: the size is not negative (the store refuses
// 0 and sizes over its limit).
func (p Publish) Check() error { return checkNonNegative("size", p.Size) }

// Check implements Checker: the limit is a count.
func (s GCStep) Check() error { return checkCount("limit", s.Limit) }
