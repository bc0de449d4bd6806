//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLockExecFails: a command stead lock cannot run exits as a shell's
// would: 127 not found, 126 not executable.
func TestLockExecFails(t *testing.T) {
	t.Parallel()
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	url := storeURL(t)
	for _, tc := range []struct {
		argv []string
		want int
	}{{[]string{filepath.Join(t.TempDir(), "missing")}, 127}, {[]string{"no-such-command-stead"}, 127}, {[]string{plain}, 126}} {
		code, stdout, stderr := runIn(t.Context(), append([]string{"--db", url, "lock", "job", "--"}, tc.argv...)...)
		if code != tc.want || stdout != "" || !strings.Contains(stderr, tc.argv[0]) {
			t.Errorf("stead lock job -- %s = exit %d, stdout %q, stderr %q; want exit %d naming the command", tc.argv[0], code, stdout, stderr, tc.want)
		}
	}
	// The lock was released: a second run takes it at once.
	if code, _, stderr := runIn(t.Context(), "--db", url, "lock", "--try", "job", "--", "true"); code != 0 {
		t.Errorf("stead lock --try after a failed exec = exit %d (stderr %q), want 0", code, stderr)
	}
}
