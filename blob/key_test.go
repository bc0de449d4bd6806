package blob

import (
	"errors"
	"strings"
	"testing"

	"github.com/steadkit/stead/steaderr"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	valid := KeyOf([]byte("hello")).String()
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"valid", valid, true},
		{"empty", "", false},
		{"no prefix", valid[len(keyPrefix):], false},
		{"uppercase hex", keyPrefix + strings.ToUpper(valid[len(keyPrefix):]), false},
		{"uppercase prefix", "SHA256:" + valid[len(keyPrefix):], false},
		{"other algorithm", "sha512:" + valid[len(keyPrefix):], false},
		{"short", valid[:KeyLen-1], false},
		{"long", valid + "0", false},
		{"non-hex", valid[:KeyLen-1] + "g", false},
		{"trailing newline", valid[:KeyLen-1] + "\n", false},
		{"nul byte", valid[:KeyLen-1] + "\x00", false},
		{"all zero digest", keyPrefix + strings.Repeat("0", 64), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k, err := ParseKey(tt.in)
			if tt.ok {
				if err != nil {
					t.Fatalf("ParseKey(%q) = %v", tt.in, err)
				}
				if k.String() != tt.in {
					t.Fatalf("round trip: got %q, want %q", k.String(), tt.in)
				}
				return
			}
			if !errors.Is(err, steaderr.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error = %v, want ErrInvalidKey", tt.in, err)
			}
		})
	}
}

func TestKeyOf(t *testing.T) {
	t.Parallel()
	// The SHA-256 of "abc", from FIPS 180-2.
	const want = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	if got := KeyOf([]byte("abc")).String(); got != want {
		t.Fatalf("KeyOf(abc) = %s, want %s", got, want)
	}
	var zero Key
	if zero.String() != "" || !zero.IsZero() {
		t.Fatalf("zero key: String %q IsZero %v", zero.String(), zero.IsZero())
	}
}

func TestKeyText(t *testing.T) {
	t.Parallel()
	k := KeyOf([]byte("x"))
	text, err := k.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var back Key
	if err := back.UnmarshalText(text); err != nil || back != k {
		t.Fatalf("UnmarshalText = %v, %v; want %v", back, err, k)
	}
	if err := back.UnmarshalText([]byte("nope")); !errors.Is(err, steaderr.ErrInvalidKey) {
		t.Fatalf("UnmarshalText(nope) = %v, want ErrInvalidKey", err)
	}
	if back != k {
		t.Fatal("failed UnmarshalText changed the key")
	}
}

func FuzzParseKey(f *testing.F) {
	f.Add(KeyOf(nil).String())
	f.Add("sha256:")
	f.Add("")
	f.Add("sha256:" + strings.Repeat("g", 64))
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			if !errors.Is(err, steaderr.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error %v does not wrap ErrInvalidKey", s, err)
			}
			return
		}
		if k.String() != s {
			t.Fatalf("ParseKey(%q) round trips to %q", s, k.String())
		}
	})
}
