package cli

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/steadkit/stead/internal/testing/pgtest"
)

// readme returns the repository's README.md.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the lines of the README section headed "## title".
func section(t *testing.T, text, title string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README has no section %q", title)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return strings.Split(rest, "\n")
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// invocations returns the stead command lines the README shows: code
// spans and indented code lines that start with "stead " or
// "go run ./cmd/stead ", and the code spans of the command table of
// section "The command line", which leave out the "stead ". Comments (" #
// …") are cut off.
func invocations(t *testing.T, text string) []string {
	t.Helper()
	var out []string
	add := func(s string) {
		s, _, _ = strings.Cut(s, " #")
		for _, prefix := range []string{"go run ./cmd/stead ", "stead "} {
			if rest, ok := strings.CutPrefix(s, prefix); ok {
				out = append(out, strings.TrimSpace(rest))
				return
			}
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if code, ok := strings.CutPrefix(line, "    "); ok {
			add(strings.TrimSpace(code))
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
	}
	for _, cmd := range tableCommands(t, text) {
		out = append(out, cmd)
	}
	return out
}

// tableCommands returns the code spans of the first column of the command
// table in section "The command line".
func tableCommands(t *testing.T, text string) []string {
	t.Helper()
	var out []string
	for _, line := range section(t, text, "The command line") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.ReplaceAll(line[1:], `\|`, "¦"), "|")
		for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
			out = append(out, strings.ReplaceAll(m[1], "¦", "|"))
		}
	}
	if len(out) == 0 {
		t.Fatal("README's command line section has no command table")
	}
	return out
}

// resolve checks line, a stead command line as the README writes it
// (placeholders in capitals, optional parts in brackets, alternatives
// split by |), against the commands: every word before the first argument
// names a command, and every flag is one of that command's, spelled with
// two dashes (or one, for a one-letter shorthand). It returns the command
// named.
func resolve(root *cobra.Command, line string) (*cobra.Command, []string) {
	var problems []string
	cmd := root
	words := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(line))
	args := false // an argument was seen: no more subcommands
	for i := 0; i < len(words); i++ {
		w := strings.TrimSuffix(words[i], "...")
		if w == "--" {
			break // the rest is another command's (stead lock NAME -- CMD)
		}
		for _, alt := range strings.Split(w, "|") {
			switch {
			case alt == "-" || alt == "":
				args = true // stdin
			case strings.HasPrefix(alt, "--"):
				name, _, hasValue := strings.Cut(alt[2:], "=")
				f := cmd.Flag(name)
				if f == nil {
					problems = append(problems, cmd.CommandPath()+" has no flag --"+name)
					continue
				}
				if f.Value.Type() != "bool" && !hasValue {
					i++ // its value
				}
			case strings.HasPrefix(alt, "-"):
				var f *pflag.Flag
				if len(alt) == 2 {
					f = cmd.Flags().ShorthandLookup(alt[1:])
				}
				if f == nil {
					problems = append(problems, cmd.CommandPath()+": "+alt+" is not a flag (long flags take two dashes)")
					continue
				}
				if f.Value.Type() != "bool" {
					i++
				}
			case !args && strings.ToLower(alt) == alt:
				sub, _, err := cmd.Find([]string{alt})
				if err != nil || sub == cmd {
					problems = append(problems, cmd.CommandPath()+" has no command "+strconv.Quote(alt))
					continue
				}
				cmd = sub
			default:
				args = true
			}
		}
	}
	return cmd, problems
}

// TestREADMECommandLine checks the README's stead command lines against the
// commands: each names commands and flags that exist, the command table
// lists every command, and the exit codes it gives are the commands'.
func TestREADMECommandLine(t *testing.T) {
	t.Parallel()
	text := readme(t)
	root := newRoot(&env{stdout: io.Discard, stderr: io.Discard})
	root.InitDefaultHelpCmd()
	lines := invocations(t, text)
	if len(lines) < 10 {
		t.Fatalf("found only %d stead command lines in the README: %q", len(lines), lines)
	}
	for _, line := range lines {
		if _, problems := resolve(root, line); len(problems) > 0 {
			t.Errorf("README: stead %s: %s", line, strings.Join(problems, "; "))
		}
	}

	listed := map[string]bool{}
	for _, line := range tableCommands(t, text) {
		cmd, _ := resolve(root, line)
		listed[cmd.CommandPath()] = true
	}
	// A command is listed by a line naming it or, for one whose
	// subcommands are its use (stead records), one of them.
	var walk func(*cobra.Command) bool
	walk = func(c *cobra.Command) bool {
		any := listed[c.CommandPath()]
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			any = walk(sub) || any
		}
		if !any && c != root {
			t.Errorf("README's command table does not list %s", c.CommandPath())
		}
		return any
	}
	walk(root)

	var paragraph []string
	for _, line := range section(t, text, "The command line") {
		if strings.Contains(line, "Exit codes:") || len(paragraph) > 0 && line != "" {
			paragraph = append(paragraph, line)
		} else if len(paragraph) > 0 {
			break
		}
	}
	_, sentence, _ := strings.Cut(strings.Join(paragraph, " "), "Exit codes:")
	var codes []int
	for _, m := range regexp.MustCompile(`(?:^|[ ,(])(\d+) `).FindAllStringSubmatch(sentence, -1) {
		n, _ := strconv.Atoi(m[1])
		codes = append(codes, n)
	}
	slices.Sort(codes)
	codes = slices.Compact(codes)
	if want := []int{0, exitFailure, exitUsage, exitNotFound, exitWarn, exitCorrupt, exitBusy, exitLost}; !slices.Equal(codes, want) {
		t.Errorf("README's exit codes are %v, the commands' %v", codes, want)
	}
}

// TestResolve checks that the README check catches what it is for.
func TestResolve(t *testing.T) {
	t.Parallel()
	root := newRoot(&env{stdout: io.Discard, stderr: &bytes.Buffer{}})
	for _, tc := range []struct {
		line    string
		command string
		bad     bool
	}{
		{"scrub [--from KEY]", "stead scrub", false},
		{"scrub [-from KEY]", "stead scrub", true},
		{"get KEY [-o FILE]", "stead get", false},
		{"put FILE|-", "stead put", false},
		{"records claim ID --group G", "stead records claim", false},
		{"records claim ID --grop G", "stead records claim", true},
		{"[--db URL] [--log-level LEVEL] COMMAND", "stead", false},
		{"lock [--ttl 30s] [--owner X] [--try] NAME -- CMD...", "stead lock", false},
		{"--db mem:// gc --dry-run", "stead gc", false},
		{"scrubb", "stead", true},
	} {
		cmd, problems := resolve(root, tc.line)
		if cmd.CommandPath() != tc.command || (len(problems) > 0) != tc.bad {
			t.Errorf("resolve(%q) = %s, %q; want %s, problems: %v", tc.line, cmd.CommandPath(), problems, tc.command, tc.bad)
		}
	}
}

// TestREADMEMigrateStatus runs the README's stead migrate status, in its
// PostgreSQL section, on a new schema: it prints what the README says.
func TestREADMEMigrateStatus(t *testing.T) {
	t.Parallel()
	var want string
	for _, line := range section(t, readme(t), "PostgreSQL") {
		if cmd, comment, ok := strings.Cut(strings.TrimSpace(line), "#"); ok && strings.TrimSpace(cmd) == "stead migrate status" {
			want = strings.TrimSpace(comment)
		}
	}
	if want == "" {
		t.Fatal("README's PostgreSQL section shows no stead migrate status")
	}
	db := pgtest.New(t)
	code, stdout, stderr := run(t, t.Context(), "--db", db.StoreURL(), "migrate", "status")
	if code != 0 || strings.TrimSpace(stdout) != want {
		t.Errorf("stead migrate status on a new schema = %d, %q, %q; the README says %q", code, stdout, stderr, want)
	}
}
