//go:build !unix

package pgtest

import (
	"context"
	"errors"
	"os"
	"testing"
)

// cluster is a throwaway PostgreSQL server; only unix systems can start one.
type cluster struct {
	url string
}

func startCluster(context.Context) (*cluster, error) {
	return nil, errors.New("throwaway clusters need a unix system")
}

func startClusterWith(ctx context.Context, _ []string) (*cluster, error) { return startCluster(ctx) }

func (c *cluster) stop() error { return nil }

func (c *cluster) halt() error   { return nil }
func (c *cluster) resume() error { return nil }

// ViaPgBouncer skips t, or fails it under STEAD_REQUIRE_PGBOUNCER=1:
// PgBouncer tests run on unix systems only.
func (d *DB) ViaPgBouncer(t testing.TB) *DB {
	t.Helper()
	noBouncer(t)
	t.Skip("pgtest: PGBOUNCER NOT AVAILABLE: tests through PgBouncer run on unix systems only")
	return nil
}

// ViaPgBouncerIfAny returns d, or fails t under STEAD_REQUIRE_PGBOUNCER=1:
// PgBouncer runs on unix systems only.
func (d *DB) ViaPgBouncerIfAny(t testing.TB) *DB {
	t.Helper()
	noBouncer(t)
	t.Log("pgtest: PGBOUNCER NOT AVAILABLE on this system, connecting directly instead")
	return d
}

// noBouncer fails t if PgBouncer is required.
func noBouncer(t testing.TB) {
	t.Helper()
	if os.Getenv(envRequireBouncer) == "1" {
		t.Fatal("pgtest: PGBOUNCER NOT AVAILABLE: tests through PgBouncer run on unix systems only, and STEAD_REQUIRE_PGBOUNCER=1")
	}
}

func stopBouncer() error { return nil }

func findBinaries() (struct{}, error) {
	return struct{}{}, errors.New("throwaway clusters need a unix system")
}
