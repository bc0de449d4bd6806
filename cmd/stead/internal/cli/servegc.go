package cli

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/server"
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
	retention     string // a policy file
}

func (g *serveGC) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.DurationVar(&g.interval, "gc-interval", defaultGCInterval, "how often the server sweeps (under the fleet's sweep lease); default on only with --registry or --build-cache; 0: never")
	f.DurationVar(&g.grace, "gc-grace", gc.DefaultGrace, "how long a newly unreferenced blob waits before a later sweep may delete it")
	f.StringVar(&g.retention, "retention", "", "the registry's retention policy, a YAML file (docs/guides/registry.md#retention), applied on the GC interval")
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

// policy reads the retention policy file, nil when none is given.
func (g *serveGC) policy() (*registry.Retention, error) {
	return readRetention(g.retention)
}

func readRetention(file string) (*registry.Retention, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageError("retention: %v", err)
	}
	r, err := registry.ParseRetention(b)
	if err != nil {
		return nil, usageError("%s: %v", file, err)
	}
	return r, nil
}

// retentionCommand applies a retention policy once, or lists what it
// would delete.
func retentionCommand(e *env) *cobra.Command {
	var dryRun bool
	var untaggedAfter time.Duration
	cmd := &cobra.Command{
		Use:   "retention FILE",
		Short: "Apply the registry's retention policy once (--dry-run: list what would go)",
		Long: `Apply a retention policy (a YAML file, docs/guides/registry.md#retention)
to the registry's repositories once, as stead serve --retention does on its
GC interval: delete the tags no rule keeps, then the untagged manifests past
their period. Prints one line per deletion; --dry-run deletes nothing.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := readRetention(args[0])
			if err != nil {
				return err
			}
			if untaggedAfter < 0 {
				return usageError("--delete-untagged-after %v is negative", untaggedAfter)
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				reg := registry.New(st, registry.Options{Retention: r, DeleteUntaggedAfter: untaggedAfter, Logger: e.log})
				got, err := reg.Collect(cmd.Context(), registry.CollectOptions{DryRun: dryRun})
				w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "REPOSITORY\tTAG\tDIGEST\tPUSHED\tREASON")
				for _, d := range got.Deleted {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.Repository, d.Tag, d.Digest, d.Pushed.UTC().Format(time.RFC3339), d.Reason)
				}
				if ferr := w.Flush(); err == nil {
					err = ferr
				}
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "delete nothing; list what would go")
	cmd.Flags().DurationVar(&untaggedAfter, "delete-untagged-after", 0, "delete untagged manifests pushed this long ago in repositories no rule gives a period (0: never)")
	return cmd
}

// registryMount serves reg under /v2/ with its hooks: its collection
// before each sweep, and its dry run and repositories for the console.
func registryMount(reg *registry.Registry) server.Mount {
	return server.Mount{
		Prefix:    registry.Prefix,
		Handler:   reg,
		RefPrefix: registry.RefPrefix,
		Collect: func(ctx context.Context) error {
			_, err := reg.Collect(ctx, registry.CollectOptions{})
			return err
		},
		Preview: func(ctx context.Context) ([]server.Preview, error) {
			done, err := reg.Collect(ctx, registry.CollectOptions{DryRun: true})
			if err != nil {
				return nil, err
			}
			out := make([]server.Preview, 0, len(done.Deleted))
			for _, d := range done.Deleted {
				out = append(out, server.Preview{Repository: d.Repository, Tag: d.Tag, Digest: d.Digest, Reason: d.Reason, Pushed: d.Pushed})
			}
			return out, nil
		},
		Repositories: reg.Repositories,
		Repository: func(ctx context.Context, q server.RepositoryQuery) (server.Repository, error) {
			v, err := reg.Repository(ctx, q.Name, q.TagsAfter, q.ManifestsAfter, q.Limit)
			return server.Repository{RefPrefix: v.RefPrefix, Tags: v.Tags, Manifests: v.Manifests,
				MoreTags: v.MoreTags, MoreManifests: v.MoreManifests, Usage: v.Usage}, err
		},
	}
}

// cacheCollect evicts what the build cache's size budget leaves no room
// for, before each sweep, which then frees it.
func cacheCollect(cache *buildcache.Cache) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := cache.Evict(ctx)
		return err
	}
}
