// Package cli implements the stead command on github.com/spf13/cobra (see
// docs/decisions/0018-cli-framework.md). Run is the whole program, with its
// arguments and output streams passed in, so it is tested in process.
//
// Exit codes: 0 success; 1 failure; 2 usage; 3 not found (a blob, a record
// or a group: get, stat, rm, records show, records ls, gc explain); 4
// doctor found warnings but no failure; 5 scrub found corrupt blobs; 75
// stead lock --try found the lock held; 76 stead lock lost the lock; 126
// and 127 stead lock could not run its command (not executable, not
// found); 128+N a command that failed once signal N cut it off (130 for
// SIGINT).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
)

// Exit codes shared by the commands.
const (
	exitFailure  = 1
	exitUsage    = 2
	exitNotFound = 3
	exitWarn     = 4
	// exitCorrupt: stead scrub found blobs whose content no longer
	// matches their key.
	exitCorrupt = 5
)

// commands makes the top-level commands, one file per group; add a
// command by adding its constructor here.
var commands = map[string]func(e *env) *cobra.Command{
	"serve":     serveCommand,
	"migrate":   migrateCommand,
	"doctor":    doctorCommand,
	"put":       putCommand,
	"get":       getCommand,
	"stat":      statCommand,
	"ls":        lsCommand,
	"rm":        rmCommand,
	"lock":      lockCommand,
	"locks":     locksCommand,
	"records":   recordsCommand,
	"bench":     benchCommand,
	"gc":        gcCommand,
	"pins":      pinsCommand,
	"ref":       refCommand,
	"scrub":     scrubCommand,
	"retention": retentionCommand,
	"usage":     usageCommand,
	"user":      userCommand,
	"version":   versionCommand,
}

// env is what every command gets: the store URL and the output streams.
type env struct {
	db       string
	logLevel string
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	// tty is where progress is drawn: stderr when it is a terminal, else
	// nil (no progress).
	tty io.Writer
	// stdoutTTY reports that stdout is a terminal: a command writing data
	// there draws no progress over it.
	stdoutTTY bool
	log       *slog.Logger
}

// errUsage marks an error the user fixes by reading the usage.
var errUsage = errors.New("usage")

// exitError makes Run exit with code, printing err unless it is nil.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return fmt.Sprintf("exit %d: %v", e.code, e.err) }
func (e *exitError) Unwrap() error { return e.err }

// usageError wraps err as a usage error.
func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// checkTTLFlag checks a --ttl given: stores keep TTLs to the microsecond,
// so one below that resolution is refused naming it (a store would
// otherwise see 0), as is one not positive.
func checkTTLFlag(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return usageError("--ttl %v: want a positive duration such as 30s", ttl)
	case ttl < time.Microsecond:
		return usageError("--ttl %v: below the store's resolution: TTLs are kept to the microsecond, so give at least 1µs", ttl)
	}
	return nil
}

// Signalled is the cause to cancel Run's context with when signal sig
// arrives: a command it cuts off exits 128+N, as a shell reports it.
func Signalled(sig os.Signal) error { return &signalled{sig} }

type signalled struct{ sig os.Signal }

func (s *signalled) Error() string { return "interrupted by " + s.sig.String() }

// signalExit returns the exit code for a command cut off by the signal
// ctx was cancelled with, if any.
func signalExit(ctx context.Context) (int, bool) {
	var s *signalled
	if !errors.As(context.Cause(ctx), &s) {
		return 0, false
	}
	n, ok := s.sig.(syscall.Signal)
	if !ok {
		return 0, false
	}
	return 128 + int(n), true
}

// Run runs the stead command line args and returns the exit code. Progress
// is drawn on stderr when it is a terminal. Cancel ctx with Signalled when
// a signal ends the program.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return execute(ctx, args, &env{stdin: os.Stdin, stdout: stdout, stderr: stderr, tty: terminal(stderr), stdoutTTY: terminal(stdout) != nil})
}

// execute runs args with e's streams.
func execute(ctx context.Context, args []string, e *env) int {
	stderr := e.stderr
	root := newRoot(e)
	root.SetArgs(args)
	root.SetContext(ctx)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	name := cmd.CommandPath()
	if strings.HasPrefix(err.Error(), "unknown command") {
		err = usageError("%v", err)
	}
	var exit *exitError
	if errors.As(err, &exit) {
		if exit.err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, oneLine(exit.err))
		}
		return exit.code
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, oneLine(err))
	if code, ok := signalExit(ctx); ok {
		return code
	}
	switch {
	case errors.Is(err, errUsage):
		return exitUsage
	case errors.Is(err, stead.ErrNotFound), errors.Is(err, stead.ErrUnknownGroup):
		return exitNotFound
	}
	return exitFailure
}

// newRoot returns the stead command, every command under it, writing to
// e's streams.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "stead",
		Short: "Durable state for Go services: blobs, locks and records",
		Long: `stead runs and administers a stead store: content-addressed blobs,
named locks with TTL leases and lease-fenced records, over SQLite (the
default, a file), PostgreSQL, memory, or a stead server (http://).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Lookup("config") != nil {
				if err := applySettings(cmd, os.Getenv); err != nil {
					return err
				}
			}
			return e.setup()
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(e.stderr)
			cmd.Usage()
			return &exitError{code: exitUsage}
		},
	}
	root.Version = buildVersion()
	root.SetVersionTemplate("{{.Version}}")
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	// Defaults from the environment are applied after parsing, so that
	// help never prints a secret.
	root.PersistentFlags().StringVar(&e.db, "db", "", "store URL (env STEAD_DB; default "+stead.DefaultURL+")")
	root.PersistentFlags().StringVar(&e.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError("%v (see %s --help)", err, cmd.CommandPath())
	})
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		root.AddCommand(commands[name](e))
	}
	return root
}

// oneLine returns err's text on one line, each of its lines once: a
// driver that tried twice (pgx, with and without TLS) may say the same
// thing twice.
func oneLine(err error) string {
	var words []string
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimPrefix(err.Error(), errUsage.Error()+": "), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		if line != "" && !seen[line] {
			seen[line] = true
			words = append(words, line)
		}
	}
	return strings.Join(words, " ")
}

// setup applies the environment's defaults and the log level.
func (e *env) setup() error {
	if e.db == "" {
		e.db = envOr("STEAD_DB", stead.DefaultURL)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(e.logLevel)); err != nil {
		return usageError("--log-level %q: want debug, info, warn or error", e.logLevel)
	}
	e.log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// redacted returns db fit for printing: scheme, user, host and path, with
// any password masked and the query (which may carry a password or a
// token) left out; anything that does not parse as a URL is not printed.
func redacted(db string) string {
	u, err := url.Parse(db)
	if err != nil || !strings.Contains(db, "://") {
		return "(unparsable URL)"
	}
	if u.User == nil && u.RawQuery == "" && u.Fragment == "" {
		return db // url.URL would print mem:// as mem:
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	return u.Redacted()
}

// defaultDir is the directory of stead.DefaultURL's database.
var defaultDir = filepath.Dir(strings.TrimPrefix(stead.DefaultURL, "sqlite://"))

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// open opens the store, migrating a database's schema first; a stead
// server's is left to the server, which migrates at its start (stead
// migrate alone asks it to).
func (e *env) open(ctx context.Context, opts ...stead.Option) (*stead.Store, error) {
	if e.db == stead.DefaultURL {
		// The default store's directory is the one SQLite directory the
		// command creates; any other must exist.
		if err := os.MkdirAll(defaultDir, 0o755); err != nil {
			return nil, fmt.Errorf("the default store's directory: %w", err)
		}
	}
	base := []stead.Option{stead.WithLogger(e.log)}
	if strings.HasPrefix(e.db, "http://") || strings.HasPrefix(e.db, "https://") {
		base = append(base, stead.WithoutMigrate())
	}
	st, err := stead.Open(ctx, e.db, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", redacted(e.db), err)
	}
	return st, nil
}

// withStore opens the store, runs f and closes it.
func (e *env) withStore(ctx context.Context, f func(st *stead.Store) error, opts ...stead.Option) error {
	st, err := e.open(ctx, opts...)
	if err != nil {
		return err
	}
	defer st.Close()
	return f(st)
}
