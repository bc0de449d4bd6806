package cli

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

// runIn runs args in process with empty stdin and returns the exit code,
// stdout and stderr.
func runIn(ctx context.Context, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := execute(ctx, args, &env{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr})
	return code, stdout.String(), stderr.String()
}

func TestVersionText(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/steadkit/stead", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "CGO_ENABLED", Value: "0"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	want := "stead v0.4.0\nrevision 0123456789abcdef0123456789abcdef01234567 (modified)\ncommitted 2026-12-01T10:00:00Z\nbuilt with go1.26.0\n"
	if got := versionText(bi); got != want {
		t.Errorf("versionText with VCS settings =\n%s\nwant\n%s", got, want)
	}
	bare := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}
	if got, want := versionText(bare), "stead (devel)\nbuilt with go1.26.0\n"; got != want {
		t.Errorf("versionText without VCS settings = %q, want %q", got, want)
	}
	if got, want := versionText(nil), "stead (unknown version: built without module support)\n"; got != want {
		t.Errorf("versionText(nil) = %q, want %q", got, want)
	}
}

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	bi, _ := debug.ReadBuildInfo()
	want := versionText(bi)
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := runIn(t.Context(), args...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("stead %s = exit %d, stdout %q, stderr %q; want exit 0 and %q", args[0], code, stdout, stderr, want)
		}
	}
}
