package buildcache_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/frontend/buildcache"
)

// nthFault fails the nth call of op once armed, before it reaches the
// engine or, with after, once it took effect.
type nthFault struct {
	mu    sync.Mutex
	op    faultengine.Op
	left  int // calls of op until the one failed; 0: disarmed
	after bool
}

func (f *nthFault) arm(op faultengine.Op, n int, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.op, f.left, f.after = op, n, after
}

func (f *nthFault) fire(op faultengine.Op, after bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left == 0 || op != f.op || after != f.after {
		return nil
	}
	if f.left--; f.left > 0 {
		return nil
	}
	return faultengine.Injected(op)
}

func (f *nthFault) Inject(op faultengine.Op) error      { return f.fire(op, false) }
func (f *nthFault) InjectAfter(op faultengine.Op) error { return f.fire(op, true) }

// faultyGRPC serves a cache with opts over gRPC, on a memory store with
// storeOpts whose calls fault fails.
func faultyGRPC(t *testing.T, fault *nthFault, opts buildcache.Options, storeOpts ...stead.Option) *grpcCache {
	t.Helper()
	st, err := stead.New(context.Background(), faultengine.New(memory.New(), fault), storeOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opts.Logger = slog.New(slog.DiscardHandler)
	return grpcOver(t, st, buildcache.New(st, opts))
}

// TestWriteCommitFaults fails each step of a Write's commit in turn (the
// commit's put, the reads and put of a zstd upload's decoding, the refs
// set and deleted): the Write fails, and then QueryWriteStatus answers
// either the content complete or the whole upload committed, which a
// Write from that offset finishes; the content then reads back.
func TestWriteCommitFaults(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("a commit that fails part-way "), 20_000)
	for i, tc := range []struct {
		zstd  bool
		op    faultengine.Op
		n     int
		after bool
	}{
		{false, faultengine.RefSet, 1, false},
		{false, faultengine.RefSet, 2, false},
		{false, faultengine.BlobPut, 1, false},
		{false, faultengine.BlobPut, 1, true},
		{false, faultengine.RefDelete, 1, false},
		{true, faultengine.RefSet, 1, false},
		{true, faultengine.RefSet, 2, false},
		{true, faultengine.BlobPut, 1, true},
		{true, faultengine.BlobGet, 1, false},
		{true, faultengine.BlobPut, 2, false},
	} {
		what := tc.op + " " + faultengine.Op(strconv.Itoa(tc.n))
		if tc.after {
			what += " after"
		}
		if tc.zstd {
			what = "zstd " + what
		}
		t.Run(string(what), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			fault := &nthFault{}
			g := faultyGRPC(t, fault, buildcache.Options{})
			content := append([]byte(strconv.Itoa(i)), data...)
			sent, kind := content, "blobs/"
			if tc.zstd {
				sent, kind = compress(t, content), "compressed-blobs/zstd/"
			}
			name := "inst/uploads/f" + strconv.Itoa(i) + "/" + kind + hexOf(content) + "/" + strconv.Itoa(len(content))
			half := int64(len(sent) / 2)
			w, _ := g.bs.Write(ctx)
			if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: sent[:half]}); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Write closed unfinished = %v", err)
			}
			fault.arm(tc.op, tc.n, tc.after)
			w, _ = g.bs.Write(ctx)
			resp, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, WriteOffset: half, Data: sent[half:], FinishWrite: true})
			fault.arm("", 0, false)
			if err == nil && tc.op != faultengine.RefDelete {
				t.Fatalf("Write with its commit failing = %v, want an error", resp)
			}
			q, err := g.bs.QueryWriteStatus(ctx, &bytestream.QueryWriteStatusRequest{ResourceName: name})
			if err != nil {
				t.Fatalf("QueryWriteStatus after the fault = %v: the upload is lost", err)
			}
			if !q.GetComplete() {
				if q.GetCommittedSize() != int64(len(sent)) {
					t.Fatalf("QueryWriteStatus after the fault = %v, want %d committed", q, len(sent))
				}
				w, _ = g.bs.Write(ctx)
				if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, WriteOffset: int64(len(sent)), FinishWrite: true}); err != nil {
					t.Fatalf("Write finishing the upload = %v", err)
				}
			}
			got, err := readAll(t, g, &bytestream.ReadRequest{ResourceName: "blobs/" + hexOf(content) + "/" + strconv.Itoa(len(content))})
			if err != nil || !bytes.Equal(got, content) {
				t.Fatalf("Read = %d bytes, %v", len(got), err)
			}
		})
	}
}

// A Write whose content was kept but whose upload ref could not be
// deleted leaves a ref recording a commit begun: the budget counts its
// bytes once, as content, not again as an upload.
func TestFinishedCommitCountedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fault := &nthFault{}
	g := faultyGRPC(t, fault, buildcache.Options{MaxSize: 1 << 30})
	data := bytes.Repeat([]byte("counted once "), 20_000)
	name := "uploads/d-1/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	fault.arm(faultengine.RefDelete, 1, false)
	w, _ := g.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data[:1000]}, &bytestream.WriteRequest{WriteOffset: 1000, Data: data[1000:], FinishWrite: true}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	fault.arm("", 0, false)
	rep, err := g.cache.Evict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Uploads != 0 || rep.Bytes != int64(len(data)) {
		t.Errorf("Evict = %+v, want the %d bytes counted once, as content", rep, len(data))
	}
}

// A commit begun whose upload was reaped before it committed has no
// bytes left: QueryWriteStatus answers NOT_FOUND (the client starts
// over), the budget counts nothing, and a Write from 0 stores it.
func TestCommitBegunUploadReaped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	fault := &nthFault{}
	g := faultyGRPC(t, fault, buildcache.Options{Now: clk.Now, MaxSize: 1 << 30}, stead.WithClock(clk.Now), stead.WithUploadLease(time.Minute))
	data := bytes.Repeat([]byte("reaped mid-commit "), 20_000)
	name := "uploads/rp/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	fault.arm(faultengine.BlobPut, 2, false) // the first put is the upload refs' blob, the second the commit's
	w, _ := g.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data[:1000]}, &bytestream.WriteRequest{WriteOffset: 1000, Data: data[1000:], FinishWrite: true}); err == nil {
		t.Fatal("Write with its commit failing succeeded")
	}
	fault.arm("", 0, false)
	clk.Add(2 * time.Minute)
	if n, err := g.st.Blobs.ReapUploads(ctx); err != nil || n != 1 {
		t.Fatalf("ReapUploads = %d, %v; want 1", n, err)
	}
	q, err := g.bs.QueryWriteStatus(ctx, &bytestream.QueryWriteStatusRequest{ResourceName: name})
	if status.Code(err) != codes.NotFound {
		t.Errorf("QueryWriteStatus after the reap = %v, %v; want NOT_FOUND", q, err)
	}
	if rep, err := g.cache.Evict(ctx); err != nil || rep.Uploads != 0 {
		t.Errorf("Evict = %+v, %v; want no upload bytes", rep, err)
	}
	w, _ = g.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data, FinishWrite: true}); err != nil {
		t.Fatalf("Write from 0: %v", err)
	}
}
