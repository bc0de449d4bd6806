package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/server"
)

var bazelRemote = flag.String("bazel-remote", "", "a bazel-remote binary (github.com/buchgr/bazel-remote/v2, go build from its module): the cache-* groups run it beside stead; without it they measure stead alone")

// cacheScenarios compare stead's build cache with bazel-remote's on the
// same machine: gRPC CAS upload and download (BatchUpdateBlobs and
// BatchReadBlobs at 4 KiB, ByteStream Write and Read at 64 MiB) and
// ActionCache get, and the HTTP cache's cas/ put and get and ac/ get.
// stead runs over SQLite; bazel-remote over its disk cache, uncompressed.
func cacheScenarios() []scenario {
	var all []scenario
	type server struct {
		name string
		open func(ctx context.Context) (grpcAddr, httpBase string, stop func(), err error)
	}
	servers := []server{{"stead", startSteadCache(false)}}
	if *bazelRemote != "" {
		servers = append([]server{{"bazel-remote", startBazelRemote}}, servers...)
	}
	for _, sz := range []struct {
		group string
		size  int
	}{{"cache-grpc", 4 << 10}, {"cache-grpc-large", 64 << 20}} {
		for _, op := range []string{"cas put", "cas get", "ac get"} {
			if op == "ac get" && sz.size > 4<<10 {
				continue
			}
			group := servers
			if sz.size > 4<<10 {
				// Large blobs also through a file:// bytes tier, as
				// bazel-remote keeps plain files.
				group = append(slices.Clone(servers), server{"stead+tier", startSteadCache(true)})
			}
			for _, s := range group {
				sc := scenario{group: sz.group, name: s.name + " " + op, setup: grpcCache(s.open, sz.size, op)}
				if s.name != "bazel-remote" && *bazelRemote != "" {
					sc.base = "bazel-remote " + op
				}
				all = append(all, sc)
			}
		}
	}
	for _, op := range []string{"cas put", "cas get", "ac get"} {
		for _, s := range servers {
			sc := scenario{group: "cache-http", name: s.name + " " + op, setup: httpCache(s.open, 4<<10, op)}
			if s.name == "stead" && len(servers) > 1 {
				sc.base = "bazel-remote " + op
			}
			all = append(all, sc)
		}
	}
	return all
}

// blobOf returns the i-th distinct value of size bytes of worker w.
func blobOf(w, i, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b, uint64(w)<<32|uint64(i))
	copy(b[8:], "bench build cache content")
	return b
}

func digest(b []byte) *repb.Digest {
	sum := sha256.Sum256(b)
	return &repb.Digest{Hash: hex.EncodeToString(sum[:]), SizeBytes: int64(len(b))}
}

// storedCount is how many blobs of size a get scenario reads from: 16,
// or 2 of the large ones.
func storedCount(size int) int {
	if size > 1<<20 {
		return 2
	}
	return 16
}

// grpcCache returns an op over a fresh server's gRPC port: a put of a new
// blob, a get of one of 16 stored, or a get of one of 16 stored action
// results each naming a stored output.
func grpcCache(open func(context.Context) (string, string, func(), error), size int, op string) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		addr, _, stop, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20)))
		if err != nil {
			stop()
			return nil, nil, err
		}
		done := func() { conn.Close(); stop() }
		cas, ac, bs := repb.NewContentAddressableStorageClient(conn), repb.NewActionCacheClient(conn), bytestream.NewByteStreamClient(conn)
		put := func(ctx context.Context, b []byte) error {
			d := digest(b)
			if size <= 1<<20 {
				resp, err := cas.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: d, Data: b}}})
				if err == nil && resp.GetResponses()[0].GetStatus().GetCode() != 0 {
					err = fmt.Errorf("BatchUpdateBlobs: %v", resp.GetResponses()[0].GetStatus())
				}
				return err
			}
			w, err := bs.Write(ctx)
			if err != nil {
				return err
			}
			name := "uploads/" + uuid.NewString() + "/blobs/" + d.GetHash() + "/" + strconv.FormatInt(d.GetSizeBytes(), 10)
			for off := 0; off < len(b); off += 1 << 20 {
				end := min(off+1<<20, len(b))
				if err := w.Send(&bytestream.WriteRequest{ResourceName: name, WriteOffset: int64(off), Data: b[off:end], FinishWrite: end == len(b)}); err != nil {
					break
				}
			}
			_, err = w.CloseAndRecv()
			return err
		}
		get := func(ctx context.Context, d *repb.Digest) error {
			if size <= 1<<20 {
				resp, err := cas.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{Digests: []*repb.Digest{d}})
				if err == nil && int64(len(resp.GetResponses()[0].GetData())) != d.GetSizeBytes() {
					err = fmt.Errorf("BatchReadBlobs: %d bytes of %d", len(resp.GetResponses()[0].GetData()), d.GetSizeBytes())
				}
				return err
			}
			rd, err := bs.Read(ctx, &bytestream.ReadRequest{ResourceName: "blobs/" + d.GetHash() + "/" + strconv.FormatInt(d.GetSizeBytes(), 10)})
			if err != nil {
				return err
			}
			var got int64
			for {
				m, err := rd.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				got += int64(len(m.GetData()))
			}
			if got != d.GetSizeBytes() {
				return fmt.Errorf("ByteStream Read: %d bytes of %d", got, d.GetSizeBytes())
			}
			return nil
		}
		var stored, actions []*repb.Digest
		if op != "cas put" {
			for i := range storedCount(size) {
				b := blobOf(1<<20, i, size)
				if err := put(ctx, b); err != nil {
					done()
					return nil, nil, err
				}
				stored = append(stored, digest(b))
				if op == "ac get" {
					act := digest([]byte("action " + strconv.Itoa(i)))
					res := &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "out", Digest: digest(b)}}}
					if _, err := ac.UpdateActionResult(ctx, &repb.UpdateActionResultRequest{ActionDigest: act, ActionResult: res}); err != nil {
						done()
						return nil, nil, err
					}
					actions = append(actions, act)
				}
			}
		}
		return func(ctx context.Context, w, i int) error {
			switch op {
			case "cas put":
				return put(ctx, blobOf(w, i, size))
			case "cas get":
				return get(ctx, stored[(w+i)%len(stored)])
			}
			_, err := ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: actions[(w+i)%len(actions)]})
			return err
		}, done, nil
	}
}

// httpCache returns an op over a fresh server's HTTP cache: a PUT of a
// new cas/ blob, a GET of one of 16 stored, or a GET of one of 16 ac/
// results.
func httpCache(open func(context.Context) (string, string, func(), error), size int, op string) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		_, base, stop, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
		var paths []string
		if op != "cas put" {
			for i := range 16 {
				b := blobOf(1<<20, i, size)
				d := digest(b)
				if err := do(ctx, client, "PUT", base+"/cas/"+d.GetHash(), b, 200, nil); err != nil {
					stop()
					return nil, nil, err
				}
				paths = append(paths, "/cas/"+d.GetHash())
				if op == "ac get" {
					res, _ := proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "out", Digest: d}}})
					act := digest([]byte("action " + strconv.Itoa(i))).GetHash()
					if err := do(ctx, client, "PUT", base+"/ac/"+act, res, 200, nil); err != nil {
						stop()
						return nil, nil, err
					}
					paths[i] = "/ac/" + act
				}
			}
		}
		return func(ctx context.Context, w, i int) error {
			if op == "cas put" {
				b := blobOf(w, i, size)
				return do(ctx, client, "PUT", base+"/cas/"+digest(b).GetHash(), b, 200, nil)
			}
			return do(ctx, client, "GET", base+paths[(w+i)%len(paths)], nil, 200, nil)
		}, stop, nil
	}
}

// startSteadCache returns a start of a fresh SQLite store's build cache,
// with a file:// bytes tier in a fresh directory when tier: HTTP at
// /cache, gRPC on a port of its own.
func startSteadCache(tier bool) func(ctx context.Context) (string, string, func(), error) {
	return func(ctx context.Context) (string, string, func(), error) {
		open := openSteadSQLite
		if tier {
			open = openSteadSQLiteTier
		}
		st, cleanup, err := open(ctx)
		if err != nil {
			return "", "", nil, err
		}
		return serveSteadCache(st, cleanup)
	}
}

// serveSteadCache serves st's build cache until the returned stop, which
// then calls cleanup.
func serveSteadCache(st *stead.Store, cleanup func()) (string, string, func(), error) {
	cache := buildcache.New(st, buildcache.Options{MaxBlobSize: 128 << 20})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanup()
		return "", "", nil, err
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		cleanup()
		return "", "", nil, err
	}
	srv := server.New(st, server.Options{MaxBlobSize: 128 << 20, MaxUploads: 1024, MaxUploadsPerClient: 1024, MaxConnsPerClient: 1024,
		Mounts: []server.Mount{{Prefix: buildcache.Prefix, Handler: cache}}})
	gs := cache.GRPC(func(string, string, string) error { return nil })
	sctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(sctx, ln) }()
	go func() { _ = gs.Serve(gln) }()
	return gln.Addr().String(), "http://" + ln.Addr().String() + "/cache", func() {
		gs.Stop()
		cancel()
		<-errc
		cleanup()
	}, nil
}

// startBazelRemote runs -bazel-remote over a fresh directory on two free
// ports and waits for its HTTP port to answer.
func startBazelRemote(ctx context.Context) (string, string, func(), error) {
	dir, err := os.MkdirTemp("", "bench-bazel-remote-")
	if err != nil {
		return "", "", nil, err
	}
	port := func() int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	hp, gp := port(), port()
	cmd := exec.Command(*bazelRemote, "--dir", filepath.Join(dir, "cache"), "--max_size", "100", "--host", "127.0.0.1",
		"--port", strconv.Itoa(hp), "--grpc_address", "127.0.0.1:"+strconv.Itoa(gp), "--storage_mode", "uncompressed", "--max_blob_size", strconv.Itoa(128<<20))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait(); os.RemoveAll(dir) }
	base := "http://127.0.0.1:" + strconv.Itoa(hp)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get(base + "/status"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			return "", "", nil, fmt.Errorf("bazel-remote did not answer on %s", base)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "127.0.0.1:" + strconv.Itoa(gp), base, stop, nil
}
