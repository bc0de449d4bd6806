package enginetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/internal/clock"
)

// uploadMetamorphicOps is the length of the upload metamorphic sequence.
const uploadMetamorphicOps = 300

// uploadSide is one store's uploads in the metamorphic test: the IDs of
// the uploads begun, and the Uploads (handles) taken on them, both by
// index, the same on either side.
type uploadSide struct {
	store   *blob.Store
	ids     []string
	handles []*blob.Upload
}

// uploadOp is one random operation on uploads: on handle h (an index
// into the handles) or upload u (into the uploads begun).
type uploadOp struct {
	kind   string
	h, u   int
	owner  string
	value  int      // Append's pooled value
	expect blob.Key // Commit's Expect
}

func (o uploadOp) String() string {
	switch o.kind {
	case "Begin":
		return fmt.Sprintf("Begin(owner %q)", o.owner)
	case "Resume":
		return fmt.Sprintf("Resume(upload %d, owner %q)", o.u, o.owner)
	case "Append":
		return fmt.Sprintf("Append(handle %d, value %d)", o.h, o.value)
	case "Commit":
		return fmt.Sprintf("Commit(handle %d, expect %s)", o.h, shortKey(o.expect))
	case "Reap":
		return "Reap, the clock moved half a lease"
	}
	return fmt.Sprintf("%s(handle %d)", o.kind, o.h)
}

// uploadMetamorphic runs one seeded random sequence of upload operations
// (begins, resumes as the right owner or another, appends through fresh
// and stale Uploads, commits with and without Expect, aborts, reaps)
// through the engine under test and the in-memory reference, and
// compares every result: an Upload's outcome, its size, the keys it
// commits and the values they read back, must not depend on the engine.
func uploadMetamorphic(t *testing.T, h Harness) {
	seed := metamorphicSeed()
	fake := clock.NewFake(wholeMicroStart)
	opts := uploadOpts
	opts.Now = fake.Now
	sides := [2]*uploadSide{
		{store: setupWith(t, h, opts).store},
		{store: bundleOf(t, memory.New(), opts).store},
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x0a0a))
	var pool [][]byte
	for i, size := range []int{0, 1, 10, 17, 100, 1000, 2500} {
		pool = append(pool, testValue(fmt.Sprint("upload metamorphic ", i), size))
	}
	owners := []string{"", "library/a", "library/b"}
	var ownerOf []string // the owner each upload was begun by
	uploads, handles := 0, 0
	recent := func(n int) int { return max(0, n-1-rng.IntN(min(n, 4))) } // mostly the last few
	owner := func() string { return owners[rng.IntN(len(owners))] }
	next := func() uploadOp {
		switch n := rng.IntN(100); {
		case uploads == 0 || n < 8:
			return uploadOp{kind: "Begin", owner: owner()}
		case n < 22:
			o := uploadOp{kind: "Resume", u: recent(uploads), owner: owner()}
			if rng.IntN(5) > 0 {
				o.owner = ownerOf[o.u]
			}
			return o
		case handles == 0:
			return uploadOp{kind: "Begin", owner: owner()}
		case n < 72:
			return uploadOp{kind: "Append", h: recent(handles), value: rng.IntN(len(pool))}
		case n < 80:
			o := uploadOp{kind: "Commit", h: recent(handles)}
			if rng.IntN(3) == 0 {
				o.expect = blob.KeyOf(pool[rng.IntN(len(pool))])
			}
			return o
		case n < 84:
			return uploadOp{kind: "Abort", h: recent(handles)}
		case n < 99:
			return uploadOp{kind: "Size", h: recent(handles)}
		}
		return uploadOp{kind: "Reap"}
	}
	apply := func(ctx context.Context, s *uploadSide, o uploadOp) outcome {
		switch o.kind {
		case "Begin":
			u, err := s.store.BeginUpload(ctx, blob.UploadOptions{Owner: o.owner})
			if err != nil {
				return failed(err)
			}
			s.ids = append(s.ids, u.ID())
			s.handles = append(s.handles, u)
			return succeeded("upload %d, handle %d", len(s.ids)-1, len(s.handles)-1)
		case "Resume":
			u, err := s.store.ResumeUpload(ctx, s.ids[o.u], blob.UploadOptions{Owner: o.owner})
			if err != nil {
				return failed(err)
			}
			s.handles = append(s.handles, u)
			return succeeded("handle %d of %d bytes", len(s.handles)-1, u.Size())
		case "Append":
			u := s.handles[o.h]
			n, err := u.Append(ctx, bytes.NewReader(pool[o.value]))
			if err != nil {
				return failed(fmt.Errorf("having taken %d bytes: %w", n, err))
			}
			return succeeded("took %d, size %d", n, u.Size())
		case "Commit":
			key, err := s.handles[o.h].Commit(ctx, blob.CommitOptions{Expect: o.expect})
			if err != nil {
				return failed(err)
			}
			rd, err := s.store.Get(ctx, key)
			if err != nil {
				return failed(fmt.Errorf("get of the committed key: %w", err))
			}
			defer rd.Close()
			value, err := io.ReadAll(rd)
			if err != nil {
				return failed(fmt.Errorf("reading the committed key: %w", err))
			}
			return succeeded("key %s, %d bytes hashing to %s", shortKey(key), len(value), shortKey(blob.KeyOf(value)))
		case "Abort":
			if err := s.handles[o.h].Abort(ctx); err != nil {
				return failed(err)
			}
			return succeeded("aborted")
		case "Size":
			return succeeded("%d", s.handles[o.h].Size())
		case "Reap":
			n, err := s.store.ReapUploads(ctx)
			if err != nil {
				return failed(err)
			}
			return succeeded("reaped %d", n)
		}
		return failed(fmt.Errorf("enginetest: unknown upload op %q", o.kind))
	}
	runMetamorphic(t, seed, uploadMetamorphicOps, func(int) metamorphicStep {
		o := next()
		if o.kind == "Reap" {
			fake.Advance(uploadOpts.UploadLease / 2)
		}
		got, want := apply(t.Context(), sides[0], o), apply(t.Context(), sides[1], o)
		if got.class == classOK && (o.kind == "Begin" || o.kind == "Resume") {
			handles++
			if o.kind == "Begin" {
				uploads++
				ownerOf = append(ownerOf, o.owner)
			}
		}
		// Leases run on: an upload not appended to for a lease is reaped
		// by the next Reap.
		fake.Advance(time.Second)
		return metamorphicStep{name: o.String(), got: got, want: want, compare: true}
	})
}
