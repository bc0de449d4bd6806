package buildcache_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// TestWriteUploadEndedUnderIt: a Write whose upload another Write of the
// name ended (it sent more than the digest allows) is ABORTED, which a
// client answers by asking the status and starting again, never INTERNAL.
func TestWriteUploadEndedUnderIt(t *testing.T) {
	g := newGRPCCache(t)
	data := bytes.Repeat([]byte("aborted under  "), 200_000)
	name := "inst/uploads/u-2/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	a, err := g.bs.Write(authed())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(&bytestream.WriteRequest{ResourceName: name, Data: data[:1<<20]}); err != nil {
		t.Fatal(err)
	}
	var committed int64
	for committed == 0 {
		q, err := g.bs.QueryWriteStatus(authed(), &bytestream.QueryWriteStatusRequest{ResourceName: name})
		if err == nil {
			committed = q.GetCommittedSize()
		}
		time.Sleep(10 * time.Millisecond) // until a's first chunk commits
	}
	b, err := g.bs.Write(authed())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := send(t, b, &bytestream.WriteRequest{ResourceName: name, WriteOffset: committed, Data: []byte("x")},
		&bytestream.WriteRequest{WriteOffset: committed + 1, Data: make([]byte, len(data))}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a Write past the size = %v, want INVALID_ARGUMENT", err)
	}
	_ = a.Send(&bytestream.WriteRequest{WriteOffset: 1 << 20, Data: data[1<<20 : 2<<20]})
	_ = a.Send(&bytestream.WriteRequest{WriteOffset: 2 << 20, Data: data[2<<20:], FinishWrite: true})
	if _, err := a.CloseAndRecv(); status.Code(err) != codes.Aborted {
		t.Errorf("a Write whose upload ended under it = %v, want ABORTED", err)
	}
}

// TestRefusedFirstMessageLeavesNothing: a Write refused at its first
// message (data past the digest's size, or a resource name too long)
// begins no upload and leaves no ref or blob behind.
func TestRefusedFirstMessageLeavesNothing(t *testing.T) {
	g := newGRPCCache(t)
	small := []byte("tiny")
	for i, inst := range []string{"inst", strings.Repeat("a", 3<<20)} {
		name := inst + "/uploads/u" + strconv.Itoa(i) + "/blobs/" + hexOf(small) + "/4"
		w, err := g.bs.Write(authed())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: []byte("far more than four bytes")}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("refused Write %d = %.200v, want INVALID_ARGUMENT", i, err)
		}
	}
	ctx := context.Background()
	for rf, err := range g.st.Refs.All(ctx, "cache/uploads/") {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("a refused Write left %s (expires %v)", rf.Name, rf.Expiry)
	}
}

// TestWriteRestartedFromZero: a Write from offset 0 starts an upload
// over, as a client that lost its stream may, whatever an earlier Write
// committed of it; a Write still appending to the upload replaced is
// ABORTED at its next message, and never adds to the new one.
func TestWriteRestartedFromZero(t *testing.T) {
	g := newGRPCCache(t)
	data := bytes.Repeat([]byte("started over   "), 200_000)
	name := "inst/uploads/r-1/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	query := func() int64 {
		t.Helper()
		q, err := g.bs.QueryWriteStatus(authed(), &bytestream.QueryWriteStatusRequest{ResourceName: name})
		if err != nil {
			t.Fatalf("QueryWriteStatus = %v", err)
		}
		return q.GetCommittedSize()
	}

	// An interrupted Write, then one from 0 in several messages.
	w, _ := g.bs.Write(authed())
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data[:1<<20]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write closed unfinished = %v", err)
	}
	if n := query(); n != 1<<20 {
		t.Fatalf("committed %d, want %d", n, 1<<20)
	}
	w, _ = g.bs.Write(authed())
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data[:10]},
		&bytestream.WriteRequest{WriteOffset: 10, Data: data[10:2000]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write from 0 closed unfinished = %v", err)
	}
	if n := query(); n != 2000 {
		t.Fatalf("committed %d after a Write from 0, want 2000", n)
	}

	// A Write appending (resumed at 2000) while another starts over.
	a, err := g.bs.Write(authed())
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 2000 + 1<<20 // a store chunk past the upload's 2000 bytes
	if err := a.Send(&bytestream.WriteRequest{ResourceName: name, WriteOffset: 2000, Data: data[2000:chunk]}); err != nil {
		t.Fatal(err)
	}
	for query() != chunk {
		time.Sleep(time.Millisecond) // until a's first chunk commits
	}
	b, err := g.bs.Write(authed())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send(&bytestream.WriteRequest{ResourceName: name, Data: data[:1000]}); err != nil {
		t.Fatal(err)
	}
	for query() != 0 {
		time.Sleep(time.Millisecond) // until b's upload replaces a's
	}
	_ = a.Send(&bytestream.WriteRequest{WriteOffset: chunk, Data: data[chunk : chunk+1<<20]})
	_ = a.Send(&bytestream.WriteRequest{WriteOffset: chunk + 1<<20, Data: data[chunk+1<<20:], FinishWrite: true})
	if _, err := a.CloseAndRecv(); status.Code(err) != codes.Aborted {
		t.Errorf("a Write whose upload was started over = %v, want ABORTED", err)
	}
	if resp, err := send(t, b, &bytestream.WriteRequest{WriteOffset: 1000, Data: data[1000:], FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(data)) {
		t.Fatalf("the Write started over = %v, %v", resp, err)
	}
	got, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))})
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Read = %d bytes, %v", len(got), err)
	}
}

// TestUploadRefKeepsNoName: the ref naming an upload records the upload
// in its annotation and stores nothing of the client's name, and an
// upload named the earlier way (a ref keeping a blob of the name, its
// annotation the bare upload id) still resumes; a ref recording no
// upload names none.
func TestUploadRefKeepsNoName(t *testing.T) {
	g := newGRPCCache(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("named upload "), 100_000)
	id := "inst/uploads/n-1/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	w, _ := g.bs.Write(authed())
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: id + "/meta", Data: data[:1000]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write closed unfinished = %v", err)
	}
	nameKey := blob.KeyOf([]byte(id))
	rf, err := g.st.Refs.Get(ctx, "cache/uploads/"+hexOf([]byte(id)))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := g.st.Blobs.Has(ctx, nameKey); ok || err != nil || rf.Key == nameKey {
		t.Fatalf("the upload's name is stored (%v, %v), its ref keeps %s", ok, err, rf.Key)
	}
	if _, err := blob.ParseUploadID(string(rf.Annotation)); !err {
		t.Fatalf("the upload's ref records %q, not its upload id", rf.Annotation)
	}

	// The earlier way: resumed, and finished.
	old := "inst/uploads/n-2/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	up, err := g.st.Blobs.BeginUpload(ctx, blob.UploadOptions{Owner: "stead build cache"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Append(ctx, bytes.NewReader(data[:500])); err != nil {
		t.Fatal(err)
	}
	k, err := g.st.Blobs.Put(ctx, strings.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.st.Refs.Set(ctx, "cache/uploads/"+hexOf([]byte(old)), k, ref.SetOptions{TTL: time.Hour, Annotation: []byte(up.ID())}); err != nil {
		t.Fatal(err)
	}
	w, _ = g.bs.Write(authed())
	if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: old, WriteOffset: 500, Data: data[500:], FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(data)) {
		t.Fatalf("Write resuming an upload named the earlier way = %v, %v", resp, err)
	}
	if got, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Read = %d bytes, %v", len(got), err)
	}

	// A ref recording what is not an upload names none: NOT_FOUND, and a
	// Write from 0 replaces it.
	other := bytes.Repeat([]byte("unreadable record "), 1000)
	bad := "uploads/n-3/blobs/" + hexOf(other) + "/" + strconv.Itoa(len(other))
	if _, err := g.st.Refs.Set(ctx, "cache/uploads/"+hexOf([]byte(bad)), k, ref.SetOptions{TTL: time.Hour, Annotation: []byte("not an upload record")}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.bs.QueryWriteStatus(authed(), &bytestream.QueryWriteStatusRequest{ResourceName: bad}); status.Code(err) != codes.NotFound {
		t.Fatalf("QueryWriteStatus of an unreadable record = %v, want NOT_FOUND", err)
	}
	w, _ = g.bs.Write(authed())
	if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: bad, Data: other[:10]}, &bytestream.WriteRequest{WriteOffset: 10, Data: other[10:], FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(other)) {
		t.Fatalf("Write from 0 over an unreadable record = %v, %v", resp, err)
	}
}

// TestOneMessageWriteEndsUpload: a Write of the whole blob in one message
// from offset 0 starts over any upload of its name, plain or compressed,
// so that upload ends once the blob is stored: its ref is gone and its
// bytes are released, not held until its lease.
func TestOneMessageWriteEndsUpload(t *testing.T) {
	g := newGRPCCache(t)
	ctx := context.Background()
	for i, c := range []struct {
		what, blobs string
		data        []byte
		sent        func([]byte) []byte
	}{
		{"plain", "blobs", bytes.Repeat([]byte("one message "), 10_000), func(b []byte) []byte { return b }},
		{"zstd", "compressed-blobs/zstd", bytes.Repeat([]byte("one zstd message "), 10_000), func(b []byte) []byte { return compress(t, b) }},
	} {
		name := "inst/uploads/o-" + strconv.Itoa(i) + "/" + c.blobs + "/" + hexOf(c.data) + "/" + strconv.Itoa(len(c.data))
		sent := c.sent(c.data)
		w, _ := g.bs.Write(authed())
		if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: sent[:1000]}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: Write closed unfinished = %v", c.what, err)
		}
		rf, err := g.st.Refs.Get(ctx, "cache/uploads/"+hexOf([]byte(name)))
		if err != nil {
			t.Fatalf("%s: the partial upload's ref: %v", c.what, err)
		}
		w, _ = g.bs.Write(authed())
		if resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: sent, FinishWrite: true}); err != nil || resp.GetCommittedSize() != int64(len(sent)) {
			t.Fatalf("%s: one-message Write = %v, %v", c.what, resp, err)
		}
		if _, err := g.st.Refs.Get(ctx, rf.Name); !errors.Is(err, steaderr.ErrNotFound) {
			t.Errorf("%s: the upload's ref after a one-message Write: %v, want ErrNotFound", c.what, err)
		}
		if _, err := g.st.Blobs.ResumeUpload(ctx, string(rf.Annotation), blob.UploadOptions{Owner: "stead build cache"}); !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("%s: the upload after a one-message Write: %v, want ErrLost", c.what, err)
		}
		if got, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf(c.data) + "/" + strconv.Itoa(len(c.data))}); err != nil || !bytes.Equal(got, c.data) {
			t.Fatalf("%s: Read = %d bytes, %v", c.what, len(got), err)
		}
	}
}

// opCount counts the engine calls of each op.
type opCount struct {
	mu sync.Mutex
	n  map[faultengine.Op]int
}

func (c *opCount) Inject(op faultengine.Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[op]++
	return nil
}

func (c *opCount) InjectAfter(faultengine.Op) error { return nil }

func (c *opCount) take() map[faultengine.Op]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[faultengine.Op]int{}
	return n
}

// TestOneMessageWriteLookupCost: ending an upload of its name costs a
// one-message Write one ref lookup when there is none, and nothing else.
func TestOneMessageWriteLookupCost(t *testing.T) {
	ops := &opCount{n: map[faultengine.Op]int{}}
	st, err := stead.New(context.Background(), faultengine.New(memory.New(), ops))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g := grpcOver(t, st, buildcache.New(st, buildcache.Options{Logger: slog.New(slog.DiscardHandler)}))
	data := []byte("a blob in one message")
	name := "uploads/c-1/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	ops.take()
	w, _ := g.bs.Write(context.Background())
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data, FinishWrite: true}); err != nil {
		t.Fatal(err)
	}
	n := ops.take()
	if n[faultengine.RefGet] != 1 || n[faultengine.RefDelete] != 0 || n[faultengine.BlobAbortUpload] != 0 || n[faultengine.BlobUploadStatus] != 0 {
		t.Errorf("a one-message Write with no upload of its name made %v; want one ref.Get and no upload or delete call", n)
	}
}
