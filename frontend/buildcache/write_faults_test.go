package buildcache_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"

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
			st, err := stead.New(ctx, faultengine.New(memory.New(), fault))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			g := grpcOver(t, st, buildcache.New(st, buildcache.Options{Logger: slog.New(slog.DiscardHandler)}))
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
