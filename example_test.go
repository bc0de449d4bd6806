package stead_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/record"
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
