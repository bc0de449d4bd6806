package lock

import "testing"

func TestBackoff(t *testing.T) {
	t.Parallel()
	var b backoff
	ceiling := minBackoff
	for i := range 20 {
		d := b.next()
		if d < ceiling/2 || d > ceiling {
			t.Fatalf("wait %d = %v, want within [%v, %v]", i, d, ceiling/2, ceiling)
		}
		ceiling = min(2*ceiling, maxBackoff)
	}
}
