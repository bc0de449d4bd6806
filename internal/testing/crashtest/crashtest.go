// Package crashtest checks a SQL engine's bytes tier against crashes at
// the two points where the database and the bucket part: after an object
// is written and before it is published, and after a row's deletion
// committed and before its object is deleted. Either leaves an orphan
// object, never a row without its object, and the orphan step removes it,
// and only it: the object chunks an upload in progress or a stored chunk
// set names are kept.
package crashtest

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/gc"
)

// Harness opens engines for Run.
type Harness struct {
	// Open opens an engine, migrated, on the test's one database and one
	// bucket (every call the same store), closed in t.Cleanup.
	Open func(t *testing.T) engine.Engine
	// Crash makes eng's deletions of objects after a commit do nothing
	// (on) or work again (off): a process killed between the two.
	Crash func(eng engine.Engine, on bool)
	// Objects lists the objects in the bucket.
	Objects func(t *testing.T) []string
}

// Run runs the crash tests, one store per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("BetweenWriteAndPublish", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		ctx := t.Context()
		eng := h.Open(t)
		set, err := eng.Blobs().BeginUpload(ctx, blob.BeginUploadParams{State: []byte("state"), Lease: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		value := randomValue(5000)
		if _, err := eng.Blobs().WriteValue(ctx, blob.WriteValueParams{Set: set, Value: bytes.NewReader(value), Lease: time.Millisecond, State: func() []byte { return []byte("state") }}); err != nil {
			t.Fatal(err)
		}
		// The process dies before it publishes; the next one reaps the
		// lapsed upload and dies too before deleting its object.
		eng.Close()
		next := h.Open(t)
		h.Crash(next, true)
		time.Sleep(2 * time.Millisecond)
		if n, err := next.Blobs().ReapUploads(ctx, blob.ReapUploadsParams{}); err != nil || n != 1 {
			t.Fatalf("ReapUploads = %d, %v; want the upload reaped", n, err)
		}
		if got := h.Objects(t); len(got) != 1 {
			t.Fatalf("bucket holds %q, want the unpublished object, an orphan now", got)
		}
		h.Crash(next, false)
		sweep(t, next)
		if got := h.Objects(t); len(got) != 0 {
			t.Fatalf("bucket holds %q after the orphan step, want nothing", got)
		}
		if _, err := next.Blobs().Stat(ctx, blob.KeyOf(value)); err == nil {
			t.Fatal("the unpublished value is stored")
		}
	})
	t.Run("BetweenRowDeleteAndObjectDelete", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		ctx := t.Context()
		eng := h.Open(t)
		store := blob.NewStore(eng.Blobs(), blob.Options{InlineLimit: 16, PinTTL: time.Millisecond})
		keep := randomValue(3000)
		keepKey, err := store.Put(ctx, bytes.NewReader(keep))
		if err != nil {
			t.Fatal(err)
		}
		doomed, err := store.Put(ctx, bytes.NewReader(randomValue(4000)))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // the puts' pins lapse
		h.Crash(eng, true)
		if err := store.Delete(ctx, doomed); err != nil {
			t.Fatal(err)
		}
		eng.Close()
		next := h.Open(t)
		if got := h.Objects(t); len(got) != 2 {
			t.Fatalf("bucket holds %q, want the kept object and the deleted blob's, an orphan now", got)
		}
		sweep(t, next)
		if got := h.Objects(t); len(got) != 1 {
			t.Fatalf("bucket holds %q after the orphan step, want the kept object only", got)
		}
		rd, err := blob.NewStore(next.Blobs(), blob.Options{}).Get(ctx, keepKey)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, keep) {
			t.Fatalf("the kept blob reads %d bytes, %v", len(got), err)
		}
	})
	t.Run("ChunkObjects", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		ctx := t.Context()
		eng := h.Open(t)
		opts := blob.Options{InlineLimit: 16, ChunkSize: 1000, PinTTL: time.Millisecond}
		store := blob.NewStore(eng.Blobs(), opts)
		// Rows within the inline limit, then two object chunks.
		parts := [][]byte{randomValue(10), randomValue(3000), randomValue(2000)}
		appendParts := func(u *blob.Upload) []byte {
			var value []byte
			for _, p := range parts {
				if _, err := u.Append(ctx, bytes.NewReader(p)); err != nil {
					t.Fatal(err)
				}
				value = append(value, p...)
			}
			return value
		}
		open, err := store.BeginUpload(ctx, blob.UploadOptions{Owner: "crash"})
		if err != nil {
			t.Fatal(err)
		}
		staged := appendParts(open)
		var keys []blob.Key
		for range 2 {
			parts[0] = randomValue(10 + len(keys)) // another value each time
			u, err := store.BeginUpload(ctx, blob.UploadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			appendParts(u)
			key, err := u.Commit(ctx, blob.CommitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, key)
		}
		if got := h.Objects(t); len(got) != 6 {
			t.Fatalf("bucket holds %q, want the 2 object chunks of each of 3 uploads", got)
		}
		// The orphan step leaves what an upload in progress and a stored
		// chunk set name.
		sweep(t, eng)
		if got := h.Objects(t); len(got) != 6 {
			t.Fatalf("bucket holds %q after the orphan step, want the 6 chunk objects kept", got)
		}
		time.Sleep(2 * time.Millisecond) // the commits' pins lapse
		h.Crash(eng, true)
		if err := store.Delete(ctx, keys[1]); err != nil {
			t.Fatal(err)
		}
		eng.Close()
		next := h.Open(t)
		if got := h.Objects(t); len(got) != 6 {
			t.Fatalf("bucket holds %q, want the deleted chunk set's objects too, orphans now", got)
		}
		sweep(t, next)
		if got := h.Objects(t); len(got) != 4 {
			t.Fatalf("bucket holds %q after the orphan step, want the 4 objects still named", got)
		}
		// The upload continues in the next process, and both values read.
		nextStore := blob.NewStore(next.Blobs(), opts)
		u, err := nextStore.ResumeUpload(ctx, open.ID(), blob.UploadOptions{Owner: "crash"})
		if err != nil {
			t.Fatal(err)
		}
		tail := randomValue(1500)
		if _, err := u.Append(ctx, bytes.NewReader(tail)); err != nil {
			t.Fatal(err)
		}
		key, err := u.Commit(ctx, blob.CommitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []blob.Key{key, keys[0]} {
			rd, err := nextStore.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rd)
			rd.Close()
			if err != nil || blob.KeyOf(got) != k {
				t.Fatalf("%s reads %d bytes, %v", k, len(got), err)
			}
		}
		if want := blob.KeyOf(append(staged, tail...)); key != want {
			t.Fatalf("the resumed upload committed %s, want %s", key, want)
		}
	})
}

// sweep runs the orphan step with no grace until it wraps.
func sweep(t *testing.T, eng engine.Engine) {
	t.Helper()
	o, ok := eng.GC().(gc.OrphanSweeper)
	if !ok {
		t.Fatal("the engine has no orphan step")
	}
	for {
		got, err := o.SweepOrphans(context.WithoutCancel(t.Context()), gc.OrphanParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got.Wrapped {
			return
		}
	}
}

func randomValue(n int) []byte {
	v := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(n), byte(n >> 8)}).Read(v)
	return v
}
