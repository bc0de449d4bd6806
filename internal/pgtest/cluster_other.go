//go:build !unix

package pgtest

import (
	"context"
	"errors"
	"testing"
)

// cluster is a throwaway PostgreSQL server; only unix systems can start one.
type cluster struct {
	url string
}

func startCluster(context.Context) (*cluster, error) {
	return nil, errors.New("throwaway clusters need a unix system")
}

func (c *cluster) stop() error { return nil }

func (c *cluster) halt() error   { return nil }
func (c *cluster) resume() error { return nil }

// ViaPgBouncer skips t: PgBouncer tests run on unix systems only.
func (d *DB) ViaPgBouncer(t testing.TB) *DB {
	t.Helper()
	t.Skip("pgtest: PGBOUNCER NOT AVAILABLE: tests through PgBouncer run on unix systems only")
	return nil
}

// ViaPgBouncerIfAny returns d: PgBouncer runs on unix systems only.
func (d *DB) ViaPgBouncerIfAny(t testing.TB) *DB {
	t.Helper()
	t.Log("pgtest: PGBOUNCER NOT AVAILABLE on this system, connecting directly instead")
	return d
}

func stopBouncer() error { return nil }

func findBinaries() (struct{}, error) {
	return struct{}{}, errors.New("throwaway clusters need a unix system")
}
