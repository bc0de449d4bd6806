package lock

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if they leave goroutines behind: a
// renewer, a waiter or a committer nobody stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
