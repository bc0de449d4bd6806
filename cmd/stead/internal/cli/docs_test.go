package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/steadkit/stead/internal/testing/pgtest"
)

// The documents that show stead command lines, relative to the repository
// root: the README, the reference and the guides.
const (
	repoRoot = "../../../../"
	cliDoc   = "docs/reference/cli.md"
)

// doc returns the file at path, relative to the repository root.
func doc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(repoRoot + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docPaths returns the paths, relative to the repository root, of
// README.md, docs/reference/*.md and docs/guides/*.md.
func docPaths(t *testing.T) []string {
	t.Helper()
	paths := []string{"README.md"}
	for _, dir := range []string{"docs/reference", "docs/guides"} {
		matches, err := filepath.Glob(repoRoot + dir + "/*.md")
		if err != nil {
			t.Fatal(err)
		}
		if len(matches) == 0 {
			t.Fatalf("no documents in %s", dir)
		}
		for _, m := range matches {
			paths = append(paths, dir+"/"+filepath.Base(m))
		}
	}
	return paths
}

// section returns the lines of the section headed "## title" of text, the
// document at path.
func section(t *testing.T, path, text, title string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", path, title)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return strings.Split(rest, "\n")
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// substitution is a command substitution running stead: $(stead …).
	substitution = regexp.MustCompile(`\$\((stead [^)]*)\)`)
)

// invocations returns the stead command lines text shows: code spans and
// indented code lines that start with "stead " or "go run ./cmd/stead ",
// and the $(stead …) substitutions of code lines. Comments (" # …") are
// cut off.
func invocations(text string) []string {
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
			code, _, _ = strings.Cut(code, " #")
			add(strings.TrimSpace(code))
			for _, m := range substitution.FindAllStringSubmatch(code, -1) {
				add(m[1])
			}
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			add(m[1])
		}
	}
	return out
}

// tableColumn returns the code spans of the first column of the tables in
// the section headed "## title" of text, the document at path.
func tableColumn(t *testing.T, path, text, title string) []string {
	t.Helper()
	var out []string
	for _, line := range section(t, path, text, title) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.ReplaceAll(line[1:], `\|`, "¦"), "|")
		for _, m := range codeSpan.FindAllStringSubmatch(first, -1) {
			out = append(out, strings.ReplaceAll(m[1], "¦", "|"))
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s's section %q has no table", path, title)
	}
	return out
}

// resolve checks line, a stead command line as the documents write it
// (placeholders in capitals or shell variables, optional parts in
// brackets, alternatives split by |), against the commands: every word
// before the first argument names a command, unless the command has none,
// and every flag is one of that command's, spelled with two dashes (or
// one, for a one-letter shorthand). It returns the command named and the
// flags the line gives.
func resolve(root *cobra.Command, line string) (*cobra.Command, []*pflag.Flag, []string) {
	var problems []string
	var flags []*pflag.Flag
	cmd := root
	words := strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(line))
	args := false // an argument was seen: no more subcommands
	for i := 0; i < len(words); i++ {
		w := strings.TrimSuffix(words[i], "...")
		if w == "--" || strings.HasPrefix(w, ";") {
			break // the rest is another command's (stead lock NAME -- CMD; echo $?)
		}
		w, end := strings.CutSuffix(w, ";")
		for _, alt := range strings.Split(w, "|") {
			switch {
			case alt == "-" || alt == "" || strings.HasPrefix(alt, "$"):
				args = true // stdin, a shell variable
			case strings.HasPrefix(alt, "--"):
				name, _, hasValue := strings.Cut(alt[2:], "=")
				f := cmd.Flag(name)
				if f == nil {
					problems = append(problems, cmd.CommandPath()+" has no flag --"+name)
					continue
				}
				flags = append(flags, f)
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
				flags = append(flags, f)
				if f.Value.Type() != "bool" {
					i++
				}
			case !args && cmd.HasSubCommands() && strings.ToLower(alt) == alt:
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
		if end {
			break
		}
	}
	return cmd, flags, problems
}

// TestDocCommandLines checks the stead command lines of the README, the
// reference and the guides against the commands: each names commands and
// flags that exist. docs/reference/cli.md lists every command and every
// flag, and the exit codes it gives are the commands'.
func TestDocCommandLines(t *testing.T) {
	t.Parallel()
	root := newRoot(&env{stdout: io.Discard, stderr: io.Discard})
	root.InitDefaultHelpCmd()
	for _, path := range docPaths(t) {
		for _, line := range invocations(doc(t, path)) {
			if _, _, problems := resolve(root, line); len(problems) > 0 {
				t.Errorf("%s: stead %s: %s", path, line, strings.Join(problems, "; "))
			}
		}
	}
	if lines := invocations(doc(t, "README.md")); len(lines) < 10 {
		t.Errorf("found only %d stead command lines in the README: %q", len(lines), lines)
	}

	// The reference: the command table, the synopsis and serve's flags.
	text := doc(t, cliDoc)
	listed := map[string]bool{}
	documented := map[*pflag.Flag]bool{}
	check := func(line string) *cobra.Command {
		cmd, flags, problems := resolve(root, line)
		if len(problems) > 0 {
			t.Errorf("%s: stead %s: %s", cliDoc, line, strings.Join(problems, "; "))
		}
		for _, f := range flags {
			documented[f] = true
		}
		return cmd
	}
	for _, line := range tableColumn(t, cliDoc, text, "Commands") {
		listed[check(line).CommandPath()] = true
	}
	for _, line := range invocations(text) {
		check(line)
	}
	for _, flag := range tableColumn(t, cliDoc, text, "serve") {
		if cmd := check("serve " + flag); cmd.Name() != "serve" {
			t.Errorf("%s: serve's flag table names %q", cliDoc, flag)
		}
	}
	// A command is listed by a line naming it or, for one whose
	// subcommands are its use (stead records), one of them.
	var walk func(*cobra.Command) bool
	walk = func(c *cobra.Command) bool {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && f.Name != "help" && !documented[f] {
				t.Errorf("%s does not document %s --%s", cliDoc, c.CommandPath(), f.Name)
			}
		})
		any := listed[c.CommandPath()]
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			any = walk(sub) || any
		}
		if !any && c != root {
			t.Errorf("%s's command table does not list %s", cliDoc, c.CommandPath())
		}
		return any
	}
	walk(root)

	var paragraph []string
	for _, line := range section(t, cliDoc, text, "Errors and exit codes") {
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
		t.Errorf("%s's exit codes are %v, the commands' %v", cliDoc, codes, want)
	}
}

// TestResolve checks that the documents' check catches what it is for.
func TestResolve(t *testing.T) {
	t.Parallel()
	root := newRoot(&env{stdout: io.Discard, stderr: &bytes.Buffer{}})
	for _, tc := range []struct {
		line    string
		command string
		flags   []string
		bad     bool
	}{
		{"scrub [--from KEY]", "stead scrub", []string{"from"}, false},
		{"scrub [-from KEY]", "stead scrub", nil, true},
		{"get KEY [-o FILE]", "stead get", []string{"output"}, false},
		{"get $key", "stead get", nil, false},
		{"put FILE|-", "stead put", nil, false},
		{"put hello.txt", "stead put", nil, false},
		{"ref set tags/hello $key", "stead ref set", nil, false},
		{"ref sett tags/hello $key", "stead ref", nil, true},
		{"records claim ID --group G", "stead records claim", []string{"group"}, false},
		{"records claim ID --grop G", "stead records claim", nil, true},
		{"[--db URL] [--log-level LEVEL] COMMAND", "stead", []string{"db", "log-level"}, false},
		{"lock [--ttl 30s] [--owner X] [--try] NAME -- CMD...", "stead lock", []string{"ttl", "owner", "try"}, false},
		{"lock --try reindex -- true; echo $?", "stead lock", []string{"try"}, false},
		{"ls; stead scrubb", "stead ls", nil, false},
		{"--db mem:// gc --dry-run", "stead gc", []string{"db", "dry-run"}, false},
		{"serve --registry=false", "stead serve", []string{"registry"}, false},
		{"scrubb", "stead", nil, true},
	} {
		cmd, flags, problems := resolve(root, tc.line)
		var names []string
		for _, f := range flags {
			names = append(names, f.Name)
		}
		if cmd.CommandPath() != tc.command || (len(problems) > 0) != tc.bad || !slices.Equal(names, tc.flags) {
			t.Errorf("resolve(%q) = %s, %q, %q; want %s, %q, problems: %v", tc.line, cmd.CommandPath(), names, problems, tc.command, tc.flags, tc.bad)
		}
	}
}

// TestDocMigrateStatus runs the stead migrate status of the PostgreSQL
// section of docs/guides/operations.md on a new schema: it prints what the
// guide says.
func TestDocMigrateStatus(t *testing.T) {
	t.Parallel()
	const path = "docs/guides/operations.md"
	var want string
	for _, line := range section(t, path, doc(t, path), "PostgreSQL") {
		if cmd, comment, ok := strings.Cut(strings.TrimSpace(line), "#"); ok && strings.TrimSpace(cmd) == "stead migrate status" {
			want = strings.TrimSpace(comment)
		}
	}
	if want == "" {
		t.Fatalf("%s's PostgreSQL section shows no stead migrate status", path)
	}
	db := pgtest.New(t)
	code, stdout, stderr := run(t, t.Context(), "--db", db.StoreURL(), "migrate", "status")
	if code != 0 || strings.TrimSpace(stdout) != want {
		t.Errorf("stead migrate status on a new schema = %d, %q, %q; %s says %q", code, stdout, stderr, path, want)
	}
}
