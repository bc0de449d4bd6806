package cli

import (
	"strings"
	"testing"
)

func TestCompletion(t *testing.T) {
	t.Parallel()
	for shell, marker := range map[string]string{
		"bash":       "# bash completion V2 for stead",
		"zsh":        "#compdef stead",
		"fish":       "complete -c stead",
		"powershell": "Register-ArgumentCompleter",
	} {
		code, stdout, stderr := runIn(t.Context(), "completion", shell)
		if code != 0 || !strings.Contains(stdout, marker) || stderr != "" {
			t.Errorf("stead completion %s = exit %d, stderr %q, stdout without %q", shell, code, stderr, marker)
		}
	}
}
