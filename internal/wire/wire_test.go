package wire

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/steadkit/stead/steaderr"
)

// TestSentinelsRoundTrip: every sentinel's code maps back to it, codes are
// unique, and a 412 without a known code is a conflict.
func TestSentinelsRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, s := range sentinels {
		if seen[s.code] {
			t.Errorf("code %q is used twice", s.code)
		}
		seen[s.code] = true
		status, code, sentinel := StatusOf(fmt.Errorf("context: %w: detail", s.err))
		if sentinel != s.err || code != s.code || status != s.status {
			t.Errorf("StatusOf(%v) = %d %q %v", s.err, status, code, sentinel)
		}
		if err := Err(status, Error{Error: "msg", Code: code}); !errors.Is(err, s.err) {
			t.Errorf("Err(%d, %q) = %v, not wrapping %v", status, code, err, s.err)
		}
	}
	if err := Err(http.StatusPreconditionFailed, Error{Error: "lost", Code: "whatever"}); !errors.Is(err, steaderr.ErrConflict) {
		t.Errorf("412 = %v, want a conflict", err)
	}
	var se *StatusError
	if err := Err(http.StatusTeapot, Error{Error: "tea", Code: "teapot"}); !errors.As(err, &se) || se.Code != "teapot" {
		t.Errorf("an unknown code = %v, want a StatusError", err)
	}
	if _, _, sentinel := StatusOf(errors.New("plain")); sentinel != nil {
		t.Errorf("a plain error maps to %v", sentinel)
	}
}

func TestParseETag(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int64{`"1"`: 1, ` "42" `: 42, `"9223372036854775807"`: 1<<63 - 1} {
		if got, err := ParseETag(v); err != nil || got != want {
			t.Errorf("ParseETag(%s) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{`W/"1"`, `1`, `"1", "2"`, `*`, `"0"`, `"-1"`, `"+1"`, `"01"`, `""`, `"9223372036854775808"`, `"1`, ``} {
		if _, err := ParseETag(v); !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("ParseETag(%s) = %v, want ErrInvalidArgument", v, err)
		}
	}
}
