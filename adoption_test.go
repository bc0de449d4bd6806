package stead_test

import (
	"os"
	"strings"
	"testing"
)

// TestAdoptionFiles checks the files a team adopting stead reads first: the
// Apache License 2.0 in full, and a changelog in Keep a Changelog's form
// with a section for what is not released yet.
func TestAdoptionFiles(t *testing.T) {
	t.Parallel()
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Apache License\n                           Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "END OF TERMS AND CONDITIONS"} {
		if !strings.Contains(string(license), want) {
			t.Errorf("LICENSE lacks %q: not the Apache License 2.0's text", want)
		}
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Changelog\n", "keepachangelog.com", "\n## [Unreleased]\n"} {
		if !strings.Contains(string(changelog), want) {
			t.Errorf("CHANGELOG.md lacks %q", want)
		}
	}
}
