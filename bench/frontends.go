package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/server"
)

// registryScenarios compare a blob push and pull through the OCI
// registry (/v2/, a monolithic POST ?digest= and a GET) with stead's own
// /v1/blobs (PUT and GET), on one server over the same store, at 4 KiB
// and (on demand) 64 MiB.
func registryScenarios() []scenario {
	var all []scenario
	for _, e := range []struct {
		name string
		open opener
	}{{"sqlite", openSteadSQLite}, {"pg", openSteadPG}} {
		for _, sz := range []struct {
			group string
			size  int
		}{{"oci-" + e.name, 4 << 10}, {"oci-large-" + e.name, 64 << 20}} {
			all = append(all,
				scenario{group: sz.group, name: "v1 put", setup: httpBlobs(e.open, sz.size, false, false)},
				scenario{group: sz.group, name: "v2 push", base: "v1 put", setup: httpBlobs(e.open, sz.size, true, false)},
				scenario{group: sz.group, name: "v1 get", setup: httpBlobs(e.open, sz.size, false, true)},
				scenario{group: sz.group, name: "v2 pull", base: "v1 get", setup: httpBlobs(e.open, sz.size, true, true)},
			)
		}
	}
	return all
}

// httpBlobs serves a fresh store with the registry mounted and returns
// an op that puts a new value of size bytes (or, with get, reads one of
// 16 stored ones) through /v2/ when oci, else /v1/blobs.
func httpBlobs(open opener, size int, oci, get bool) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		st, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		base, _, stop, err := serveBench(st, registry.Options{})
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		done := func() { stop(); cleanup() }
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
		value := func(w, i int) []byte {
			b := make([]byte, size)
			binary.LittleEndian.PutUint64(b, uint64(w))
			binary.LittleEndian.PutUint64(b[8:], uint64(i))
			return b
		}
		put := func(ctx context.Context, b []byte) error {
			sum := sha256.Sum256(b)
			d := "sha256:" + hex.EncodeToString(sum[:])
			method, url, want := "PUT", base+"/v1/blobs/"+d, http.StatusCreated
			if oci {
				method, url = "POST", base+"/v2/bench/blobs/blobs/uploads/?digest="+d
			}
			return do(ctx, client, method, url, b, want, nil)
		}
		if !get {
			return func(ctx context.Context, w, i int) error { return put(ctx, value(w, i)) }, done, nil
		}
		var digests []string
		for k := range 16 {
			b := value(-1, k)
			sum := sha256.Sum256(b)
			digests = append(digests, "sha256:"+hex.EncodeToString(sum[:]))
			if err := put(ctx, b); err != nil {
				done()
				return nil, nil, err
			}
		}
		return func(ctx context.Context, w, i int) error {
			d := digests[(w+i)%len(digests)]
			url := base + "/v1/blobs/" + d
			if oci {
				url = base + "/v2/bench/blobs/blobs/" + d
			}
			var got int64
			if err := do(ctx, client, "GET", url, nil, http.StatusOK, &got); err != nil {
				return err
			}
			if got != int64(size) {
				return fmt.Errorf("read %d bytes of %d", got, size)
			}
			return nil
		}, done, nil
	}
}

// do sends one request and drains the answer, counting its bytes in read.
func do(ctx context.Context, client *http.Client, method, url string, body []byte, want int, read *int64) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if read != nil {
		*read = n
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s = %d, want %d", method, url, resp.StatusCode, want)
	}
	return err
}

// serveBench serves st, a registry over it with opts mounted, on a
// loopback port, and returns the registry too.
func serveBench(st *stead.Store, opts registry.Options) (base string, reg *registry.Registry, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	reg = registry.New(st, opts)
	srv := server.New(st, server.Options{MaxUploads: 1024, MaxUploadsPerClient: 1024, MaxConnsPerClient: 1024,
		Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), reg, func() {
		cancel()
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("serve:", err)
		}
	}, nil
}
