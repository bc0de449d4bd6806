package ref_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"v1", true},
		{"tags/app/v1.2.3", true},
		{"ünï/cödé ✓", true},
		{`'; DROP TABLE refs; --`, true},
		{strings.Repeat("a", ref.MaxNameLen), true},
		{"", false},
		{strings.Repeat("a", ref.MaxNameLen+1), false},
		{"bad\xffutf8", false},
		{"new\nline", false},
		{"nul\x00", false},
		{"/leading", false},
		{"trailing/", false},
		{"two//slashes", false},
		{"dot/./seg", false},
		{"dot/../seg", false},
		{".", false},
		{"..", false},
		{"...", true},
		{".hidden/x", true},
	} {
		err := ref.CheckName(tc.name)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, steaderr.ErrInvalidName)) {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prefix, end string
		ok          bool
	}{
		{"", "", false},
		{"a", "b", true},
		{"tags/", "tags0", true},
		{"x\U0010FFFF", "y", true},
		{"\U0010FFFF", "", false},
		{"a\uD7FF", "a\uE000", true},
		{"é", "ê", true},
	} {
		end, ok := ref.PrefixEnd(tc.prefix)
		if end != tc.end || ok != tc.ok {
			t.Errorf("PrefixEnd(%q) = %q, %v; want %q, %v", tc.prefix, end, ok, tc.end, tc.ok)
		}
		if ok && (!utf8.ValidString(end) || end <= tc.prefix) {
			t.Errorf("PrefixEnd(%q) = %q: not valid UTF-8 after the prefix", tc.prefix, end)
		}
	}
}

func FuzzPrefixEnd(f *testing.F) {
	for _, s := range []string{"", "a", "tags/v", "\U0010FFFF", "\uD7FF"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, prefix, suffix string) {
		if !utf8.ValidString(prefix) || !utf8.ValidString(suffix) {
			return
		}
		end, ok := ref.PrefixEnd(prefix)
		name := prefix + suffix
		if ok && name >= end {
			t.Fatalf("%q starts with %q but sorts at or after its end %q", name, prefix, end)
		}
		if ok && !utf8.ValidString(end) {
			t.Fatalf("PrefixEnd(%q) = %q, not UTF-8", prefix, end)
		}
	})
}

func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a//b", "\x00", ".."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ref.CheckName(name)
		if err == nil && (!utf8.ValidString(name) || name == "" || len(name) > ref.MaxNameLen ||
			strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//")) {
			t.Fatalf("CheckName(%q) accepted a bad name", name)
		}
	})
}

// An explicit TTL is at least a microsecond: 0 is no TTL only as the
// field left out.
func TestCheckTTL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ttl time.Duration
		ok  bool
	}{
		{time.Microsecond, true},
		{time.Hour, true},
		{0, false},
		{time.Nanosecond, false},
		{-time.Second, false},
	} {
		if err := ref.CheckTTL(tc.ttl); (err == nil) != tc.ok || err != nil && !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("CheckTTL(%v) = %v, want ok=%v (else ErrInvalidArgument)", tc.ttl, err, tc.ok)
		}
	}
}
