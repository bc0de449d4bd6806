package buildcache_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	neturl "net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// grpcOver serves cache over gRPC without credentials, on an in-memory
// connection.
func grpcOver(t *testing.T, st *stead.Store, cache *buildcache.Cache) *grpcCache {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	gs := cache.GRPC(nil)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &grpcCache{cacheClient: &cacheClient{t: t, st: st, cache: cache}, conn: conn, cas: repb.NewContentAddressableStorageClient(conn), ac: repb.NewActionCacheClient(conn), bs: bytestream.NewByteStreamClient(conn)}
}

// TestByteStreamWriteAcrossServers interrupts a Write on one server and
// resumes it on another over the same PostgreSQL database, which answers
// QueryWriteStatus with what the first committed; an upload abandoned is
// reaped with its lease, and a Write then starts it over; other content
// than the digest's leaves nothing.
func TestByteStreamWriteAcrossServers(t *testing.T) {
	t.Parallel()
	url := pgtest.New(t).StoreURL()
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	var servers [2]*grpcCache
	for i := range servers {
		st, err := stead.Open(context.Background(), url, stead.WithClock(clk.Now), stead.WithUploadLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		servers[i] = grpcOver(t, st, buildcache.New(st, buildcache.Options{Now: clk.Now, Logger: slog.New(slog.DiscardHandler)}))
	}
	a, b := servers[0], servers[1]
	ctx := context.Background()
	data := bytes.Repeat([]byte("durable upload "), 200_000) // 3 MB: three store chunks
	name := "inst/uploads/5f0c-2e/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	query := func(g *grpcCache, name string) (*bytestream.QueryWriteStatusResponse, error) {
		return g.bs.QueryWriteStatus(ctx, &bytestream.QueryWriteStatusRequest{ResourceName: name})
	}

	// Through a: 1.5 chunks sent, the first chunk committed, cancelled.
	wctx, cancel := context.WithCancel(ctx)
	w, err := a.bs.Write(wctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&bytestream.WriteRequest{ResourceName: name, Data: data[:3<<19]}); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := query(b, name)
		if err == nil && st.GetCommittedSize() == 1<<20 {
			break
		}
		if err != nil && status.Code(err) != codes.NotFound {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if st, err := query(b, name); err != nil || st.GetCommittedSize() != 1<<20 || st.GetComplete() {
		t.Fatalf("b's QueryWriteStatus after a's interrupted write = %v, %v", st, err)
	}

	// Through b: resumed from what a was sent (refused), then from the
	// committed size to the end.
	w, _ = b.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, WriteOffset: 3 << 19, Data: data[3<<19:], FinishWrite: true}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("b's Write at the size a was sent = %v", err)
	}
	w, _ = b.bs.Write(ctx)
	if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, WriteOffset: 1 << 20, Data: data[1<<20:], FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(data)) {
		t.Fatalf("b's resumed Write = %v, %v", resp, err)
	}
	if got, err := readAll(t, a, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a's Read of b's upload = %d bytes, %v", len(got), err)
	}
	if st, err := query(a, name); err != nil || !st.GetComplete() {
		t.Fatalf("a's QueryWriteStatus of the finished upload = %v, %v", st, err)
	}

	// An upload abandoned past its lease is reaped; a Write at its old
	// committed size is refused, one from 0 starts it over.
	other := bytes.Repeat([]byte("abandoned "), 50_000)
	oname := "uploads/9a/blobs/" + hexOf(other) + "/" + strconv.Itoa(len(other))
	w, _ = a.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: oname, Data: other[:300_000]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write closed unfinished = %v", err)
	}
	if st, err := query(b, oname); err != nil || st.GetCommittedSize() != 300_000 {
		t.Fatalf("QueryWriteStatus of the unfinished upload = %v, %v", st, err)
	}
	clk.Add(2 * time.Minute)
	if n, err := b.st.Blobs.ReapUploads(ctx); err != nil || n < 1 {
		t.Fatalf("ReapUploads = %d, %v", n, err)
	}
	if _, err := query(b, oname); status.Code(err) != codes.NotFound {
		t.Fatalf("QueryWriteStatus of a reaped upload = %v", err)
	}
	w, _ = b.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: oname, WriteOffset: 300_000, Data: other[300_000:], FinishWrite: true}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write continuing a reaped upload = %v", err)
	}
	w, _ = a.bs.Write(ctx)
	if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: oname, Data: other[:100]}, &bytestream.WriteRequest{WriteOffset: 100, Data: other[100:], FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(other)) {
		t.Fatalf("Write starting a reaped upload over = %v, %v", resp, err)
	}

	// Other content than the digest's discards the upload.
	want := data[:500_000]
	wrong := bytes.ToUpper(want)
	wname := "uploads/w/blobs/" + hexOf(want) + "/500000"
	w, _ = a.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: wname, Data: wrong[:1000]}, &bytestream.WriteRequest{WriteOffset: 1000, Data: wrong[1000:], FinishWrite: true}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write of other content = %v", err)
	}
	if _, err := query(b, wname); status.Code(err) != codes.NotFound {
		t.Fatalf("QueryWriteStatus after a wrong digest = %v", err)
	}
	for _, k := range []blob.Key{blob.KeyOf(wrong), blob.KeyOf(want)} {
		if ok, err := a.st.Blobs.Has(ctx, k); ok || err != nil {
			t.Fatalf("a Write of other content stored %s: %v, %v", k, ok, err)
		}
	}
}

// TestByteStreamWriteTiered resumes plain and zstd Writes on a store with
// a bytes tier, whose appends past the inline limit are bucket objects,
// through a second Store over the same database, and reads them back.
func TestByteStreamWriteTiered(t *testing.T) {
	t.Parallel()
	dir, bucket := t.TempDir(), t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "s.db") + "?bytes=" + neturl.QueryEscape("file://"+filepath.ToSlash(bucket))
	var servers [2]*grpcCache
	for i := range servers {
		st, err := stead.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		servers[i] = grpcOver(t, st, buildcache.New(st, buildcache.Options{Logger: slog.New(slog.DiscardHandler)}))
	}
	a, b := servers[0], servers[1]
	ctx := context.Background()
	data := bytes.Repeat([]byte("tiered upload "), 150_000) // 2.1 MB
	for _, c := range []struct {
		what, name string
		sent       []byte
	}{
		{"plain", "uploads/t1/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data)), data},
		{"zstd", "uploads/t2/compressed-blobs/zstd/" + hexOf(data) + "/" + strconv.Itoa(len(data)), compress(t, data)},
	} {
		if c.what == "zstd" {
			// Stored by the plain Write: stored content is answered at
			// once, so the zstd one names other content.
			data = bytes.Repeat([]byte("tiered zstd upload "), 150_000)
			c.sent = compress(t, data)
			c.name = "uploads/t2/compressed-blobs/zstd/" + hexOf(data) + "/" + strconv.Itoa(len(data))
		}
		half := len(c.sent) / 2
		w, _ := a.bs.Write(ctx)
		if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: c.name, Data: c.sent[:half]}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: Write closed unfinished = %v", c.what, err)
		}
		if st, err := b.bs.QueryWriteStatus(ctx, &bytestream.QueryWriteStatusRequest{ResourceName: c.name}); err != nil || st.GetCommittedSize() != int64(half) {
			t.Fatalf("%s: QueryWriteStatus = %v, %v; want %d", c.what, st, err, half)
		}
		w, _ = b.bs.Write(ctx)
		if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: c.name, WriteOffset: int64(half), Data: c.sent[half:], FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(c.sent)) {
			t.Fatalf("%s: resumed Write = %v, %v", c.what, resp, err)
		}
		if got, err := readAll(t, a, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))}); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: Read = %d bytes, %v", c.what, len(got), err)
		}
	}
}
