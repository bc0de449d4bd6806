// Package validate holds the input rules shared by every capability.
package validate

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/steadkit/stead/steaderr"
)

// MaxNameLen is the longest name in bytes.
const MaxNameLen = 255

// Name checks a lock name, owner, group, tenant, record id or instance id:
// 1 to MaxNameLen bytes of valid UTF-8 holding no control characters.
// Errors wrap steaderr.ErrInvalidName and say which rule failed; what names
// the thing checked (e.g. "lock name").
func Name(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", steaderr.ErrInvalidName, what)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%w: %s is %d bytes, limit %d", steaderr.ErrInvalidName, what, len(s), MaxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %.40q is not valid UTF-8", steaderr.ErrInvalidName, what, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %.40q holds control character %U", steaderr.ErrInvalidName, what, s, r)
		}
	}
	return nil
}
