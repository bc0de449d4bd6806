package sqlengine

import (
	"context"
	"errors"
	"testing"
)

func TestConditional(t *testing.T) {
	t.Parallel()
	refused := errors.New("refused")
	for _, tc := range []struct {
		name    string
		matches []bool // write's answers, in turn
		explain []error
		want    error
		writes  int
	}{
		{"matches", []bool{true}, nil, nil, 1},
		{"refused", []bool{false}, []error{refused}, refused, 1},
		{"raced, then matches", []bool{false, true}, []error{nil}, nil, 2},
		{"raced, then refused", []bool{false, false}, []error{nil, refused}, refused, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			writes, explains := 0, 0
			v, err := Conditional(t.Context(), func() (int, bool, error) {
				writes++
				return writes, tc.matches[writes-1], nil
			}, func() error {
				explains++
				return tc.explain[explains-1]
			})
			if !errors.Is(err, tc.want) || writes != tc.writes || (err == nil && v != writes) {
				t.Fatalf("Conditional = %d, %v after %d writes; want %v after %d", v, err, writes, tc.want, tc.writes)
			}
		})
	}
	t.Run("write fails", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		_, err := Conditional(t.Context(), func() (int, bool, error) { return 0, false, boom }, func() error { t.Fatal("explained a failure"); return nil })
		if !errors.Is(err, boom) {
			t.Fatalf("Conditional = %v, want %v", err, boom)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		_, err := Conditional(ctx, func() (int, bool, error) { return 0, false, nil }, func() error { cancel(); return nil })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Conditional = %v, want context.Canceled", err)
		}
	})
}
