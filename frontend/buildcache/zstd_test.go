package buildcache_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/steadkit/stead/blob"
)

func compress(t *testing.T, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

func decompress(t *testing.T, b []byte) []byte {
	t.Helper()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	out, err := dec.DecodeAll(b, nil)
	if err != nil {
		t.Fatalf("the cache's zstd does not decode: %v", err)
	}
	return out
}

// TestByteStreamZstd announces zstd, takes a compressed Write (resumed
// halfway) as the blob it decodes to, serves it compressed from an
// offset, and refuses streams that do not decode, decode to other
// content, or to another size, storing nothing.
func TestByteStreamZstd(t *testing.T) {
	t.Parallel()
	g := newGRPCCache(t)
	caps, err := repb.NewCapabilitiesClient(g.conn).GetCapabilities(authed(), &repb.GetCapabilitiesRequest{})
	if err != nil || len(caps.GetCacheCapabilities().GetSupportedCompressors()) != 1 || caps.GetCacheCapabilities().GetSupportedCompressors()[0] != repb.Compressor_ZSTD ||
		len(caps.GetCacheCapabilities().GetSupportedBatchUpdateCompressors()) != 0 {
		t.Fatalf("capabilities = %v, %v; want zstd in ByteStream only", caps, err)
	}
	data := bytes.Repeat([]byte("zstd compresses this well. "), 40_000)
	z := compress(t, data)
	size := len(data)
	name := func(uuid string, b []byte, n int) string {
		return "inst/uploads/" + uuid + "/compressed-blobs/zstd/" + hexOf(b) + "/" + strconv.Itoa(n)
	}
	w, err := g.bs.Write(authed())
	if err != nil {
		t.Fatal(err)
	}
	half := len(z) / 2
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name("u1", data, size), Data: z[:half]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write closed unfinished = %v", err)
	}
	st, err := g.bs.QueryWriteStatus(authed(), &bytestream.QueryWriteStatusRequest{ResourceName: name("u1", data, size)})
	if err != nil || st.GetCommittedSize() != int64(half) {
		t.Fatalf("QueryWriteStatus = %v, %v; want %d compressed bytes", st, err, half)
	}
	w, _ = g.bs.Write(authed())
	resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: name("u1", data, size), WriteOffset: int64(half), Data: z[half:], FinishWrite: true})
	if err != nil || resp.GetCommittedSize() != int64(len(z)) {
		t.Fatalf("resumed compressed Write = %v, %v; want %d", resp, err, len(z))
	}
	if status, body := g.do("GET", "/cache/cas/"+hexOf(data), nil); status != 200 || !bytes.Equal(body, data) {
		t.Fatalf("GET cas of the compressed upload = %d, %d bytes", status, len(body))
	}
	// Again: already stored, answered at once with -1.
	w, _ = g.bs.Write(authed())
	if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: name("u2", data, size), Data: z, FinishWrite: true}); err != nil || resp.GetCommittedSize() != -1 {
		t.Fatalf("compressed Write of stored content = %v, %v; want -1", resp, err)
	}

	read := "inst/compressed-blobs/zstd/" + hexOf(data) + "/" + strconv.Itoa(size)
	whole, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: read})
	if err != nil || !bytes.Equal(decompress(t, whole), data) {
		t.Fatalf("compressed Read = %d bytes, %v", len(whole), err)
	}
	part, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: read, ReadOffset: 3, ReadLimit: 10})
	if err != nil || !bytes.Equal(part, whole[3:13]) {
		t.Fatalf("compressed Read at 3 limit 10 = %q, %v; want %q", part, err, whole[3:13])
	}
	if _, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: read, ReadOffset: int64(len(whole)) + 1}); status.Code(err) != codes.OutOfRange {
		t.Fatalf("compressed Read past its end = %v", err)
	}
	if _, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "compressed-blobs/zstd/" + hexOf([]byte("absent")) + "/6"}); status.Code(err) != codes.NotFound {
		t.Fatalf("compressed Read of absent content = %v", err)
	}
	empty, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "compressed-blobs/zstd/" + hexOf(nil) + "/0"})
	if err != nil || len(decompress(t, empty)) != 0 {
		t.Fatalf("compressed Read of the empty blob = %v", err)
	}

	other := []byte("other content")
	for _, c := range []struct {
		what, name string
		data       []byte
	}{
		{"not zstd", name("u3", other, len(other)), []byte("plainly not a zstd frame at all")},
		{"other content", name("u4", other, len(other)), compress(t, []byte("other contenT"))},
		{"a longer size", name("u5", other, len(other)+1), compress(t, other)},
		{"over the bound", name("u6", other, len(other)), bytes.Repeat([]byte{0}, 70<<10)},
		{"another compressor", "uploads/u7/compressed-blobs/deflate/" + hexOf(other) + "/13", compress(t, other)},
	} {
		w, _ := g.bs.Write(authed())
		if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: c.name, Data: c.data, FinishWrite: true}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("compressed Write of %s = %v; want InvalidArgument", c.what, err)
		}
	}
	if ok, _ := g.st.Blobs.Has(context.Background(), blob.KeyOf(other)); ok {
		t.Fatal("a refused compressed Write stored its content")
	}
}
