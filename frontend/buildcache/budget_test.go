package buildcache_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/gc"
)

// storedBytes adds up every blob of the store.
func (c *cacheClient) storedBytes() int64 {
	c.t.Helper()
	var total int64
	after := blob.Key{}
	for {
		page, err := c.st.Blobs.List(context.Background(), after, 1000)
		if err != nil {
			c.t.Fatal(err)
		}
		if len(page) == 0 {
			return total
		}
		for _, info := range page {
			total += info.Size
		}
		after = page[len(page)-1].Key
	}
}

func resultNaming(t testing.TB, outs ...[]byte) []byte {
	t.Helper()
	var res repb.ActionResult
	for i, o := range outs {
		res.OutputFiles = append(res.OutputFiles, &repb.OutputFile{Path: fmt.Sprint("out", i), Digest: &repb.Digest{Hash: hexOf(o), SizeBytes: int64(len(o))}})
	}
	b, err := proto.Marshal(&res)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func filled(seed, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(seed*31 + i*7 + i/251)
	}
	copy(b, fmt.Sprint(seed, ":"))
	return b
}

// TestEvictLeastRecentlyRead evicts the entry read longest ago, keeps a
// result's shared outputs while another result names them, and frees
// the bytes at the sweep.
func TestEvictLeastRecentlyRead(t *testing.T) {
	t.Parallel()
	c := newCacheOpts(t, buildcache.Options{TTL: 100 * time.Hour, MaxSize: 10 << 10})
	a, b, shared := filled(1, 4<<10), filled(2, 4<<10), filled(3, 4<<10)
	for _, x := range [][]byte{a, b, shared} {
		if status, body := c.do("PUT", "/cache/cas/"+hexOf(x), x); status != 200 {
			t.Fatalf("PUT cas = %d %s", status, body)
		}
		c.clk.Add(time.Minute)
	}
	r1, r2 := resultNaming(t, shared), resultNaming(t, shared, filled(3, 4<<10))
	act1, act2 := hexOf([]byte("act1")), hexOf([]byte("act2"))
	for _, p := range []struct {
		act string
		res []byte
	}{{act1, r1}, {act2, r2}} {
		if status, body := c.do("PUT", "/cache/ac/"+p.act, p.res); status != 200 {
			t.Fatalf("PUT ac = %d %s", status, body)
		}
		c.clk.Add(time.Minute)
	}
	// a is read last: b is the least recently read content.
	if status, _ := c.do("GET", "/cache/cas/"+hexOf(a), nil); status != 200 {
		t.Fatalf("GET a = %d", status)
	}
	rep, err := c.cache.Evict(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Entries != 5 || rep.Bytes != int64(12<<10+len(r1)+len(r2)) || rep.Evicted == 0 {
		t.Fatalf("evict = %+v", rep)
	}
	c.sweep()
	if status, _ := c.do("GET", "/cache/cas/"+hexOf(b), nil); status != 404 {
		t.Fatalf("least recently read content = %d; want 404", status)
	}
	if ok, _ := c.st.Blobs.Has(context.Background(), blob.KeyOf(b)); ok {
		t.Fatal("evicted content still stored after the sweep")
	}
	// The shared output's own entry was older than a's, yet results
	// name it: it is stored, and served with whichever result is left.
	if ok, _ := c.st.Blobs.Has(context.Background(), blob.KeyOf(shared)); !ok {
		t.Fatal("an output two results name was freed")
	}
	if status, _ := c.do("GET", "/cache/cas/"+hexOf(a), nil); status != 200 {
		t.Fatalf("recently read content = %d; want 200", status)
	}
	if got := c.storedBytes(); got > 10<<10 {
		t.Fatalf("stored %d bytes after eviction and sweep; budget %d", got, 10<<10)
	}
	// Under budget: nothing more goes.
	if rep, err := c.cache.Evict(context.Background()); err != nil || rep.Evicted != 0 {
		t.Fatalf("evict under budget = %+v, %v", rep, err)
	}
}

// TestEvictCountsUploads: the bytes of a ByteStream upload in progress
// count against the budget, so the least recently read entry goes to
// make room for them; the upload itself stays.
func TestEvictCountsUploads(t *testing.T) {
	t.Parallel()
	c := newCacheOpts(t, buildcache.Options{TTL: 100 * time.Hour, MaxSize: 10 << 10})
	a, b := filled(1, 4<<10), filled(2, 4<<10)
	for _, x := range [][]byte{a, b} {
		if status, body := c.do("PUT", "/cache/cas/"+hexOf(x), x); status != 200 {
			t.Fatalf("PUT cas = %d %s", status, body)
		}
		c.clk.Add(time.Minute)
	}
	g := grpcOver(t, c.st, c.cache)
	big := filled(3, 8<<10)
	name := "uploads/e-1/blobs/" + hexOf(big) + "/" + strconv.Itoa(len(big))
	w, _ := g.bs.Write(context.Background())
	if _, err := send(t, w, &bytestream.WriteRequest{ResourceName: name, Data: big[:4<<10]}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Write closed unfinished = %v", err)
	}
	rep, err := c.cache.Evict(context.Background())
	if err != nil || rep.Entries != 2 || rep.Bytes != 8<<10 || rep.Uploads != 4<<10 || rep.Evicted != 1 || rep.Freed != 4<<10 {
		t.Fatalf("evict = %+v, %v; want a's entry evicted for the upload's 4 KiB", rep, err)
	}
	if status, _ := c.do("GET", "/cache/cas/"+hexOf(a), nil); status != 404 {
		t.Fatalf("least recently read content = %d; want 404", status)
	}
	q, err := g.bs.QueryWriteStatus(context.Background(), &bytestream.QueryWriteStatusRequest{ResourceName: name})
	if err != nil || q.GetCommittedSize() != 4<<10 {
		t.Fatalf("QueryWriteStatus after eviction = %v, %v", q, err)
	}
}

// TestEvictNoBudget does nothing without a budget.
func TestEvictNoBudget(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	x := filled(9, 1<<10)
	c.do("PUT", "/cache/cas/"+hexOf(x), x)
	if rep, err := c.cache.Evict(context.Background()); err != nil || rep != (buildcache.EvictReport{}) {
		t.Fatalf("evict without budget = %+v, %v", rep, err)
	}
}

// TestEvictStress writes, reads and evicts at once over overlapping keys:
// a result served always names stored outputs, and after each eviction
// and sweep the store holds at most the budget plus what was written
// since the eviction began.
func TestEvictStress(t *testing.T) {
	t.Parallel()
	const budget = 48 << 10
	c := newCacheOpts(t, buildcache.Options{TTL: 1000 * time.Hour, MaxSize: budget})
	var (
		written  atomic.Int64 // bytes sent to be stored, counted before the put
		sweeping sync.RWMutex // a served result and the check of its outputs see no sweep between them
		served   atomic.Int64
		done     = make(chan struct{})
		wg       sync.WaitGroup
	)
	const contents, actions = 60, 30
	content := func(i int) []byte { return filled(i%contents, 1<<10+i%contents*16) }
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 60 {
				n := w*7 + i
				outs := [][]byte{content(n), content(n * 3)}
				for _, o := range outs {
					written.Add(int64(len(o)))
					if status, body := c.do("PUT", "/cache/cas/"+hexOf(o), o); status != 200 {
						t.Errorf("PUT cas = %d %s", status, body)
						return
					}
				}
				res := resultNaming(t, outs...)
				written.Add(int64(len(res)) + 1024) // a list blob at most
				// 400: an output evicted between its put and this one.
				if status, body := c.do("PUT", fmt.Sprintf("/cache/ac/%s", hexOf([]byte(fmt.Sprint("action", n%actions)))), res); status != 200 && status != 400 {
					t.Errorf("PUT ac = %d %s", status, body)
					return
				}
			}
		}()
	}
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 120 {
				act := hexOf([]byte(fmt.Sprint("action", (r*11+i)%actions)))
				sweeping.RLock()
				status, body := c.do("GET", "/cache/ac/"+act, nil)
				if status == 200 {
					served.Add(1)
					var res repb.ActionResult
					if err := proto.Unmarshal(body, &res); err != nil {
						t.Errorf("served result: %v", err)
					}
					for _, f := range res.GetOutputFiles() {
						k, _ := blob.ParseKey("sha256:" + f.GetDigest().GetHash())
						if ok, err := c.st.Blobs.Has(context.Background(), k); !ok || err != nil {
							t.Errorf("served result %s names %s, not stored (%v)", act, f.GetPath(), err)
						}
					}
				} else if status != 404 {
					t.Errorf("GET ac = %d %s", status, body)
				}
				sweeping.RUnlock()
			}
		}()
	}
	evictSweep := func() {
		if _, err := c.cache.Evict(context.Background()); err != nil {
			t.Error(err)
		}
		sweeping.Lock()
		for range 3 { // a result, then the outputs it alone kept
			c.clk.Add(10 * time.Millisecond) // past the GC grace, well within the pin TTL
			if _, err := c.st.GC.Sweep(context.Background(), gc.SweepOptions{AllUnreferenced: true}); err != nil {
				t.Error(err)
			}
		}
		sweeping.Unlock()
	}
	go func() { wg.Wait(); close(done) }()
	// A blob just put is pinned for the pin TTL (a second here) and
	// survives the sweep even once its entry is evicted: the bound is the
	// budget plus what was written from a pin TTL before the eviction.
	type mark struct {
		at      time.Time
		written int64
	}
	var marks []mark
	rounds := 0
	for stop := false; !stop; rounds++ {
		select {
		case <-done:
			stop = true
		default:
		}
		start := c.clk.Now()
		marks = append(marks, mark{start, written.Load()})
		from := marks[0].written
		for _, m := range marks {
			if m.at.After(start.Add(-time.Second)) {
				break
			}
			from = m.written
		}
		evictSweep()
		stored := c.storedBytes()
		if since := written.Load() - from; stored > budget+since && !t.Failed() {
			t.Errorf("round %d: %d bytes stored, over the budget %d plus the %d written since a pin TTL before the eviction", rounds, stored, budget, since)
		}
	}
	c.clk.Add(2 * time.Second) // every pin lapsed
	evictSweep()
	if stored := c.storedBytes(); stored > budget {
		t.Fatalf("quiet: %d bytes stored, budget %d", stored, budget)
	}
	if served.Load() == 0 {
		t.Fatal("no result was served: the test checked nothing")
	}
	t.Logf("%d rounds, %d results served", rounds, served.Load())
}
