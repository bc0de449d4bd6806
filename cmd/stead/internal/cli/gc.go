package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
)

// gcCommand runs one garbage-collection sweep and prints its report;
// "gc explain KEY" says why a blob is kept or not.
func gcCommand(e *env) *cobra.Command {
	var dryRun, allUnreferenced bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Collect unreferenced blobs (also: explain KEY)",
		Long: `Run one garbage-collection sweep: reap expired pins, delete the window's
overdue candidates that nothing pins or references, and stage the blobs
now unreferenced. Another sweep running is reported, not an error. In a
store that never declared liveness (no source, ref or blob reference, ever) every
blob is garbage once its pin lapses: gc refuses to delete there unless given
--all-unreferenced (--dry-run shows what would go). See docs/guides/gc.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return e.withStore(ctx, func(st *stead.Store) error {
				opts := gc.SweepOptions{DryRun: dryRun, AllUnreferenced: allUnreferenced}
				show := newSweepProgress(ctx, e, st, dryRun)
				if show != nil {
					opts.Progress = show.update
				}
				rep, err := st.GC.Sweep(ctx, opts)
				show.done()
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, rep)
				return nil
			}, stead.WithGCGrace(grace))
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing; report what a sweep would do")
	cmd.Flags().BoolVar(&allUnreferenced, "all-unreferenced", false, "delete in a store that never declared liveness: every blob no pin protects")
	cmd.Flags().DurationVar(&grace, "grace", gc.DefaultGrace, "how long a newly unreferenced blob waits before a later sweep may delete it")
	cmd.AddCommand(&cobra.Command{
		Use:   "explain KEY",
		Short: "Say why a blob is kept or not: its pins, refs, parents, sources and window deadline (exit 3: not stored)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseKey(args[0])
			if err != nil {
				return err
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error { return gcExplain(cmd.Context(), e, st, key) })
		},
	})
	return cmd
}

// sweepProgress draws a sweep on the terminal: a bar over the window's
// candidates due for arbitration, when they could be counted beforehand
// (not in a dry run, which peeks at a page only), then a spinner while the
// rest of the sweep runs. A nil *sweepProgress draws nothing.
type sweepProgress struct {
	e     *env
	total int64 // candidates counted due before the sweep
	bar   *bar  // over total, until they are all taken
	spin  *bar
}

// newSweepProgress returns the display of a sweep, or nil when there is no
// terminal.
func newSweepProgress(ctx context.Context, e *env, st *stead.Store, dryRun bool) *sweepProgress {
	if e.tty == nil {
		return nil
	}
	p := &sweepProgress{e: e}
	if !dryRun {
		counting := e.spinner("gc: counting the candidates due")
		p.total = due(ctx, st)
		counting.done()
	}
	if p.total > 0 {
		p.bar = e.countBar("gc: reaping pins", p.total, "candidates")
	} else {
		p.spin = e.spinner("gc: reaping pins")
	}
	return p
}

// due counts the window's candidates deletable now (0 when the window
// cannot be read: the display then has no total).
func due(ctx context.Context, st *stead.Store) int64 {
	now := time.Now()
	var n int64
	err := st.GC.Window(ctx, func(c gc.Candidate) bool {
		if !c.VisibleAfter.After(now) {
			n++
		}
		return true
	})
	if err != nil {
		return 0
	}
	return n
}

// update draws the report so far.
func (p *sweepProgress) update(r gc.Report) {
	if p.bar != nil {
		p.bar.describe(fmt.Sprintf("gc: deleted %d, rescued %d", r.Deleted, r.Rescued))
		if r.Taken < p.total {
			p.bar.set(r.Taken)
			return
		}
		p.bar.done()
		p.bar = nil
	}
	what := fmt.Sprintf("gc: reaped %d pins, took %d candidates: deleted %d, rescued %d; staged %d", r.Reaped, r.Taken, r.Deleted, r.Rescued, r.Staged)
	if p.spin == nil {
		p.spin = p.e.spinner(what)
	}
	p.spin.describe(what)
}

// done erases the display.
func (p *sweepProgress) done() {
	if p != nil {
		p.bar.done()
		p.spin.done()
	}
}

func gcExplain(ctx context.Context, e *env, st *stead.Store, key blob.Key) error {
	x, err := st.GC.Explain(ctx, key)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "key\t%s\n", key)
	if x.Stored {
		fmt.Fprintf(w, "stored\t%d bytes\n", x.Size)
		if x.Object != "" {
			fmt.Fprintf(w, "object\t%s\n", x.Object)
		}
	} else {
		fmt.Fprintf(w, "stored\tno\n")
	}
	for _, p := range x.Pins {
		state := "live"
		if !p.Expiry.After(x.Now) {
			state = "expired"
		}
		fmt.Fprintf(w, "pin\t%s until %s (%s)\n", p.Owner, p.Expiry.UTC().Format(time.RFC3339Nano), state)
	}
	for _, r := range x.Refs {
		state := "live"
		if !r.Live(x.Now) {
			state = "expired"
		}
		if r.Weak {
			state += ", weak: keeps nothing"
		}
		fmt.Fprintf(w, "ref\t%s until %s (%s)\n", r.Name, expiryText(r.Expiry), state)
	}
	for _, p := range x.Parents {
		fmt.Fprintf(w, "parent\t%s\n", p)
	}
	for _, s := range x.Sources {
		fmt.Fprintf(w, "referenced by\t%s\n", s)
	}
	if x.Staged {
		fmt.Fprintf(w, "window\tdeletable from %s\n", x.VisibleAfter.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "verdict\t%s\n", x.Verdict())
	if err := w.Flush(); err != nil {
		return err
	}
	if !x.Stored {
		return fmt.Errorf("blob %s: %w", key, stead.ErrNotFound)
	}
	return nil
}

// pinsCommand lists pins and the delete window.
func pinsCommand(e *env) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "pins",
		Short: "List live pins and the delete window",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withStore(cmd.Context(), func(st *stead.Store) error { return listPins(cmd.Context(), e, st, all) })
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "list expired pins too")
	return cmd
}

func listPins(ctx context.Context, e *env, st *stead.Store, all bool) error {
	now := time.Now()
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tOWNER\tEXPIRES")
	err := st.GC.Pins(ctx, func(p gc.PinInfo) bool {
		if all || p.Expiry.After(now) {
			fmt.Fprintf(w, "%s\t%s\t%s\n", p.Key, p.Owner, p.Expiry.UTC().Format(time.RFC3339Nano))
		}
		return true
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "\nWINDOW\tDELETABLE FROM\t")
	err = st.GC.Window(ctx, func(c gc.Candidate) bool {
		fmt.Fprintf(w, "%s\t%s\t\n", c.Key, c.VisibleAfter.UTC().Format(time.RFC3339Nano))
		return true
	})
	if err != nil {
		return err
	}
	return w.Flush()
}
