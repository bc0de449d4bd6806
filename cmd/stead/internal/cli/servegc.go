package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/gc"
)

// defaultGCInterval is how often a server with a registry or a build cache
// sweeps when --gc-interval is not given.
const defaultGCInterval = time.Hour

// serveGC is the collection a server runs on its own: its flags and the
// options they give.
type serveGC struct {
	interval      time.Duration
	grace         time.Duration
	untaggedAfter time.Duration
}

func (g *serveGC) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&g.interval, "gc-interval", defaultGCInterval, "how often the server sweeps (under the fleet's sweep lease); default on only with --registry or --build-cache; 0: never")
	f.DurationVar(&g.grace, "gc-grace", gc.DefaultGrace, "how long a newly unreferenced blob waits before a later sweep may delete it")
	f.DurationVar(&g.untaggedAfter, "registry-delete-untagged-after", 0, "delete, on the GC interval, a manifest pushed this long ago that no tag (nor a kept index or subject) keeps; 0: never")
}

// storeOptions are the options of the store the server opens.
func (g *serveGC) storeOptions() []stead.Option { return []stead.Option{stead.WithGCGrace(g.grace)} }

// every is the server's sweep interval: --gc-interval when given, else
// its default when a front end that creates garbage is served, else 0.
func (g *serveGC) every(cmd *cobra.Command, frontEnds bool) (time.Duration, error) {
	if g.interval < 0 {
		return 0, usageError("--gc-interval %v is negative (0 turns the sweeps off)", g.interval)
	}
	if g.untaggedAfter < 0 {
		return 0, usageError("--registry-delete-untagged-after %v is negative (0 keeps untagged manifests)", g.untaggedAfter)
	}
	if !frontEnds && !cmd.Flags().Changed("gc-interval") {
		return 0, nil
	}
	return g.interval, nil
}

// registryCollect is the registry's collection, run before each sweep.
func registryCollect(reg *registry.Registry) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := reg.Collect(ctx)
		return err
	}
}
