package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestFlagCommand runs a command that parses its own flags through cobra:
// its flags and arguments arrive whole, -h prints its usage and exits 0,
// and an unknown flag is a usage error.
func TestFlagCommand(t *testing.T) {
	commands["echo-flags"] = flagCommand("echo-flags", "test command", func(ctx context.Context, e *env, args []string) error {
		fs := e.newFlags("echo-flags")
		n := fs.Int("n", 1, "a number")
		if err := fs.Parse(args); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "n=%d args=%v\n", *n, fs.Args())
		return nil
	})
	t.Cleanup(func() { delete(commands, "echo-flags") })
	for _, tc := range []struct {
		args   []string
		code   int
		output string
	}{
		{[]string{"echo-flags", "-n", "3", "x"}, 0, "n=3 args=[x]"},
		{[]string{"echo-flags", "-h"}, 0, "-n int"},
		{[]string{"echo-flags", "-nope"}, 2, "flag provided but not defined"},
	} {
		code, stdout, stderr := run(t, context.Background(), tc.args...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.output) {
			t.Errorf("stead %v = %d %q; want %d containing %q", tc.args, code, stdout+stderr, tc.code, tc.output)
		}
	}
}
