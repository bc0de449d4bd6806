package blob

import (
	"math"
	"testing"
	"time"
)

// TestUploadLeaseBounds: an upload lease is whole microseconds, at most
// MaxUploadLease (an engine adding a longer one to a clock could wrap),
// and the default when not positive.
func TestUploadLeaseBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want time.Duration }{
		{0, DefaultUploadLease},
		{-time.Second, DefaultUploadLease},
		{999 * time.Nanosecond, DefaultUploadLease},
		{1500 * time.Nanosecond, 1 * time.Microsecond},
		{time.Minute, time.Minute},
		{time.Duration(math.MaxInt64), MaxUploadLease},
	} {
		if got := NewStore(nil, Options{UploadLease: tc.in}).lease; got != tc.want {
			t.Errorf("UploadLease %v: the store leases %v, want %v", tc.in, got, tc.want)
		}
	}
}
