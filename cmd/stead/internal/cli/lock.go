package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/lock"
)

// Exit codes of stead lock, besides the command's own.
const (
	// exitBusy: -try found the lock held (EX_TEMPFAIL).
	exitBusy = 75
	// exitLost: the lock was lost before it was released; the command, if
	// still running, was killed.
	exitLost = 76
	// exitCannotRun and exitCannotFind: the command could not be started,
	// as a shell reports it.
	exitCannotRun  = 126
	exitCannotFind = 127
)

func lockCommand(e *env) *cobra.Command {
	var (
		ttl   time.Duration
		owner string
		try   bool
	)
	cmd := &cobra.Command{
		Use:   "lock [--ttl 30s] [--owner OWNER] [--try] NAME -- CMD [ARG...]",
		Short: "Run a command while holding a named lock",
		Long: `Runs CMD while holding the lock NAME, renewed every third of the TTL, and
exits with CMD's status (128+N if signal N ended it; 127 if CMD is not
found, 126 if it cannot be run). CMD runs in a process group of its own: if
the lock is lost, the whole group is killed and stead lock exits 76; an
interrupt of stead lock is passed on to the group as SIGTERM. Without --try
it waits for the lock; with --try it exits 75 at once if the lock is held.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || cmd.ArgsLenAtDash() != 1 {
				return usageError("want NAME -- CMD [ARG...] (see stead lock --help)")
			}
			if err := checkTTLFlag(ttl); err != nil {
				return err
			}
			return lockRun(cmd.Context(), e, args[0], ownerOf(cmd, owner), ttl, try, args[1:])
		},
	}
	f := cmd.Flags()
	f.DurationVar(&ttl, "ttl", 30*time.Second, "lease length; the lock is lost if not renewed within it")
	f.StringVar(&owner, "owner", "", "the owner recorded with the grant (default HOST:PID, this process)")
	f.BoolVar(&try, "try", false, "do not wait: exit 75 if the lock is held")
	return cmd
}

func lockRun(ctx context.Context, e *env, name, owner string, ttl time.Duration, try bool, argv []string) error {
	st, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	held, ok, err := st.Locks.TryHold(ctx, name, owner, ttl)
	if err == nil && !ok {
		if try {
			return &exitError{exitBusy, fmt.Errorf("lock %q is held by another owner", name)}
		}
		fmt.Fprintf(e.stderr, "stead lock: waiting for %q, held by another owner\n", name)
		held, err = st.Locks.Hold(ctx, name, owner, ttl)
	}
	if errors.Is(err, stead.ErrInvalidName) || errors.Is(err, stead.ErrInvalidArgument) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	return runHeld(ctx, e, held, argv)
}

// ownerOf returns the --owner flag's value, or, when it was not given,
// defaultOwner: help shows the rule, never this process's own pid.
func ownerOf(cmd *cobra.Command, owner string) string {
	if cmd.Flags().Changed("owner") {
		return owner
	}
	return defaultOwner()
}

// defaultOwner names this process: host:pid.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "stead"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// startFailure is a shell's exit code for a command it could not start:
// 127 not found, 126 found but not executable.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitCannotFind
	}
	return exitCannotRun
}

// runHeld runs argv while held is held, then releases it.
func runHeld(ctx context.Context, e *env, held *lock.Held, argv []string) error {
	release := func() error { return held.Release(context.WithoutCancel(ctx)) }
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return &exitError{startFailure(err), errors.Join(err, release())}
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	interrupted := ctx.Done()
	for {
		select {
		case <-exited:
			if err := release(); err != nil {
				if errors.Is(err, stead.ErrLost) {
					return &exitError{exitLost, err}
				}
				return err
			}
			return &exitError{code: exitStatus(cmd.ProcessState)}
		case <-held.Lost():
			killProcessGroup(cmd)
			<-exited
			return &exitError{exitLost, fmt.Errorf("%w; killed %s", release(), argv[0])}
		case <-interrupted:
			interrupted = nil // pass it on once, then wait for the command
			terminateProcessGroup(cmd)
		}
	}
}

func locksCommand(e *env) *cobra.Command {
	var (
		after  string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "locks [PREFIX] [--after NAME] [--limit 100] [--json]",
		Short: "List the locks held now whose names start with PREFIX, in name order",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				grants, err := st.Locks.ListHeld(cmd.Context(), prefix, after, limit)
				if err != nil {
					return err
				}
				if asJSON {
					page := wire.HeldLocks{Locks: make([]wire.HeldLock, len(grants))}
					for i, g := range grants {
						page.Locks[i] = wire.HeldLock{Name: g.Name, Owner: g.Owner, Token: g.Token, Expiry: g.Expiry}
					}
					if len(grants) == limit {
						page.Next = grants[len(grants)-1].Name
					}
					return writeJSON(e, page)
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tOWNER\tTOKEN\tEXPIRY")
				for _, g := range grants {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", g.Name, g.Owner, g.Token, g.Expiry.UTC().Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "list the names after this one")
	cmd.Flags().IntVar(&limit, "limit", 100, fmt.Sprintf("list at most this many (1 to %d)", lock.MaxList))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
