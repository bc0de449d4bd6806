package stead_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
)

func Example() {
	ctx := context.Background()
	// "sqlite://./stead-data/stead.db" or "postgres://app@db/app?schema=stead" work the same way.
	st, err := stead.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	key, err := st.Blobs.Put(ctx, strings.NewReader("hello, stead"))
	if err != nil {
		log.Fatal(err)
	}
	rd, err := st.Blobs.Get(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	defer rd.Close()
	value, err := io.ReadAll(rd)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(key)
	fmt.Printf("%d bytes: %s\n", rd.Size(), value)
	// Output:
	// sha256:0a9eba33059b8ebfcdc5104fdd65eca34d6027142f7e5085fa0c837d6ad10519
	// 12 bytes: hello, stead
}

// A worker claims records of its group, checkpoints them and completes
// them. Working alone, a process uses its instance id as the group; a
// fleet shares a group name.
func Example_records() {
	ctx := context.Background()
	st, err := stead.Open(ctx, "mem://", stead.WithInstanceID("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	group := st.InstanceID()
	if err := st.Records.RegisterGroup(ctx, group); err != nil {
		log.Fatal(err)
	}
	if _, err := st.Records.Save(ctx, record.Record{ID: "order-42", Group: group, Status: record.Active}); err != nil {
		log.Fatal(err)
	}

	recs, err := st.Records.ClaimNext(ctx, group, st.InstanceID(), 30*time.Second, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, rec := range recs {
		rec.Payload = []byte(`{"step":"charged"}`) // a checkpoint
		if rec, err = st.Records.Save(ctx, rec); err != nil {
			log.Fatal(err) // ErrConflict: the lease was lost; stop working on it
		}
		rec.Status = record.Completed
		if rec, err = st.Records.Save(ctx, rec); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s at version %d, incarnation %d\n", rec.ID, rec.Status, rec.Version, rec.Lease.Incarnation)
	}
	// Output:
	// order-42: completed at version 4, incarnation 1
}

// Example_gc shows the application's side of garbage collection: pin a
// key, reference it, release the pin; a sweep deletes only what nothing
// pins or references. (A test clock stands in for waiting; on PostgreSQL
// the references would be a table registered as a SQL source.)
func Example_gc() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st, err := stead.Open(ctx, "mem://", stead.WithClock(clock), stead.WithGCGrace(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// The application's references: here a set, consulted in process.
	var mu sync.Mutex
	refs := map[blob.Key]bool{}
	err = st.GC.RegisterSource(ctx, gc.Source{Name: "manifests", Referenced: func(_ context.Context, k blob.Key) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return refs[k], nil
	}})
	if err != nil {
		log.Fatal(err)
	}

	// Put pins the new blob; Pin keeps it pinned while we reference it.
	key, err := st.Blobs.Put(ctx, strings.NewReader("layer"))
	if err != nil {
		log.Fatal(err)
	}
	pin, err := st.Blobs.Pin(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	refs[key] = true // reference only what you hold a pin on ...
	mu.Unlock()
	if err := pin.Release(ctx); err != nil { // ... then release it
		log.Fatal(err)
	}
	orphan, err := st.Blobs.Put(ctx, strings.NewReader("never referenced"))
	if err != nil {
		log.Fatal(err)
	}

	now = now.Add(2 * time.Minute) // the puts' pins expire
	rep, err := st.GC.Sweep(ctx, gc.SweepOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("staged:", rep.Staged)
	now = now.Add(time.Hour) // the grace passes
	rep, err = st.GC.Sweep(ctx, gc.SweepOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", rep.Deleted)
	for _, k := range []blob.Key{key, orphan} {
		has, err := st.Blobs.Has(ctx, k)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(k == key, has)
	}
	// Output:
	// staged: 1
	// deleted: 1
	// true true
	// false false
}

// Example_refs keeps a blob with a ref, with no table of one's own: a tag
// naming a manifest, and a cache entry that goes once nobody reads it.
// Deleting the ref lets a later sweep collect the blob. (A test clock
// stands in for waiting.)
func Example_refs() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := stead.Open(ctx, "mem://", stead.WithClock(func() time.Time { return now }), stead.WithGCGrace(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	manifest, err := st.Blobs.Put(ctx, strings.NewReader(`{"layers":[]}`))
	if err != nil {
		log.Fatal(err)
	}
	// The put's pin protects the blob until the ref does.
	tag, err := st.Refs.Set(ctx, "tags/app/v1", manifest, ref.SetOptions{})
	if err != nil {
		log.Fatal(err)
	}
	entry, err := st.Blobs.Put(ctx, strings.NewReader("cached output"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := st.Refs.Set(ctx, "cache/job-7", entry, ref.SetOptions{TTL: 24 * time.Hour}); err != nil {
		log.Fatal(err)
	}

	// With no ref left, a sweep must be told that nothing declared is
	// right (AllUnreferenced); with one, it knows what is kept.
	sweep := func(opts gc.SweepOptions) gc.Report {
		rep, err := st.GC.Sweep(ctx, opts)
		if err != nil {
			log.Fatal(err)
		}
		return rep
	}
	now = now.Add(48 * time.Hour) // the pins and the cache entry lapse
	sweep(gc.SweepOptions{})
	now = now.Add(time.Hour) // the grace passes
	fmt.Println("deleted:", sweep(gc.SweepOptions{}).Deleted)

	// The tag goes (if it is still the version we set), and so does its blob.
	if err := st.Refs.Delete(ctx, "tags/app/v1", tag.Version); err != nil {
		log.Fatal(err)
	}
	now = now.Add(time.Hour)
	sweep(gc.SweepOptions{AllUnreferenced: true})
	now = now.Add(time.Hour)
	fmt.Println("deleted:", sweep(gc.SweepOptions{AllUnreferenced: true}).Deleted)
	// Output:
	// deleted: 1
	// deleted: 1
}

// Example_references keeps blobs through the blob that names them: a
// manifest put with its layers as children keeps them while it is stored,
// with no pin or ref of their own.
func Example_references() {
	ctx := context.Background()
	st, err := stead.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	layer, err := st.Blobs.Put(ctx, strings.NewReader("layer bytes"))
	if err != nil {
		log.Fatal(err)
	}
	manifest, err := st.Blobs.PutWith(ctx, strings.NewReader(`{"layers":["`+layer.String()+`"]}`),
		blob.PutOptions{Children: []blob.Key{layer}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := st.Refs.Set(ctx, "tags/latest", manifest.Key, ref.SetOptions{}); err != nil {
		log.Fatal(err)
	}
	x, err := st.GC.Explain(ctx, layer)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(x.Parents[0] == manifest.Key)
	// A parent whose children are not stored is refused, and stores nothing.
	_, err = st.Blobs.PutWith(ctx, strings.NewReader("orphan"), blob.PutOptions{Children: []blob.Key{blob.KeyOf([]byte("never put"))}})
	fmt.Println(errors.Is(err, stead.ErrNotFound))
	// Output:
	// true
	// true
}
