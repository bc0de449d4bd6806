package validate

import (
	"fmt"
	"unicode/utf8"

	"github.com/steadkit/stead/steaderr"
)

// JSONText refuses a JSON document holding text that is not valid
// UTF-8, raw or escaped (a lone surrogate escape such as "\ud800", which
// encoding/json would quietly replace with U+FFFD, so that distinct names
// decode to one): an error wrapping steaderr.ErrInvalidName, since the
// strings of the API are names but for a few. It checks text only, not
// that b is well-formed JSON.
func JSONText(b []byte) error {
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
