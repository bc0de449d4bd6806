package buildcache_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server/access"
)

// grpcCache is a build cache served over HTTP and gRPC at once.
type grpcCache struct {
	*cacheClient
	conn *grpc.ClientConn
	cas  repb.ContentAddressableStorageClient
	ac   repb.ActionCacheClient
	bs   bytestream.ByteStreamClient
}

// newGRPCCache serves newCache's cache over gRPC too, behind the same
// token, on an in-memory connection.
func newGRPCCache(t *testing.T) *grpcCache {
	t.Helper()
	c := newCacheSized(t, time.Hour, 4<<20)
	ln := bufconn.Listen(1 << 20)
	gs := c.cache.GRPC(func(header, _, action string) error {
		switch {
		case header == "Bearer tok":
			return nil
		case header == "Bearer reader" && action == access.Read:
			return nil
		case header == "Bearer reader":
			return access.ErrDenied
		}
		return access.ErrUnauthenticated
	})
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &grpcCache{cacheClient: c, conn: conn, cas: repb.NewContentAddressableStorageClient(conn), ac: repb.NewActionCacheClient(conn), bs: bytestream.NewByteStreamClient(conn)}
}

func authed() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok")
}

func digestOf(b []byte) *repb.Digest { return &repb.Digest{Hash: hexOf(b), SizeBytes: int64(len(b))} }

func (g *grpcCache) upload(blobs ...[]byte) {
	g.t.Helper()
	req := &repb.BatchUpdateBlobsRequest{}
	for _, b := range blobs {
		req.Requests = append(req.Requests, &repb.BatchUpdateBlobsRequest_Request{Digest: digestOf(b), Data: b})
	}
	resp, err := g.cas.BatchUpdateBlobs(authed(), req)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, r := range resp.GetResponses() {
		if r.GetStatus().GetCode() != 0 {
			g.t.Fatalf("BatchUpdateBlobs %s: %v", r.GetDigest().GetHash(), r.GetStatus())
		}
	}
}

func TestGRPCCapabilitiesAndAuth(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	caps, err := repb.NewCapabilitiesClient(g.conn).GetCapabilities(authed(), &repb.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cc := caps.GetCacheCapabilities()
	if len(cc.GetDigestFunctions()) != 1 || cc.GetDigestFunctions()[0] != repb.DigestFunction_SHA256 || cc.GetMaxBatchTotalSizeBytes() != 4<<20 || !cc.GetActionCacheUpdateCapabilities().GetUpdateEnabled() {
		t.Fatalf("capabilities = %v", caps)
	}
	for _, ctx := range []context.Context{context.Background(), metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer wrong")} {
		_, err := g.cas.FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{BlobDigests: []*repb.Digest{digestOf([]byte("x"))}})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("FindMissingBlobs without the token = %v", err)
		}
		rd, err := g.bs.Read(ctx, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf([]byte("x")) + "/1"})
		if err == nil {
			_, err = rd.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Read without the token = %v", err)
		}
	}
	reader := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer reader")
	if _, err := g.cas.FindMissingBlobs(reader, &repb.FindMissingBlobsRequest{BlobDigests: []*repb.Digest{digestOf([]byte("x"))}}); err != nil {
		t.Fatalf("FindMissingBlobs by a reader = %v", err)
	}
	_, err = g.cas.BatchUpdateBlobs(reader, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: digestOf([]byte("x")), Data: []byte("x")}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("BatchUpdateBlobs by a reader = %v, want PermissionDenied", err)
	}
}

// TestGRPCAndHTTPShareEntries writes over each protocol and reads over
// the other.
func TestGRPCAndHTTPShareEntries(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	ctx := authed()
	viaGRPC, viaHTTP := []byte("put over gRPC"), []byte("put over HTTP")
	g.upload(viaGRPC)
	if status, body := g.do("PUT", "/cache/cas/"+hexOf(viaHTTP), viaHTTP); status != 200 {
		t.Fatalf("PUT cas = %d %s", status, body)
	}
	missing, err := g.cas.FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{BlobDigests: []*repb.Digest{digestOf(viaGRPC), digestOf(viaHTTP), digestOf([]byte("absent")), digestOf(nil)}})
	if err != nil || len(missing.GetMissingBlobDigests()) != 1 || missing.GetMissingBlobDigests()[0].GetHash() != hexOf([]byte("absent")) {
		t.Fatalf("FindMissingBlobs = %v, %v", missing, err)
	}
	if status, body := g.do("GET", "/cache/cas/"+hexOf(viaGRPC), nil); status != 200 || !bytes.Equal(body, viaGRPC) {
		t.Fatalf("GET cas of a gRPC upload = %d %q", status, body)
	}
	read, err := g.cas.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{Digests: []*repb.Digest{digestOf(viaHTTP), digestOf([]byte("absent"))}})
	if err != nil || len(read.GetResponses()) != 2 || !bytes.Equal(read.GetResponses()[0].GetData(), viaHTTP) || codes.Code(read.GetResponses()[1].GetStatus().GetCode()) != codes.NotFound {
		t.Fatalf("BatchReadBlobs = %v, %v", read, err)
	}

	// An action result put over gRPC is read over HTTP, and back.
	res := &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "out", Digest: digestOf(viaHTTP)}}, StdoutDigest: digestOf(viaGRPC), ExitCode: 3}
	action := digestOf([]byte("action 1"))
	if _, err := g.ac.UpdateActionResult(ctx, &repb.UpdateActionResultRequest{ActionDigest: action, ActionResult: res}); err != nil {
		t.Fatal(err)
	}
	status, body := g.do("GET", "/cache/ac/"+action.GetHash(), nil)
	var got repb.ActionResult
	if status != 200 || proto.Unmarshal(body, &got) != nil || !proto.Equal(&got, res) {
		t.Fatalf("GET ac of a gRPC result = %d %v", status, &got)
	}
	action2 := hexOf([]byte("action 2"))
	if status, body := g.do("PUT", "/cache/ac/"+action2, body); status != 200 {
		t.Fatalf("PUT ac = %d %s", status, body)
	}
	back, err := g.ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: &repb.Digest{Hash: action2, SizeBytes: 8}})
	if err != nil || !proto.Equal(back, res) {
		t.Fatalf("GetActionResult of an HTTP result = %v, %v", back, err)
	}
	// A ccache entry is not an ActionResult: not found over gRPC.
	if status, _ := g.do("PUT", "/cache/ac/"+hexOf([]byte("cc")), []byte("ccache entry")); status != 200 {
		t.Fatal(status)
	}
	if _, err := g.ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: &repb.Digest{Hash: hexOf([]byte("cc")), SizeBytes: 2}}); codes.NotFound != grpcCode(err) {
		t.Fatalf("GetActionResult of a ccache entry = %v", err)
	}
}

func grpcCode(err error) codes.Code { return status.Code(err) }

// TestGRPCActionResultCompleteness refuses a result naming missing
// outputs, down to the files of an output directory's tree, and keeps a
// stored result's outputs as its children.
func TestGRPCActionResultCompleteness(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	ctx := authed()
	file, inTree, sub := []byte("file"), []byte("file in a tree"), []byte("file in a subdirectory")
	tree := &repb.Tree{
		Root:     &repb.Directory{Files: []*repb.FileNode{{Name: "a", Digest: digestOf(inTree)}}},
		Children: []*repb.Directory{{Files: []*repb.FileNode{{Name: "b", Digest: digestOf(sub)}}}},
	}
	treeBytes, err := proto.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	res := &repb.ActionResult{
		OutputFiles:       []*repb.OutputFile{{Path: "f", Digest: digestOf(file)}},
		OutputDirectories: []*repb.OutputDirectory{{Path: "d", TreeDigest: digestOf(treeBytes)}},
	}
	action := digestOf([]byte("action"))
	update := func() error {
		_, err := g.ac.UpdateActionResult(ctx, &repb.UpdateActionResultRequest{ActionDigest: action, ActionResult: res})
		return err
	}
	wantMissing := func(step string, blobs ...[]byte) {
		t.Helper()
		err := update()
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s: UpdateActionResult = %v; want FAILED_PRECONDITION", step, err)
		}
		var subjects []string
		for _, d := range status.Convert(err).Details() {
			for _, v := range d.(*errdetails.PreconditionFailure).GetViolations() {
				if v.GetType() != "MISSING" {
					t.Fatalf("violation %v", v)
				}
				subjects = append(subjects, v.GetSubject())
			}
		}
		var want []string
		for _, b := range blobs {
			want = append(want, "blobs/"+hexOf(b)+"/"+strconv.Itoa(len(b)))
		}
		if strings.Join(subjects, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: missing %v; want %v", step, subjects, want)
		}
		if _, err := g.ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: action}); status.Code(err) != codes.NotFound {
			t.Fatalf("%s: GetActionResult after a refused update = %v", step, err)
		}
	}
	wantMissing("nothing stored", file, treeBytes)
	g.upload(file, treeBytes)
	wantMissing("the tree's files missing", inTree, sub)
	g.upload(inTree, sub)
	if err := update(); err != nil {
		t.Fatal(err)
	}
	got, err := g.ac.GetActionResult(ctx, &repb.GetActionResultRequest{ActionDigest: action})
	if err != nil || !proto.Equal(got, res) {
		t.Fatalf("GetActionResult = %v, %v", got, err)
	}
	for _, b := range [][]byte{file, treeBytes, inTree, sub} {
		ex, err := g.st.GC.Explain(context.Background(), blob.KeyOf(b))
		if err != nil || len(ex.Parents) != 1 {
			t.Fatalf("output %q's parents = %v, %v; want the result", b, ex.Parents, err)
		}
	}
}

func TestGRPCHostileBatches(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	ctx := authed()
	data := []byte("content")
	resp, err := g.cas.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{
		{Digest: &repb.Digest{Hash: hexOf(data), SizeBytes: 6}, Data: data},        // wrong size
		{Digest: &repb.Digest{Hash: hexOf([]byte("x")), SizeBytes: 7}, Data: data}, // wrong hash
		{Digest: &repb.Digest{Hash: "zz", SizeBytes: 7}, Data: data},
		{Digest: &repb.Digest{Hash: hexOf(data), SizeBytes: -7}, Data: data},
		{Digest: digestOf(data), Data: data, Compressor: repb.Compressor_ZSTD},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResponses() {
		if codes.Code(r.GetStatus().GetCode()) != codes.InvalidArgument {
			t.Errorf("hostile update %d = %v; want INVALID_ARGUMENT", i, r.GetStatus())
		}
	}
	big := make([]byte, 4<<20)
	_, err = g.cas.BatchUpdateBlobs(ctx, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{
		{Digest: digestOf(big), Data: big}, {Digest: digestOf(data), Data: data},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a batch over the limit = %v; want INVALID_ARGUMENT", err)
	}
	_, err = g.cas.BatchReadBlobs(ctx, &repb.BatchReadBlobsRequest{Digests: []*repb.Digest{{Hash: hexOf(big), SizeBytes: 4 << 20}, digestOf(data)}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a read batch over the limit = %v; want INVALID_ARGUMENT", err)
	}
	if _, err := g.cas.FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{BlobDigests: []*repb.Digest{{Hash: "ABC"}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("FindMissingBlobs of a bad digest = %v", err)
	}
	if _, err := g.cas.FindMissingBlobs(ctx, &repb.FindMissingBlobsRequest{DigestFunction: repb.DigestFunction_SHA1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("FindMissingBlobs of SHA1 = %v", err)
	}
	if _, err := g.ac.UpdateActionResult(ctx, &repb.UpdateActionResultRequest{ActionDigest: digestOf(data), ActionResult: &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Digest: &repb.Digest{Hash: "nope"}}}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("UpdateActionResult naming a bad digest = %v", err)
	}
	if page, err := g.st.Refs.List(context.Background(), "", "", 10); err != nil || len(page) != 0 {
		t.Fatalf("refs after refused requests: %v, %v", page, err)
	}
}

func readAll(t *testing.T, g *grpcCache, req *bytestream.ReadRequest) ([]byte, error) {
	t.Helper()
	rd, err := g.bs.Read(authed(), req)
	if err != nil {
		return nil, err
	}
	var out []byte
	for {
		m, err := rd.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m.GetData()...)
	}
}

func TestByteStreamRead(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	data := bytes.Repeat([]byte("0123456789"), 300_000) // over a read chunk
	if status, body := g.do("PUT", "/cache/cas/"+hexOf(data), data); status != 200 {
		t.Fatalf("PUT cas = %d %s", status, body)
	}
	name := "inst/x/blobs/" + hexOf(data) + "/" + "3000000"
	for _, tc := range []struct {
		off, limit int64
		want       []byte
	}{{0, 0, data}, {5, 0, data[5:]}, {1<<20 + 3, 10, data[1<<20+3 : 1<<20+13]}, {1<<20 - 5, 10, data[1<<20-5 : 1<<20+5]},
		{1, 2<<20 - 1, data[1 : 2<<20]}, {2 << 20, 1 << 30, data[2<<20:]}, {3000000, 0, nil}} {
		got, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: name, ReadOffset: tc.off, ReadLimit: tc.limit})
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Fatalf("Read at %d limit %d = %d bytes, %v", tc.off, tc.limit, len(got), err)
		}
	}
	for _, tc := range []struct {
		name       string
		off, limit int64
		code       codes.Code
	}{
		{"blobs/" + hexOf(data), 0, 0, codes.InvalidArgument},
		{"blobs/" + hexOf(data) + "/-3", 0, 0, codes.InvalidArgument},
		{"blobs/" + hexOf(data) + "/03000000", 0, 0, codes.InvalidArgument},
		{"blobs/" + strings.ToUpper(hexOf(data)) + "/3000000", 0, 0, codes.InvalidArgument},
		{"compressed-blobs/deflate/" + hexOf(data) + "/3000000", 0, 0, codes.InvalidArgument},
		{"compressed-blobs/zstd/" + hexOf(data), 0, 0, codes.InvalidArgument},
		{"uploads/u/blobs/" + hexOf(data) + "/3000000", 0, 0, codes.InvalidArgument},
		{"blobs/" + hexOf(data) + "/2999999", 0, 0, codes.NotFound}, // not its size
		{"blobs/" + hexOf([]byte("absent")) + "/6", 0, 0, codes.NotFound},
	} {
		if _, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: tc.name, ReadOffset: tc.off, ReadLimit: tc.limit}); status.Code(err) != tc.code {
			t.Errorf("Read %q at %d limit %d = %v; want %v", tc.name, tc.off, tc.limit, err, tc.code)
		}
	}
}

// TestByteStreamReadRange: a Read's range is checked as the ByteStream
// contract says, for a blob and its zstd compression alike, stored or
// not: a negative read_offset, or one past the size (the compressed size
// for zstd), is OUT_OF_RANGE, a negative read_limit INVALID_ARGUMENT.
func TestByteStreamReadRange(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	data := bytes.Repeat([]byte("ranges "), 1000)
	g.upload(data)
	plain := "inst/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	zstd := "inst/compressed-blobs/zstd/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	whole, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: zstd})
	if err != nil {
		t.Fatal(err)
	}
	absent := []byte("absent content")
	for _, tc := range []struct {
		name       string
		off, limit int64
		code       codes.Code
	}{
		{plain, -1, 0, codes.OutOfRange},
		{plain, -1, -1, codes.OutOfRange},
		{plain, 0, -1, codes.InvalidArgument},
		{plain, int64(len(data)) + 1, 0, codes.OutOfRange},
		{plain, int64(len(data)), 0, codes.OK},
		{zstd, -1, 0, codes.OutOfRange},
		{zstd, -1, -1, codes.OutOfRange},
		{zstd, 0, -1, codes.InvalidArgument},
		{zstd, int64(len(whole)) + 1, 0, codes.OutOfRange},
		{zstd, int64(len(whole)), 0, codes.OK},
		{"blobs/" + hexOf(absent) + "/14", -1, 0, codes.OutOfRange},
		{"blobs/" + hexOf(absent) + "/14", 0, -1, codes.InvalidArgument},
		{"blobs/" + hexOf(absent) + "/14", 15, 0, codes.OutOfRange},
		{"compressed-blobs/zstd/" + hexOf(absent) + "/14", -1, 0, codes.OutOfRange},
		{"compressed-blobs/zstd/" + hexOf(absent) + "/14", 0, -1, codes.InvalidArgument},
	} {
		got, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: tc.name, ReadOffset: tc.off, ReadLimit: tc.limit})
		if status.Code(err) != tc.code || (err == nil && len(got) != 0) {
			t.Errorf("Read %.60q at %d limit %d = %d bytes, %v; want %v", tc.name, tc.off, tc.limit, len(got), err, tc.code)
		}
	}
}

func send(t *testing.T, w bytestream.ByteStream_WriteClient, reqs ...*bytestream.WriteRequest) (*bytestream.WriteResponse, error) {
	t.Helper()
	for _, r := range reqs {
		if err := w.Send(r); err != nil {
			break // the answer says why
		}
	}
	return w.CloseAndRecv()
}

func TestByteStreamWrite(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	data := bytes.Repeat([]byte("abcdefgh"), 100_000)
	name := "inst/uploads/6b1e2c1f-aaaa/blobs/" + hexOf(data) + "/800000/meta/data"
	query := func() (*bytestream.QueryWriteStatusResponse, error) {
		return g.bs.QueryWriteStatus(authed(), &bytestream.QueryWriteStatusRequest{ResourceName: name})
	}
	if _, err := query(); status.Code(err) != codes.NotFound {
		t.Fatalf("QueryWriteStatus before any write = %v", err)
	}

	// A Write from another offset than 0 has no upload to continue.
	w, err := g.bs.Write(authed())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, WriteOffset: 10, Data: data[10:20]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a first Write at offset 10 = %v", err)
	}

	// A first Write sends half and closes unfinished: what it sent is
	// committed.
	w, _ = g.bs.Write(authed())
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data[:400_000]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write closed before finish_write = %v", err)
	}
	if st, err := query(); err != nil || st.GetCommittedSize() != 400_000 || st.GetComplete() {
		t.Fatalf("QueryWriteStatus after an interrupted write = %v, %v", st, err)
	}

	// A second is cancelled within a store chunk: none of it is
	// committed.
	ctx, cancel := context.WithCancel(authed())
	w, err = g.bs.Write(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Send(&bytestream.WriteRequest{ResourceName: name, WriteOffset: 400_000, Data: data[400_000:500_000]}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if st, err := query(); err != nil || st.GetCommittedSize() != 400_000 {
		t.Fatalf("QueryWriteStatus after a cancelled write = %v, %v", st, err)
	}

	// Resuming from the wrong offset is refused, and keeps the upload.
	w, _ = g.bs.Write(authed())
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, WriteOffset: 300_000, Data: data[300_000:]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write at a wrong offset = %v", err)
	}
	if st, err := query(); err != nil || st.GetCommittedSize() != 400_000 {
		t.Fatalf("QueryWriteStatus after a refused write = %v, %v", st, err)
	}

	// Resumed rightly.
	w, _ = g.bs.Write(authed())
	resp, err := send(t, w,
		&bytestream.WriteRequest{ResourceName: name, WriteOffset: 400_000, Data: data[400_000:600_000]},
		&bytestream.WriteRequest{WriteOffset: 600_000, Data: data[600_000:], FinishWrite: true})
	if err != nil || resp.GetCommittedSize() != 800_000 {
		t.Fatalf("resumed Write = %v, %v", resp, err)
	}
	if st, err := query(); err != nil || !st.GetComplete() || st.GetCommittedSize() != 800_000 {
		t.Fatalf("QueryWriteStatus after the write = %v, %v", st, err)
	}
	if status, body := g.do("GET", "/cache/cas/"+hexOf(data), nil); status != 200 || !bytes.Equal(body, data) {
		t.Fatalf("GET cas of a ByteStream upload = %d", status)
	}
	// Content in the cache is answered at once.
	w, _ = g.bs.Write(authed())
	if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: "uploads/other/blobs/" + hexOf(data) + "/800000", Data: data[:10]}); err != nil || resp.GetCommittedSize() != 800_000 {
		t.Fatalf("Write of cached content = %v, %v", resp, err)
	}

	other := []byte("some other content")
	oname := "uploads/u2/blobs/" + hexOf(other) + "/18"
	for _, tc := range []struct {
		what string
		reqs []*bytestream.WriteRequest
	}{
		{"more than its size", []*bytestream.WriteRequest{{ResourceName: oname, Data: append(other, 'x'), FinishWrite: true}}},
		{"finished short", []*bytestream.WriteRequest{{ResourceName: oname, Data: other[:5], FinishWrite: true}}},
		{"not its digest", []*bytestream.WriteRequest{{ResourceName: oname, Data: bytes.ToUpper(other), FinishWrite: true}}},
		{"a name changed", []*bytestream.WriteRequest{{ResourceName: oname, Data: other[:5]}, {ResourceName: "uploads/u3/blobs/" + hexOf(other) + "/18", WriteOffset: 5, Data: other[5:], FinishWrite: true}}},
		{"a read name", []*bytestream.WriteRequest{{ResourceName: "blobs/" + hexOf(other) + "/18", Data: other, FinishWrite: true}}},
		{"no uuid", []*bytestream.WriteRequest{{ResourceName: "uploads//blobs/" + hexOf(other) + "/18", Data: other, FinishWrite: true}}},
		{"a negative size", []*bytestream.WriteRequest{{ResourceName: "uploads/u/blobs/" + hexOf(other) + "/-18", Data: other, FinishWrite: true}}},
		{"over the largest blob", []*bytestream.WriteRequest{{ResourceName: "uploads/u/blobs/" + hexOf(other) + "/5000000", Data: other, FinishWrite: true}}},
	} {
		w, err := g.bs.Write(authed())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := send(t, w, tc.reqs...); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Write %s = %v; want INVALID_ARGUMENT", tc.what, err)
		}
	}
	if ok, err := g.st.Blobs.Has(context.Background(), blob.KeyOf(other)); ok || err != nil {
		t.Fatalf("refused writes stored the content: %v, %v", ok, err)
	}
}

func TestGetTree(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	leaf := &repb.Directory{Files: []*repb.FileNode{{Name: "f", Digest: digestOf([]byte("f"))}}}
	leafBytes, _ := proto.Marshal(leaf)
	absent := &repb.Directory{Files: []*repb.FileNode{{Name: "g"}}}
	absentBytes, _ := proto.Marshal(absent)
	root := &repb.Directory{Directories: []*repb.DirectoryNode{{Name: "a", Digest: digestOf(leafBytes)}, {Name: "b", Digest: digestOf(leafBytes)}, {Name: "c", Digest: digestOf(absentBytes)}}}
	rootBytes, _ := proto.Marshal(root)
	g.upload(leafBytes, rootBytes)
	stream, err := g.cas.GetTree(authed(), &repb.GetTreeRequest{RootDigest: digestOf(rootBytes), PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []*repb.Directory
	for {
		page, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(page.GetDirectories()) > 1 {
			t.Fatalf("a page of %d with page_size 1", len(page.GetDirectories()))
		}
		got = append(got, page.GetDirectories()...)
	}
	if len(got) != 2 || !proto.Equal(got[0], root) || !proto.Equal(got[1], leaf) {
		t.Fatalf("GetTree = %v", got)
	}
	stream, err = g.cas.GetTree(authed(), &repb.GetTreeRequest{RootDigest: digestOf(absentBytes)})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("GetTree of an absent root = %v", err)
	}
}

// TestManyOutputsKeptTogether stores a result naming more outputs than
// one blob may reference: list blobs keep them, and the result keeps the
// lists.
func TestManyOutputsKeptTogether(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	res := &repb.ActionResult{}
	var batch [][]byte
	for i := range blob.MaxChildren + 1 {
		b := []byte("output " + strconv.Itoa(i))
		batch = append(batch, b)
		res.OutputFiles = append(res.OutputFiles, &repb.OutputFile{Path: strconv.Itoa(i), Digest: digestOf(b)})
		if len(batch) == 2000 || i == blob.MaxChildren {
			g.upload(batch...)
			batch = nil
		}
	}
	action := digestOf([]byte("big action"))
	for range 2 { // a second put declares the same children
		if _, err := g.ac.UpdateActionResult(authed(), &repb.UpdateActionResultRequest{ActionDigest: action, ActionResult: res}); err != nil {
			t.Fatal(err)
		}
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []*repb.OutputFile{res.OutputFiles[0], res.OutputFiles[blob.MaxChildren]} {
		k, _ := blob.ParseKey("sha256:" + out.GetDigest().GetHash())
		ex, err := g.st.GC.Explain(context.Background(), k)
		if err != nil || len(ex.Parents) != 1 {
			t.Fatalf("output %s's parents = %v, %v; want a list", out.GetPath(), ex.Parents, err)
		}
		list, err := g.st.GC.Explain(context.Background(), ex.Parents[0])
		if err != nil || len(list.Parents) != 1 || list.Parents[0] != blob.KeyOf(body) {
			t.Fatalf("list's parents = %v, %v; want the result", list.Parents, err)
		}
	}
	if got, err := g.ac.GetActionResult(authed(), &repb.GetActionResultRequest{ActionDigest: action}); err != nil || len(got.GetOutputFiles()) != blob.MaxChildren+1 {
		t.Fatalf("GetActionResult = %d outputs, %v", len(got.GetOutputFiles()), err)
	}
}

// TestGRPCOnSQL runs a build's round trip over gRPC against SQLite and
// PostgreSQL: blobs in by batch and by ByteStream, a result, then all of
// them read back.
func TestGRPCOnSQL(t *testing.T) {
	t.Parallel()
	for _, e := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "s.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.New(t).StoreURL() }},
	} {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			st, _ := serveCache(t, e.url(t), "", buildcache.Options{})
			g := grpcOver(t, st, buildcache.New(st, buildcache.Options{}))
			small := []byte("stdout of the action")
			large := bytes.Repeat([]byte("large output "), 200_000) // chunked in the store
			g.upload(small)
			w, err := g.bs.Write(authed())
			if err != nil {
				t.Fatal(err)
			}
			name := "uploads/1/blobs/" + hexOf(large) + "/" + strconv.Itoa(len(large))
			if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: large[:1<<20]}, &bytestream.WriteRequest{WriteOffset: 1 << 20, Data: large[1<<20:], FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(large)) {
				t.Fatalf("Write = %v, %v", resp, err)
			}
			res := &repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "big", Digest: digestOf(large)}}, StdoutDigest: digestOf(small)}
			action := digestOf([]byte("sql action"))
			if _, err := g.ac.UpdateActionResult(authed(), &repb.UpdateActionResultRequest{ActionDigest: action, ActionResult: res}); err != nil {
				t.Fatal(err)
			}
			got, err := g.ac.GetActionResult(authed(), &repb.GetActionResultRequest{ActionDigest: action})
			if err != nil || !proto.Equal(got, res) {
				t.Fatalf("GetActionResult = %v, %v", got, err)
			}
			data, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf(large) + "/" + strconv.Itoa(len(large)), ReadOffset: 7})
			if err != nil || !bytes.Equal(data, large[7:]) {
				t.Fatalf("Read = %d bytes, %v", len(data), err)
			}
		})
	}
}

// TestByteStreamReadCancelled cancels a Read after its first answer; the
// cache serves the next read whole.
func TestByteStreamReadCancelled(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	data := bytes.Repeat([]byte("z"), 3<<20)
	w, err := g.bs.Write(authed())
	if err != nil {
		t.Fatal(err)
	}
	name := hexOf(data) + "/" + strconv.Itoa(len(data))
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: "uploads/c/blobs/" + name, Data: data, FinishWrite: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(authed())
	rd, err := g.bs.Read(ctx, &bytestream.ReadRequest{ResourceName: "blobs/" + name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	for err == nil {
		_, err = rd.Recv()
	}
	if status.Code(err) != codes.Canceled {
		t.Fatalf("a cancelled Read ended with %v", err)
	}
	if got, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "blobs/" + name}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Read after a cancelled one = %d bytes, %v", len(got), err)
	}
}
