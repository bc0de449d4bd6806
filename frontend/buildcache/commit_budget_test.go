package buildcache_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
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

// A Write whose content was kept but whose upload ref could not be
// deleted leaves a ref recording a commit begun: the budget counts its
// bytes once, as content, not again as an upload.
func TestFinishedCommitCountedOnce(t *testing.T) {
	ctx := context.Background()
	fault := &nthFault{}
	st, err := stead.New(ctx, faultengine.New(memory.New(), fault))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cache := buildcache.New(st, buildcache.Options{MaxSize: 1 << 30, Logger: slog.New(slog.DiscardHandler)})
	g := grpcOver(t, st, cache)
	data := bytes.Repeat([]byte("counted once "), 20_000)
	name := "uploads/d-1/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	fault.arm(faultengine.RefDelete, 1, false)
	w, _ := g.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data[:1000]}, &bytestream.WriteRequest{WriteOffset: 1000, Data: data[1000:], FinishWrite: true}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	fault.arm("", 0, false)
	rep, err := cache.Evict(ctx)
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
	ctx := context.Background()
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	fault := &nthFault{}
	st, err := stead.New(ctx, faultengine.New(memory.New(), fault), stead.WithClock(clk.Now), stead.WithUploadLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cache := buildcache.New(st, buildcache.Options{Now: clk.Now, MaxSize: 1 << 30, Logger: slog.New(slog.DiscardHandler)})
	g := grpcOver(t, st, cache)
	data := bytes.Repeat([]byte("reaped mid-commit "), 20_000)
	name := "uploads/rp/blobs/" + hexOf(data) + "/" + strconv.Itoa(len(data))
	fault.arm(faultengine.BlobPut, 2, false) // the first put is the upload refs' blob, the second the commit's
	w, _ := g.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data[:1000]}, &bytestream.WriteRequest{WriteOffset: 1000, Data: data[1000:], FinishWrite: true}); err == nil {
		t.Fatal("Write with its commit failing succeeded")
	}
	fault.arm("", 0, false)
	clk.Add(2 * time.Minute)
	if n, err := st.Blobs.ReapUploads(ctx); err != nil || n != 1 {
		t.Fatalf("ReapUploads = %d, %v; want 1", n, err)
	}
	q, err := g.bs.QueryWriteStatus(ctx, &bytestream.QueryWriteStatusRequest{ResourceName: name})
	if status.Code(err) != codes.NotFound {
		t.Errorf("QueryWriteStatus after the reap = %v, %v; want NOT_FOUND", q, err)
	}
	if rep, err := cache.Evict(ctx); err != nil || rep.Uploads != 0 {
		t.Errorf("Evict = %+v, %v; want no upload bytes", rep, err)
	}
	w, _ = g.bs.Write(ctx)
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: data, FinishWrite: true}); err != nil {
		t.Fatalf("Write from 0: %v", err)
	}
}
