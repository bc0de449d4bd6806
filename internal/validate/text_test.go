package validate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/steadkit/stead/steaderr"
)

func TestJSONText(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		`{"owner":"a"}`, `{"owner":"\u00e9"}`, `{"owner":"\ud83d\ude00"}`, `{"owner":"😀"}`, `{"a":"\\ud800"}`,
		`{"a":"x\\"}`, `{"a":"\u12"}`, `"\uD83D\uDE00"`,
	} {
		if err := JSONText([]byte(ok)); err != nil {
			t.Errorf("JSONText(%s) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{
		"{\"owner\":\"\xff\"}", `{"owner":"\ud800"}`, `{"owner":"\udfff"}`, `{"owner":"\ud800x"}`, `{"owner":"\ud800\u0041"}`,
		`{"owner":"\uDBFF"}`, `{"owner":"a\ud800"}`, `{"owner":"\ud800\ud800"}`, `["\\\ud800"]`,
	} {
		if err := JSONText([]byte(bad)); !errors.Is(err, steaderr.ErrInvalidName) {
			t.Errorf("JSONText(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

// FuzzJSONText: whatever JSONText accepts, encoding/json decodes without
// replacing a character, so two accepted strings never decode to one.
func FuzzJSONText(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud800"`, `"\ud83d\ude00"`, "\"\xff\"", `"\\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s string
		if JSONText(b) != nil || json.Unmarshal(b, &s) != nil {
			return
		}
		out, _ := json.Marshal(s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil || back != s {
			t.Fatalf("%q decoded to %q, which does not round-trip", b, s)
		}
		for _, r := range s {
			if r == '\uFFFD' && !containsReplacement(b) {
				t.Fatalf("%q accepted but decoded with U+FFFD: %q", b, s)
			}
		}
	})
}

// containsReplacement reports whether b spells U+FFFD itself, raw or
// escaped.
func containsReplacement(b []byte) bool {
	s := string(b)
	return strings.Contains(s, "\uFFFD") || strings.Contains(strings.ToLower(s), `\ufffd`)
}
