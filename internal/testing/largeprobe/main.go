//go:build linux

// Command largeprobe is the child process of the large-blob tests: it puts
// or gets one value through a stead store and reports its own peak memory,
// or puts forever until it is killed. It is built without the race
// detector, so the memory it reports is the library's.
//
//	largeprobe -url URL -put SIZE        prints key=KEY maxrss_kib=N
//	largeprobe -url URL -get KEY         prints size=N maxrss_kib=N
//	largeprobe -url URL -put-forever     prints "putting" once its first chunk is written
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
)

func main() {
	url := flag.String("url", "", "store URL")
	put := flag.Int64("put", -1, "put this many pseudo-random bytes")
	get := flag.String("get", "", "get this key, verifying it")
	forever := flag.Bool("put-forever", false, "put an endless value until killed")
	lease := flag.Duration("lease", time.Second, "upload lease")
	flag.Parse()
	if err := run(*url, *put, *get, *forever, *lease); err != nil {
		fmt.Fprintln(os.Stderr, "largeprobe:", err)
		os.Exit(1)
	}
}

func run(url string, put int64, get string, forever bool, lease time.Duration) error {
	ctx := context.Background()
	st, err := stead.Open(ctx, url, stead.WithUploadLease(lease), stead.WithVerifyReads())
	if err != nil {
		return err
	}
	defer st.Close()
	switch {
	case forever:
		_, err := st.Blobs.Put(ctx, &announcer{r: rand.NewChaCha8([32]byte{1})})
		return fmt.Errorf("an endless put returned: %w", err)
	case put >= 0:
		key, err := st.Blobs.Put(ctx, io.LimitReader(rand.NewChaCha8([32]byte{2}), put))
		if err != nil {
			return err
		}
		fmt.Printf("key=%s maxrss_kib=%d\n", key, maxRSS())
	case get != "":
		key, err := blob.ParseKey(get)
		if err != nil {
			return err
		}
		rd, err := st.Blobs.Get(ctx, key)
		if err != nil {
			return err
		}
		h := sha256.New()
		n, err := rd.WriteTo(h) // verified at the end (WithVerifyReads)
		if err != nil {
			return err
		}
		fmt.Printf("size=%d maxrss_kib=%d\n", n, maxRSS())
	default:
		return errors.New("one of -put, -get, -put-forever")
	}
	return nil
}

// announcer passes r through and prints "putting" once more than two
// default chunks have been read, so at least one chunk is stored.
type announcer struct {
	r    io.Reader
	n    int64
	told bool
}

func (a *announcer) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	a.n += int64(n)
	if !a.told && a.n > 2*blob.DefaultChunkSize+blob.InlineLimit {
		a.told = true
		fmt.Println("putting")
	}
	return n, err
}

// maxRSS is the process's peak resident set size in KiB: VmHWM, which
// starts afresh at exec (getrusage's ru_maxrss carries the parent's peak
// across fork and exec).
func maxRSS() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib); err == nil {
				return kib
			}
		}
	}
	return -1
}
