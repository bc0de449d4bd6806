package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
)

// gcCommand runs one garbage-collection sweep and prints its report, or,
// as "gc explain KEY", says why a blob is kept or not.
func gcCommand(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "explain" {
		return gcExplain(ctx, e, args[1:])
	}
	fs := e.newFlags("gc")
	dryRun := fs.Bool("dry-run", false, "change nothing; report what a sweep would do")
	grace := fs.Duration("grace", gc.DefaultGrace, "how long a newly unreferenced blob waits before a later sweep may delete it")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: stead gc [-dry-run] [-grace D]\n       stead gc explain KEY")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	st, err := e.open(ctx, stead.WithGCGrace(*grace))
	if err != nil {
		return err
	}
	defer st.Close()
	opts := gc.SweepOptions{DryRun: *dryRun}
	if bar := progress(e.stderr); bar != nil {
		opts.Progress = func(r gc.Report) {
			bar.Describe(fmt.Sprintf("reaped %d, taken %d, deleted %d, rescued %d, staged %d", r.Reaped, r.Taken, r.Deleted, r.Rescued, r.Staged))
			_ = bar.Set64(r.Taken)
		}
		defer func() { _ = bar.Finish(); fmt.Fprintln(e.stderr) }()
	}
	rep, err := st.GC.Sweep(ctx, opts)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, rep)
	return nil
}

// progress returns a spinner on w when w is a terminal, else nil.
func progress(w io.Writer) *progressbar.ProgressBar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100*time.Millisecond))
}

func gcExplain(ctx context.Context, e *env, args []string) error {
	fs := e.newFlags("gc explain")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: stead gc explain KEY", errUsage)
	}
	key, err := blob.ParseKey(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	st, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	x, err := st.GC.Explain(ctx, key)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "key\t%s\n", key)
	if x.Stored {
		fmt.Fprintf(w, "stored\t%d bytes\n", x.Size)
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
	for _, s := range x.Sources {
		fmt.Fprintf(w, "referenced by\t%s\n", s)
	}
	if x.Staged {
		fmt.Fprintf(w, "window\tdeletable from %s\n", x.VisibleAfter.UTC().Format(time.RFC3339Nano))
	}
	fmt.Fprintf(w, "verdict\t%s\n", x.Verdict())
	return w.Flush()
}

// pinsCommand lists pins and the delete window.
func pinsCommand(ctx context.Context, e *env, args []string) error {
	fs := e.newFlags("pins")
	all := fs.Bool("all", false, "list expired pins too")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	st, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tOWNER\tEXPIRES")
	err = st.GC.Pins(ctx, func(p gc.PinInfo) bool {
		if *all || p.Expiry.After(now) {
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
