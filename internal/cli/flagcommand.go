package cli

import (
	"context"
	"errors"
	"flag"
	"strings"

	"github.com/spf13/cobra"
)

// flagCommand makes a command that parses its own arguments with the flag
// package (newFlags), as the gc, pins and scrub commands do: cobra passes
// every argument through, and a flag error is a usage error.
func flagCommand(name, summary string, run func(ctx context.Context, e *env, args []string) error) func(e *env) *cobra.Command {
	return func(e *env) *cobra.Command {
		return &cobra.Command{
			Use:                name,
			Short:              summary,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				err := run(cmd.Context(), e, args)
				switch {
				case errors.Is(err, flag.ErrHelp):
					return nil // the flag set printed the usage
				case err != nil && strings.HasPrefix(err.Error(), "flag provided but not defined"):
					return usageError("%v", err)
				}
				return err
			},
		}
	}
}

// newFlags returns a flagCommand's flag set, printing errors to e.stderr.
func (e *env) newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("stead "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}
