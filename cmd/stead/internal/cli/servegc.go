package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/gc"
)

// defaultGCInterval is how often a server with a registry or a build cache
// sweeps when --gc-interval is not given.
const defaultGCInterval = time.Hour

// serveGC is the collection a server runs on its own: its flags and the
// options they give.
type serveGC struct {
	interval time.Duration
	grace    time.Duration
}

func (g *serveGC) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&g.interval, "gc-interval", defaultGCInterval, "how often the server sweeps (under the fleet's sweep lease); default on only with --registry or --build-cache; 0: never")
	f.DurationVar(&g.grace, "gc-grace", gc.DefaultGrace, "how long a newly unreferenced blob waits before a later sweep may delete it")
}

// storeOptions are the options of the store the server opens.
func (g *serveGC) storeOptions() []stead.Option { return []stead.Option{stead.WithGCGrace(g.grace)} }

// every is the server's sweep interval: --gc-interval when given, else
// its default when a front end that creates garbage is served, else 0.
func (g *serveGC) every(cmd *cobra.Command, frontEnds bool) (time.Duration, error) {
	if g.interval < 0 {
		return 0, usageError("--gc-interval %v is negative (0 turns the sweeps off)", g.interval)
	}
	if !frontEnds && !cmd.Flags().Changed("gc-interval") {
		return 0, nil
	}
	return g.interval, nil
}
