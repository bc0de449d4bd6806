package wire

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/steadkit/stead/steaderr"
)

// TestCodesRoundTrip: codes are unique, every code's answer maps back to
// the error it stands for (or a StatusError), every sentinel maps to its
// own code, a 412 without a known code is a conflict and a proxy's 503 is
// unavailable.
func TestCodesRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i, c := range codes {
		if seen[c.code] {
			t.Errorf("code %q is used twice", c.code)
		}
		seen[c.code] = true
		if got := Status(c.code); got != c.status {
			t.Errorf("Status(%q) = %d, want %d", c.code, got, c.status)
		}
		err := Err(c.status, Error{Error: "msg", Code: c.code})
		var se *StatusError
		switch {
		case c.err != nil && !errors.Is(err, c.err):
			t.Errorf("Err(%d, %q) = %v, not wrapping %v", c.status, c.code, err, c.err)
		case c.err == nil && (!errors.As(err, &se) || se.Code != c.code || se.Status != c.status):
			t.Errorf("Err(%d, %q) = %v, want a StatusError", c.status, c.code, err)
		}
		if i >= sentinelRows {
			continue
		}
		status, code, sentinel := StatusOf(fmt.Errorf("context: %w: detail", c.err))
		if sentinel != c.err || code != c.code || status != c.status {
			t.Errorf("StatusOf(%v) = %d %q %v", c.err, status, code, sentinel)
		}
		if !IsSentinel(c.err) {
			t.Errorf("IsSentinel(%v) = false", c.err)
		}
	}
	for _, sentinel := range []error{steaderr.ErrNotFound, steaderr.ErrConflict, steaderr.ErrInvalidKey, steaderr.ErrInvalidName,
		steaderr.ErrInvalidArgument, steaderr.ErrDigestMismatch, steaderr.ErrTooLarge, steaderr.ErrProtected, steaderr.ErrUnknownGroup,
		steaderr.ErrWrongGroup, steaderr.ErrLeased, steaderr.ErrLost, steaderr.ErrClosed, steaderr.ErrSchema, steaderr.ErrUnavailable, steaderr.ErrCorrupt} {
		if _, _, got := StatusOf(sentinel); got != sentinel {
			t.Errorf("StatusOf(%v) = %v: a sentinel without its own code", sentinel, got)
		}
	}
	if err := Err(http.StatusPreconditionFailed, Error{Error: "lost", Code: "whatever"}); !errors.Is(err, steaderr.ErrConflict) {
		t.Errorf("412 = %v, want a conflict", err)
	}
	if err := Err(http.StatusServiceUnavailable, Error{Error: "Service Unavailable"}); !errors.Is(err, steaderr.ErrUnavailable) {
		t.Errorf("a 503 without a code = %v, want ErrUnavailable", err)
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
