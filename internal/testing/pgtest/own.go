package pgtest

import (
	"context"
	"os"
	"testing"
)

// Cluster is a throwaway PostgreSQL server that belongs to one test, which
// may stop and start it: for tests of what a client sees while the server
// is down. It costs an initdb, so use it only for that.
type Cluster struct {
	// URL reaches the cluster's postgres database as the superuser, over a
	// unix socket in a private directory.
	URL string
	c   *cluster
}

// NewCluster starts a Cluster for t, stopped and removed when t ends, with
// settings (postgresql.conf lines, "name = value") added to the throwaway
// ones: server-wide settings a test may change in a server of its own. It
// skips t when initdb and pg_ctl cannot be found, or fails it under
// STEAD_REQUIRE_POSTGRES=1.
func NewCluster(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	if _, err := findBinaries(); err != nil {
		if os.Getenv(envRequire) == "1" {
			t.Fatalf("pgtest: %v", err)
		}
		t.Skipf("pgtest: %v", err)
	}
	c, err := startClusterWith(context.Background(), settings)
	if err != nil {
		t.Fatalf("pgtest: starting a throwaway cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Error(err)
		}
	})
	return &Cluster{URL: c.url, c: c}
}

// Stop shuts the server down immediately, as a crash would: connections
// drop and new ones are refused until Start.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.c.halt(); err != nil {
		t.Fatalf("pgtest: stopping cluster: %v", err)
	}
}

// Start starts a stopped server again, with its data, and returns once it
// accepts connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.c.resume(); err != nil {
		t.Fatalf("pgtest: starting cluster: %v", err)
	}
}
