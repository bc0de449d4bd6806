package blob

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/steadkit/stead/steaderr"
)

const (
	keyPrefix = "sha256:"
	// KeyLen is the length of a key's text form: "sha256:" and 64 hex digits.
	KeyLen = len(keyPrefix) + 2*sha256.Size
)

// Key is the content address of a blob: the SHA-256 digest of its value,
// written "sha256:" followed by 64 lowercase hex digits (the OCI digest
// form). The zero Key is no blob's key; as a List cursor it means "from the
// start".
type Key struct {
	digest [sha256.Size]byte
	valid  bool
}

// KeyOf returns the key of value.
func KeyOf(value []byte) Key {
	return Key{digest: sha256.Sum256(value), valid: true}
}

// ParseKey parses the text form of a key. Anything but "sha256:" followed by
// exactly 64 lowercase hex digits is an error wrapping ErrInvalidKey.
func ParseKey(s string) (Key, error) {
	if len(s) != KeyLen || s[:len(keyPrefix)] != keyPrefix {
		return Key{}, fmt.Errorf("%w: %.80q: want %s and 64 lowercase hex digits", steaderr.ErrInvalidKey, s, keyPrefix)
	}
	k := Key{valid: true}
	for i := 0; i < sha256.Size; i++ {
		hi, ok1 := unhex(s[len(keyPrefix)+2*i])
		lo, ok2 := unhex(s[len(keyPrefix)+2*i+1])
		if !ok1 || !ok2 {
			return Key{}, fmt.Errorf("%w: %.80q: want 64 lowercase hex digits after %s", steaderr.ErrInvalidKey, s, keyPrefix)
		}
		k.digest[i] = hi<<4 | lo
	}
	return k, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// String returns the text form, "sha256:" and 64 lowercase hex digits; the
// zero Key prints as "".
func (k Key) String() string {
	var buf [KeyLen]byte
	b, _ := k.AppendText(buf[:0])
	return string(b)
}

// AppendText implements encoding.TextAppender: b with the text form
// appended (nothing for the zero Key).
func (k Key) AppendText(b []byte) ([]byte, error) {
	if k.IsZero() {
		return b, nil
	}
	b = append(b, keyPrefix...)
	return hex.AppendEncode(b, k.digest[:]), nil
}

// Digest returns the raw SHA-256 digest.
func (k Key) Digest() [sha256.Size]byte { return k.digest }

// Compare returns -1, 0 or +1 as k sorts before, equal to or after o; key
// order is the order of the text forms.
func (k Key) Compare(o Key) int {
	if c := bytes.Compare(k.digest[:], o.digest[:]); c != 0 || k.valid == o.valid {
		return c
	}
	if k.valid {
		return 1
	}
	return -1
}

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return !k.valid }

// MarshalText implements encoding.TextMarshaler.
func (k Key) MarshalText() ([]byte, error) { return k.AppendText(make([]byte, 0, KeyLen)) }

// UnmarshalText implements encoding.TextUnmarshaler with ParseKey's rules.
func (k *Key) UnmarshalText(text []byte) error {
	parsed, err := ParseKey(string(text))
	if err != nil {
		return err
	}
	*k = parsed
	return nil
}
