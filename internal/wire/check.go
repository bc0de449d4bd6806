package wire

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/steadkit/stead/steaderr"
)

// A Checker is a request body with ranges of its own: Check refuses a
// decoded value out of them with an error wrapping
// steaderr.ErrInvalidArgument. A server checks every body it decodes.
type Checker interface {
	Check() error
}

// CheckText refuses a JSON document holding text that is not valid
// UTF-8, raw or escaped (a lone surrogate escape such as "\ud800", which
// encoding/json would quietly replace with U+FFFD, so that distinct names
// decode to one): an error wrapping steaderr.ErrInvalidName, since the
// strings of the API are names but for a few. It checks text only, not
// that b is well-formed JSON.
func CheckText(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: request body: not valid UTF-8", steaderr.ErrInvalidName)
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(b):
			i++
			if b[i] != 'u' {
				continue
			}
			r, ok := hex4(b, i+1)
			if !ok {
				continue // malformed: the decoder refuses it
			}
			i += 4
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return fmt.Errorf("%w: request body: lone low surrogate \\u%04x in a string", steaderr.ErrInvalidName, r)
			case r >= 0xd800 && r <= 0xdbff:
				lo, ok := rune(0), i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u'
				if ok {
					lo, ok = hex4(b, i+3)
				}
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return fmt.Errorf("%w: request body: lone high surrogate \\u%04x in a string", steaderr.ErrInvalidName, r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits at b[i:], if there are four.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// MaxCount bounds every count and limit a request carries: the largest
// 32-bit integer, which every engine stores.
const MaxCount = math.MaxInt32

func checkCount(what string, n int) error {
	if n < 0 || n > MaxCount {
		return fmt.Errorf("%w: %s %d: want 0 to %d", steaderr.ErrInvalidArgument, what, n, MaxCount)
	}
	return nil
}

func checkNonNegative(what string, n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: %s %d: want 0 or more", steaderr.ErrInvalidArgument, what, n)
	}
	return nil
}

// Check implements Checker: the token is not negative.
func (r LockRequest) Check() error { return checkNonNegative("token", r.Token) }

// Check implements Checker: n is a count, the incarnation not negative.
func (r ClaimRequest) Check() error {
	if err := checkCount("n", r.N); err != nil {
		return err
	}
	return checkNonNegative("incarnation", r.Incarnation)
}

// Check implements Checker: the version and lease incarnation are not
// negative.
func (r Record) Check() error {
	if err := checkNonNegative("version", r.Version); err != nil {
		return err
	}
	return checkNonNegative("lease incarnation", r.Lease.Incarnation)
}

// Check implements Checker: the size is not negative (the store refuses
// 0 and sizes over its limit).
func (p Publish) Check() error { return checkNonNegative("size", p.Size) }

// Check implements Checker: the limit is a count.
func (s GCStep) Check() error { return checkCount("limit", s.Limit) }
