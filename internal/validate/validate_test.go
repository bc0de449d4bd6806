package validate

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/steadkit/stead/steaderr"
)

func TestName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"reindex", true},
		{"tenant/42:job-7 ünïcode ✓", true},
		{"'; DROP TABLE locks; --", true},
		{`quo"te`, true},
		{strings.Repeat("a", MaxNameLen), true},
		{"", false},
		{strings.Repeat("a", MaxNameLen+1), false},
		{"nul\x00byte", false},
		{"new\nline", false},
		{"tab\t", false},
		{"del\x7f", false},
		{"c1\u0085control", false},
		{"bad\xffutf8", false},
	}
	for _, tt := range tests {
		err := Name("lock name", tt.in)
		if tt.ok != (err == nil) {
			t.Errorf("Name(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
		if err != nil && !errors.Is(err, steaderr.ErrInvalidName) {
			t.Errorf("Name(%q) = %v, does not wrap ErrInvalidName", tt.in, err)
		}
	}
}

func FuzzName(f *testing.F) {
	f.Add("reindex")
	f.Add("")
	f.Add("a\x00b")
	f.Fuzz(func(t *testing.T, s string) {
		err := Name("name", s)
		if err != nil {
			if !errors.Is(err, steaderr.ErrInvalidName) {
				t.Fatalf("Name(%q) = %v, does not wrap ErrInvalidName", s, err)
			}
			return
		}
		if s == "" || len(s) > MaxNameLen || !utf8.ValidString(s) || strings.ContainsAny(s, "\x00\n\r\t") {
			t.Fatalf("Name(%q) accepted a name it must refuse", s)
		}
	})
}
