package stead_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks the relative links of README.md and the documents
// under docs/: each names a file that exists and, with a #fragment into a
// Markdown file, one of its headings.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	docs := []string{"README.md"}
	err := filepath.WalkDir("docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, path := range docs {
		for _, m := range link.FindAllStringSubmatch(prose(t, path), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			if file == "" {
				file = path
			} else {
				file = filepath.Join(filepath.Dir(path), file)
			}
			checked++
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s links %s, which does not exist", path, target)
				continue
			}
			if fragment != "" && strings.HasSuffix(file, ".md") && !anchors(t, file)[fragment] {
				t.Errorf("%s links %s: %s has no heading #%s", path, target, file, fragment)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative links")
	}
}

// prose returns the Markdown file at path without its fenced code blocks.
func prose(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// anchors returns the fragments GitHub gives the headings of the Markdown
// file at path: lower case, spaces as hyphens, punctuation other than
// hyphens and underscores dropped.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, line := range strings.Split(prose(t, path), "\n") {
		heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}
