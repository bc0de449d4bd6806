package stead_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/steadkit/stead"
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
