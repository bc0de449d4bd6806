package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// testPutSet: ref.Store.Put, a blob and its refs in one commit
// (ref.Backend.PutSet).
func testPutSet(t *testing.T, h Harness) {
	runTests(t, h, []suiteTest{
		{"Created", putSetCreated},
		{"Refused", putSetRefused},
		{"Invalid", putSetInvalid},
		{"Concurrent", putSetConcurrent},
		{"RacesDelete", putSetRacesDelete},
		{"Large", putSetLarge},
		{"Closed", putSetClosed},
		{"OneConn", putSetOneConn},
	})
}

// mustPutRefs puts value with refs and checks the refs it answers.
func mustPutRefs(t *testing.T, s *ref.Store, value []byte, refs ...ref.PutRef) ref.PutResult {
	t.Helper()
	res, err := s.Put(t.Context(), bytes.NewReader(value), ref.PutOptions{Refs: refs})
	if err != nil {
		t.Fatalf("Put with refs %v: %v", refs, err)
	}
	if res.Key != blob.KeyOf(value) || len(res.Refs) != len(refs) {
		t.Fatalf("Put = %+v, want key %s and %d refs", res, blob.KeyOf(value), len(refs))
	}
	for i, r := range res.Refs {
		if r.Name != refs[i].Name || r.Key != res.Key || r.Version < 1 || r.Weak != refs[i].Weak || !bytes.Equal(r.Annotation, refs[i].Annotation) {
			t.Fatalf("Put: ref %d = %+v, want %q to %s", i, r, refs[i].Name, res.Key)
		}
	}
	return res
}

// putSetCreated: a Put stores the blob and sets its refs, with new
// versions, telling created for the blob and for each name; again, the
// blob is stored already and the refs replaced.
func putSetCreated(t *testing.T, h Harness) {
	b := setup(t, h)
	value := testValue("putset created", 10)
	refs := []ref.PutRef{
		{Name: "ps/keep", SetOptions: ref.SetOptions{IfAbsent: true, TTL: time.Hour, Annotation: []byte("note")}},
		{Name: "ps/link", SetOptions: ref.SetOptions{Weak: true}},
	}
	first := mustPutRefs(t, b.refs, value, refs...)
	if !first.Created || !first.Refs[0].Created || !first.Refs[1].Created {
		t.Fatalf("first Put = %+v, want the blob and both names created", first)
	}
	if first.Refs[0].Expiry.IsZero() || !first.Refs[1].Expiry.IsZero() {
		t.Fatalf("first Put refs = %+v, want the first expiring, the second not", first.Refs)
	}
	for _, r := range first.Refs {
		wantRef(t, b.refs, r.Name, r)
	}
	got, err := b.store.Get(t.Context(), first.Key)
	if err != nil {
		t.Fatalf("Get the put blob: %v", err)
	}
	readAllEqual(t, got, value)
	refs[0].IfAbsent, refs[0].IfVersion = false, first.Refs[0].Version
	again := mustPutRefs(t, b.refs, value, refs...)
	if again.Created || again.Refs[0].Created || again.Refs[1].Created {
		t.Fatalf("second Put = %+v, want nothing created", again)
	}
	for i, r := range again.Refs {
		if r.Version <= max(first.Refs[0].Version, first.Refs[1].Version) {
			t.Fatalf("second Put: ref %d version %d, not past the first Put's", i, r.Version)
		}
		wantRef(t, b.refs, r.Name, r)
	}
}

// readAllEqual reads rd whole and checks it holds want.
func readAllEqual(t *testing.T, rd *blob.Reader, want []byte) {
	t.Helper()
	defer rd.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rd); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("read %d bytes, want %d", buf.Len(), len(want))
	}
}

// putSetRefused: a ref whose condition fails fails the Put with a
// *ref.RefusedError naming it, wrapping ErrConflict, and it stores neither the blob nor any ref; a blob stored
// already stays as it was.
func putSetRefused(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	other := mustPut(t, b.store, testValue("putset other", 10))
	held := mustSet(t, b.refs, "ps/held", other, ref.SetOptions{})
	for _, tc := range []struct {
		name string
		cond ref.SetOptions
	}{
		{"IfAbsent", ref.SetOptions{IfAbsent: true}},
		{"IfVersion", ref.SetOptions{IfVersion: held.Version + 1000}},
	} {
		value := testValue("putset refused "+tc.name, 10)
		_, err := b.refs.Put(ctx, bytes.NewReader(value), ref.PutOptions{Refs: []ref.PutRef{
			{Name: "ps/a-" + tc.name}, {Name: "ps/held", SetOptions: tc.cond}, {Name: "ps/z-" + tc.name},
		}})
		wantErr(t, err, steaderr.ErrConflict, tc.name+" Put")
		if refused := (*ref.RefusedError)(nil); !errors.As(err, &refused) || refused.Name != "ps/held" {
			t.Fatalf("%s: refused Put = %v, want a *ref.RefusedError naming ps/held", tc.name, err)
		}
		if _, err := b.blobs.Stat(ctx, blob.KeyOf(value)); !errors.Is(err, steaderr.ErrNotFound) {
			t.Fatalf("%s: Stat after a refused Put: %v, want ErrNotFound", tc.name, err)
		}
		for _, name := range []string{"ps/a-" + tc.name, "ps/z-" + tc.name} {
			if _, err := b.refs.Get(ctx, name); !errors.Is(err, steaderr.ErrNotFound) {
				t.Fatalf("%s: Get(%q) after a refused Put: %v, want ErrNotFound", tc.name, name, err)
			}
		}
		wantRef(t, b.refs, "ps/held", held)
	}
	// A refused Put of a stored blob leaves it stored.
	_, err := b.refs.Put(ctx, bytes.NewReader(testValue("putset other", 10)), ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/held", SetOptions: ref.SetOptions{IfAbsent: true}}}})
	wantErr(t, err, steaderr.ErrConflict, "refused Put of a stored blob")
	if _, err := b.blobs.Stat(ctx, other); err != nil {
		t.Fatalf("Stat of a stored blob after a refused Put: %v", err)
	}
}

// putSetInvalid: bad input is refused before anything is stored.
func putSetInvalid(t *testing.T, h Harness) {
	b := setup(t, h)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		opts ref.PutOptions
		want error
	}{
		{"NoRef", t.Context(), ref.PutOptions{}, steaderr.ErrInvalidArgument},
		{"Twice", t.Context(), ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/twice"}, {Name: "ps/twice"}}}, steaderr.ErrInvalidArgument},
		{"TooMany", t.Context(), ref.PutOptions{Refs: make([]ref.PutRef, ref.MaxPutRefs+1)}, steaderr.ErrInvalidArgument},
		{"HostileName", t.Context(), ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/ok"}, {Name: "ps/\x00bad"}}}, steaderr.ErrInvalidName},
		{"Annotation", t.Context(), ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/ann", SetOptions: ref.SetOptions{Annotation: make([]byte, ref.MaxAnnotation+1)}}}}, steaderr.ErrInvalidArgument},
		{"TTL", t.Context(), ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/ttl", SetOptions: ref.SetOptions{TTL: -time.Second}}}}, steaderr.ErrInvalidArgument},
		{"Digest", t.Context(), ref.PutOptions{Expect: blob.KeyOf([]byte("other")), Refs: []ref.PutRef{{Name: "ps/digest"}}}, steaderr.ErrDigestMismatch},
		{"Cancelled", cancelled, ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/cancelled"}}}, context.Canceled},
	} {
		value := testValue("putset invalid "+tc.name, 10)
		_, err := b.refs.Put(tc.ctx, bytes.NewReader(value), tc.opts)
		wantErr(t, err, tc.want, tc.name)
		if _, err := b.blobs.Stat(t.Context(), blob.KeyOf(value)); !errors.Is(err, steaderr.ErrNotFound) {
			t.Fatalf("%s: Stat after a refused Put: %v, want ErrNotFound", tc.name, err)
		}
		for _, r := range tc.opts.Refs {
			if r.Name == "" || strings.ContainsRune(r.Name, 0) {
				continue
			}
			if _, err := b.refs.Get(t.Context(), r.Name); !errors.Is(err, steaderr.ErrNotFound) {
				t.Fatalf("%s: Get(%q): %v, want ErrNotFound", tc.name, r.Name, err)
			}
		}
	}
}

// putSetConcurrent: of concurrent Puts of one key setting a shared ref
// create-only, exactly one commits, and no refused one leaves a ref; then
// concurrent Puts with overlapping unconditional refs all commit.
func putSetConcurrent(t *testing.T, h Harness) {
	b := setup(t, h)
	value := testValue("putset concurrent", 10)
	const n = 8
	var wg sync.WaitGroup
	results := make([]ref.PutResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = b.refs.Put(t.Context(), bytes.NewReader(value), ref.PutOptions{Refs: []ref.PutRef{
				{Name: "ps/shared"}, {Name: fmt.Sprintf("ps/own-%d", i)}, {Name: "ps/first", SetOptions: ref.SetOptions{IfAbsent: true}},
			}})
		})
	}
	wg.Wait()
	created, won := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
			if results[i].Created {
				created++
			}
		case errors.Is(err, steaderr.ErrConflict):
			if _, gerr := b.refs.Get(t.Context(), fmt.Sprintf("ps/own-%d", i)); !errors.Is(gerr, steaderr.ErrNotFound) {
				t.Fatalf("a refused Put's own ref: %v, want ErrNotFound", gerr)
			}
		default:
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if won != 1 || created > 1 {
		t.Fatalf("%d Puts committed (%d created the blob), want exactly one, and at most one created", won, created)
	}
	for _, name := range []string{"ps/shared", "ps/first"} {
		got, err := b.refs.Get(t.Context(), name)
		if err != nil || got.Key != blob.KeyOf(value) {
			t.Fatalf("Get(%q) = %+v, %v", name, got, err)
		}
	}
	// Unconditional Sets of overlapping names all commit.
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.refs.Put(t.Context(), bytes.NewReader(value), ref.PutOptions{Refs: []ref.PutRef{
				{Name: fmt.Sprintf("ps/again-%d", i)}, {Name: "ps/shared"},
			}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("unconditional Put %d: %v", i, err)
		}
		if _, err := b.refs.Get(t.Context(), fmt.Sprintf("ps/again-%d", i)); err != nil {
			t.Fatalf("unconditional Put %d's own ref: %v", i, err)
		}
	}
}

// putSetRacesDelete: a Put racing a Delete of its key never leaves a ref
// naming a missing blob: either the Put commits first, its pin and strong
// ref keeping the blob, or the Delete does and the Put stores it again.
func putSetRacesDelete(t *testing.T, h Harness) {
	b := setup(t, h)
	ctx := t.Context()
	for i := range 20 {
		value := testValue(fmt.Sprint("putset race ", i), 10)
		key := mustPut(t, b.store, value)
		b.expirePins()
		name := fmt.Sprintf("ps/race-%d", i)
		var wg sync.WaitGroup
		var putErr, delErr error
		wg.Go(func() {
			_, putErr = b.refs.Put(ctx, bytes.NewReader(value), ref.PutOptions{Refs: []ref.PutRef{{Name: name}, {Name: name + "-weak", SetOptions: ref.SetOptions{Weak: true}}}})
		})
		wg.Go(func() { _, delErr = b.blobs.Delete(ctx, blob.DeleteParams{Keys: []blob.Key{key}, Now: b.clock.Now()}) })
		wg.Wait()
		if putErr != nil || delErr != nil {
			t.Fatalf("round %d: Put: %v, Delete: %v", i, putErr, delErr)
		}
		for _, n := range []string{name, name + "-weak"} {
			if _, err := b.refs.Get(ctx, n); err != nil {
				t.Fatalf("round %d: Get(%q): %v", i, n, err)
			}
		}
		if _, err := b.blobs.Stat(ctx, key); err != nil {
			t.Fatalf("round %d: a ref names %s, and Stat: %v", i, key, err)
		}
	}
}

// putSetLarge: content over the inline limit is put, then its refs set.
func putSetLarge(t *testing.T, h Harness) {
	b := setupWith(t, h, blob.Options{InlineLimit: tinyInline, ChunkSize: tinyChunk})
	value := testValue("putset large", 3*tinyChunk)
	res := mustPutRefs(t, b.refs, value, ref.PutRef{Name: "ps/large"}, ref.PutRef{Name: "ps/large-weak", SetOptions: ref.SetOptions{Weak: true}})
	if !res.Created {
		t.Fatalf("Put = %+v, want created", res)
	}
	wantRef(t, b.refs, "ps/large", res.Refs[0])
	if _, err := b.blobs.Stat(t.Context(), res.Key); err != nil {
		t.Fatalf("Stat: %v", err)
	}
}

// putSetClosed: a Put after Close is ErrClosed.
func putSetClosed(t *testing.T, h Harness) {
	b := setup(t, h)
	b.eng.Close()
	_, err := b.refs.Put(t.Context(), bytes.NewReader(testValue("putset closed", 10)), ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/closed"}}})
	wantErr(t, err, steaderr.ErrClosed, "Put after Close")
}

// putSetOneConn: on an engine with a pool of one connection
// (Harness.OneConn), concurrent Puts with refs and plain Sets all commit:
// a PutSet holds the one connection for its one round trip only.
func putSetOneConn(t *testing.T, h Harness) {
	if h.OneConn == nil {
		t.Skip("the harness has no engine with a pool of one connection (Harness.OneConn)")
	}
	b := bundleOf(t, h.OneConn(t), blob.Options{})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			value := testValue(fmt.Sprint("putset one conn ", i), 10)
			if i%2 == 0 {
				_, errs[i] = b.refs.Put(t.Context(), bytes.NewReader(value), ref.PutOptions{Refs: []ref.PutRef{{Name: "ps/one"}, {Name: fmt.Sprint("ps/one-", i)}}})
				return
			}
			key, err := b.store.Put(t.Context(), bytes.NewReader(value))
			if err == nil {
				_, err = b.refs.Set(t.Context(), "ps/one", key, ref.SetOptions{})
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
}
