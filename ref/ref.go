// Package ref holds the portable ref layer: named, versioned pointers to
// blobs that keep them alive, with an optional expiry and a small
// annotation, over a Backend's mechanics, and the rules for names.
//
// A ref is the way to keep a blob beyond its put's pin without a table of
// one's own: a tag naming a manifest, a cache entry naming its value.
// While a ref is live (it has no expiry, or its expiry is still ahead) no
// garbage-collection sweep and no Blobs.Delete removes its key; setting a
// ref to a stored key protects it from the moment Set returns.
//
// A weak ref names its key without keeping it: a membership, such as a
// registry's link of a blob to a repository. Liveness ignores it, and the
// sweep or Delete that removes its key removes it too, so a weak ref always
// names a stored blob, and one whose key was collected reads as absent
// (steaderr.ErrNotFound), as if deleted (docs/decisions/0031-weak-refs.md).
package ref

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

const (
	// MaxNameLen is the longest ref name, in bytes.
	MaxNameLen = 1024
	// MaxAnnotation is the largest annotation a ref carries, in bytes.
	MaxAnnotation = 4096
)

// Ref is one ref.
type Ref struct {
	// Name is the ref's name.
	Name string
	// Key is the blob the ref points to and, unless Weak, keeps alive.
	Key blob.Key
	// Weak reports a ref that names Key without keeping it: it goes with
	// its key when a sweep or Delete removes the key.
	Weak bool
	// Version changes with every Set: it is larger than every version the
	// store handed out before (across all names, so a ref deleted and set
	// again never reuses one). Touch keeps it.
	Version int64
	// Annotation is what the setter attached: a media type, a size,
	// whatever a reader needs without reading the blob. nil when none.
	Annotation []byte
	// Expiry is when the ref stops protecting its key (a weak one: naming
	// it) and reads as absent,
	// on the engine's clock; zero when it never expires.
	Expiry time.Time
	// Created reports, on the ref Set returns, that the Set created the
	// name: no live ref had it (an expired one counts as none). It is
	// false on a ref any other call returns.
	Created bool
}

// Live reports whether r is live at now: it has no expiry, or now is
// before it (a ref is expired at its expiry instant).
func (r Ref) Live(now time.Time) bool { return r.Expiry.IsZero() || now.Before(r.Expiry) }

// CheckName checks a ref name: 1 to MaxNameLen bytes of valid UTF-8 with
// no control characters, made of slash-separated segments none of which is
// empty, "." or "..", so that a name survives a URL path unchanged. Errors
// wrap steaderr.ErrInvalidName.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty ref name", steaderr.ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: ref name is %d bytes, limit %d", steaderr.ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: ref name %.40q is not valid UTF-8", steaderr.ErrInvalidName, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: ref name %.40q holds control character %U", steaderr.ErrInvalidName, name, r)
		}
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: ref name %.40q: its slash-separated segments must not be empty, \".\" or \"..\"", steaderr.ErrInvalidName, name)
		}
	}
	return nil
}

// CheckPrefix checks a listing prefix: "" (every ref) or at most
// MaxNameLen bytes of valid UTF-8 with no control characters (a prefix may
// end in the middle of a segment, or with a slash).
func CheckPrefix(prefix string) error {
	if len(prefix) > MaxNameLen || !utf8.ValidString(prefix) || strings.ContainsFunc(prefix, unicode.IsControl) {
		return fmt.Errorf("%w: ref prefix %.40q: want at most %d bytes of UTF-8 without control characters", steaderr.ErrInvalidName, prefix, MaxNameLen)
	}
	return nil
}

// CheckTTL checks a TTL a caller gave explicitly (an HTTP body's "ttl", a
// --ttl flag): it must be at least a microsecond. Leaving the TTL out is
// how a ref is made that never expires; an explicit 0 is not that, and
// wraps steaderr.ErrInvalidArgument like a negative TTL.
func CheckTTL(ttl time.Duration) error {
	_, err := checkTTL(ttl, false)
	return err
}

// checkTTL checks an expiring ref's TTL, in whole microseconds; 0 means no
// expiry when allowZero.
func checkTTL(ttl time.Duration, allowZero bool) (time.Duration, error) {
	t := ttl.Truncate(time.Microsecond)
	if t < 0 || t == 0 && (ttl != 0 || !allowZero) {
		return 0, fmt.Errorf("%w: ref TTL %v: want at least 1µs", steaderr.ErrInvalidArgument, ttl)
	}
	return t, nil
}

// PrefixEnd returns the least name that sorts after every name starting
// with prefix, bytewise (the code point order of UTF-8), for engines that
// list a prefix as a key range; ok is false when there is none (every
// name from prefix on starts with it) or prefix is empty.
func PrefixEnd(prefix string) (end string, ok bool) {
	for prefix != "" {
		r, size := utf8.DecodeLastRuneInString(prefix)
		prefix = prefix[:len(prefix)-size]
		if r == utf8.MaxRune {
			continue
		}
		r++
		if r == 0xD800 { // surrogates are not encodable
			r = 0xE000
		}
		return prefix + string(r), true
	}
	return "", false
}
