//go:build !unix

package pgtest

import (
	"context"
	"errors"
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
