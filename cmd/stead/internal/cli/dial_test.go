package cli

import (
	"strings"
	"testing"
)

// TestPostgresDialErrorOnce: a refused PostgreSQL connection is reported
// once, though pgx tries twice (with and without TLS).
func TestPostgresDialErrorOnce(t *testing.T) {
	t.Parallel()
	code, _, stderr := runIn(t.Context(), "--db", "postgres://stead@127.0.0.1:1/stead", "ls")
	if code != 1 || strings.Count(stderr, "connection refused") != 1 || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("stead ls on a refused PostgreSQL = exit %d, stderr %q; want exit 1 and the refusal once, on one line", code, stderr)
	}
}
