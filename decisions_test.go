package stead_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDecisionIndex checks that docs/decisions/README.md links every
// decision record, and only records that exist.
func TestDecisionIndex(t *testing.T) {
	t.Parallel()
	index, err := os.ReadFile(filepath.Join("docs", "decisions", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, m := range regexp.MustCompile(`\]\(([0-9]{4}-[a-z0-9-]+\.md)\)`).FindAllStringSubmatch(string(index), -1) {
		linked[m[1]] = true
	}
	records, err := filepath.Glob(filepath.Join("docs", "decisions", "[0-9][0-9][0-9][0-9]-*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(records) == 0 {
		t.Fatal("no decision records found")
	}
	for _, r := range records {
		name := filepath.Base(r)
		if !linked[name] {
			t.Errorf("docs/decisions/README.md does not list %s", name)
		}
		delete(linked, name)
	}
	for name := range linked {
		t.Errorf("docs/decisions/README.md links %s, which does not exist", name)
	}
}
