// Package cli implements the stead command. Run is the whole program, with
// its arguments and output streams passed in, so it is tested in process.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"

	"github.com/steadkit/stead"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

var commands = map[string]command{
	"serve":   {"run the HTTP server", serve},
	"migrate": {"bring the database schema up to date", migrate},
	"lock":    {"run a command while holding a named lock", lockCommand},
	"gc":      {"collect unreferenced blobs; gc explain KEY says why one is kept", gcCommand},
	"pins":    {"list live pins and the delete window", pinsCommand},
	"scrub":   {"re-hash every stored blob and list the corrupt ones", scrub},
}

// env is what every command gets: the store URL and the output streams.
type env struct {
	db     string
	stdout io.Writer
	stderr io.Writer
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

// Run runs the stead command line args and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("stead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// Defaults from the environment are applied after parsing, so that
	// usage never prints a secret.
	fs.StringVar(&e.db, "db", "", "store URL (env STEAD_DB; default "+stead.DefaultURL+")")
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if e.db == "" {
		e.db = envOr("STEAD_DB", stead.DefaultURL)
	}
	if fs.NArg() == 0 || fs.Arg(0) == "help" {
		usage(fs)
		return 2
	}
	cmd, ok := commands[fs.Arg(0)]
	if !ok {
		fmt.Fprintf(stderr, "stead: unknown command %q\n", fs.Arg(0))
		usage(fs)
		return 2
	}
	if err := cmd.run(ctx, e, fs.Args()[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the flag set printed the usage
		}
		if exit, ok := err.(*exitError); ok {
			if exit.err != nil {
				fmt.Fprintf(stderr, "stead %s: %v\n", fs.Arg(0), exit.err)
			}
			return exit.code
		}
		fmt.Fprintf(stderr, "stead %s: %v\n", fs.Arg(0), err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(fs *flag.FlagSet) {
	out := fs.Output()
	fmt.Fprintln(out, "usage: stead [-db URL] COMMAND [flags]")
	fmt.Fprintln(out, "\ncommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(out, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(out, "\nglobal flags:")
	fs.PrintDefaults()
}

// redacted returns db with any password masked, for printing.
func redacted(db string) string {
	u, err := url.Parse(db)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newFlags returns a subcommand's flag set, printing errors to e.stderr.
func (e *env) newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("stead "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

func (e *env) open(ctx context.Context, opts ...stead.Option) (*stead.Store, error) {
	return stead.Open(ctx, e.db, opts...)
}

func migrate(ctx context.Context, e *env, args []string) error {
	if err := e.newFlags("migrate").Parse(args); err != nil {
		return err
	}
	st, err := e.open(ctx, stead.WithoutMigrate())
	if err != nil {
		return err
	}
	defer st.Close()
	before, _, err := st.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	after, _, err := st.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if before == after {
		fmt.Fprintf(e.stdout, "schema is current at version %d\n", after)
	} else {
		fmt.Fprintf(e.stdout, "migrated schema from version %d to %d\n", before, after)
	}
	return nil
}
