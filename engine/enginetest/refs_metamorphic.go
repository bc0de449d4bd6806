package enginetest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/ref"
)

// refMetamorphic runs one seeded random sequence of ref and blob
// operations against the engine and the in-memory reference on one clock
// and compares every result. Versions are compared by the order each
// store first answered them in, since stores may skip numbers.
func refMetamorphic(t *testing.T, h Harness) {
	seed := metamorphicSeed()
	fake := clock.NewFake(wholeMicroStart)
	opts := blob.Options{Now: fake.Now}
	subject := newRefSide(setupWith(t, h, opts))
	reference := newRefSide(bundleOf(t, memory.New(), opts))
	rng := rand.New(rand.NewPCG(uint64(seed), 0x4ef5))
	values := [][]byte{[]byte("r0"), []byte("r1"), []byte("r2"), testValue("ref metamorphic", 300)}
	names := []string{"a", "a/b", "a/c", "b", "tags/v1", "tags/v2", "ünï/x", "z"}
	prefixes := []string{"", "a", "a/", "tags/", "ü", "zz"}
	runMetamorphic(t, seed, metamorphicOps, func(int) metamorphicStep {
		name := names[rng.IntN(len(names))]
		switch n := rng.IntN(100); {
		case n < 15:
			v := values[rng.IntN(len(values))]
			return refStep(fmt.Sprintf("Put(%q)", v[:2]), subject, reference, func(s *refSide) outcome {
				key, err := s.b.store.Put(t.Context(), bytes.NewReader(v))
				if err != nil {
					return failed(err)
				}
				return succeeded("%s", shortKey(key))
			})
		case n < 45:
			key := blob.KeyOf(values[rng.IntN(len(values))])
			if rng.IntN(10) == 0 {
				key = absentKey("ref metamorphic")
			}
			mode, ttl := rng.IntN(4), time.Duration(0)
			if rng.IntN(2) == 0 {
				ttl = time.Duration(1+rng.IntN(90)) * time.Second
			}
			var annotation []byte
			if rng.IntN(3) == 0 {
				annotation = []byte(fmt.Sprint("ann ", rng.IntN(5)))
			}
			label := fmt.Sprintf("Set(%q, %s, mode %d, ttl %v, %q)", name, shortKey(key), mode, ttl, annotation)
			return refStep(label, subject, reference, func(s *refSide) outcome {
				o := ref.SetOptions{TTL: ttl, Annotation: annotation}
				switch mode {
				case 1:
					o.IfAbsent = true
				case 2:
					o.IfVersion = max(s.last[name], 1)
				case 3:
					o.IfVersion = max(s.last[name]-1, 1)
				}
				r, err := s.b.refs.Set(t.Context(), name, key, o)
				if err != nil {
					return failed(err)
				}
				s.last[name] = r.Version
				return succeeded("%s", s.render(r))
			})
		case n < 60:
			return refStep(fmt.Sprintf("Get(%q)", name), subject, reference, func(s *refSide) outcome {
				r, err := s.b.refs.Get(t.Context(), name)
				if err != nil {
					return failed(err)
				}
				return succeeded("%s", s.render(r))
			})
		case n < 67:
			ttl := time.Duration(1+rng.IntN(60)) * time.Second
			return refStep(fmt.Sprintf("Touch(%q, %v)", name, ttl), subject, reference, func(s *refSide) outcome {
				r, err := s.b.refs.Touch(t.Context(), name, ttl)
				if err != nil {
					return failed(err)
				}
				return succeeded("%s", s.render(r))
			})
		case n < 75:
			cond := rng.IntN(3)
			return refStep(fmt.Sprintf("Delete(%q, cond %d)", name, cond), subject, reference, func(s *refSide) outcome {
				var version int64
				switch cond {
				case 1:
					version = max(s.last[name], 1)
				case 2:
					version = max(s.last[name]-1, 1)
				}
				if err := s.b.refs.Delete(t.Context(), name, version); err != nil {
					return failed(err)
				}
				return succeeded("deleted")
			})
		case n < 85:
			prefix, after, limit := prefixes[rng.IntN(len(prefixes))], names[rng.IntN(len(names))], 1+rng.IntN(5)
			if rng.IntN(2) == 0 {
				after = ""
			}
			return refStep(fmt.Sprintf("List(%q, %q, %d)", prefix, after, limit), subject, reference, func(s *refSide) outcome {
				page, err := s.b.refs.List(t.Context(), prefix, after, limit)
				if err != nil {
					return failed(err)
				}
				parts := make([]string, len(page))
				for i, r := range page {
					parts[i] = s.render(r)
				}
				return succeeded("[%s]", strings.Join(parts, " "))
			})
		case n < 93:
			key := blob.KeyOf(values[rng.IntN(len(values))])
			return refStep(fmt.Sprintf("DeleteBlob(%s)", shortKey(key)), subject, reference, func(s *refSide) outcome {
				if err := s.b.store.Delete(t.Context(), key); err != nil {
					return failed(err)
				}
				return succeeded("deleted")
			})
		default:
			d := time.Duration(1+rng.IntN(100)) * time.Second
			fake.Advance(d)
			return metamorphicStep{name: fmt.Sprintf("Advance(%v)", d)}
		}
	})
}

// refSide is one store of refMetamorphic: its bundle, the last version it
// answered per name, and the order it first answered versions in.
type refSide struct {
	b     *bundle
	last  map[string]int64
	order map[int64]int
}

func newRefSide(b *bundle) *refSide {
	return &refSide{b: b, last: map[string]int64{}, order: map[int64]int{}}
}

// render writes r with its version as the ordinal this store first
// answered it at.
func (s *refSide) render(r ref.Ref) string {
	n, ok := s.order[r.Version]
	if !ok {
		n = len(s.order) + 1
		s.order[r.Version] = n
	}
	expiry := "never"
	if !r.Expiry.IsZero() {
		expiry = r.Expiry.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s->%s v#%d %q %s", r.Name, shortKey(r.Key), n, r.Annotation, expiry)
}

func refStep(name string, subject, reference *refSide, f func(*refSide) outcome) metamorphicStep {
	got, want := f(subject), f(reference)
	return metamorphicStep{name: name, got: got, want: want, compare: true}
}
