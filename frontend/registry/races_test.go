package registry_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server"
)

// hookEng runs hooks around refs calls (armed once each).
type hookEng struct {
	engine.Engine
	r *hookRefs
}

func (e hookEng) Refs() ref.Backend { return e.r }

type hookRefs struct {
	ref.Backend
	afterGet   atomic.Pointer[func(name string)]
	beforeGet  atomic.Pointer[func(name string) bool]
	beforeList atomic.Pointer[func(prefix string) bool]
	beforeDel  atomic.Pointer[func(name string) bool]
}

func (h *hookRefs) Get(ctx context.Context, p ref.GetParams) (ref.Ref, error) {
	if f := h.beforeGet.Swap(nil); f != nil && !(*f)(p.Name) {
		h.beforeGet.CompareAndSwap(nil, f)
	}
	r, err := h.Backend.Get(ctx, p)
	if f := h.afterGet.Load(); f != nil {
		(*f)(p.Name)
	}
	return r, err
}

func (h *hookRefs) List(ctx context.Context, p ref.ListParams, y func(ref.Ref) bool) error {
	if f := h.beforeList.Load(); f != nil && (*f)(p.Prefix) {
		h.beforeList.Store(nil)
	}
	return h.Backend.List(ctx, p, y)
}

func (h *hookRefs) Delete(ctx context.Context, p ref.DeleteParams) error {
	if f := h.beforeDel.Load(); f != nil && (*f)(p.Name) {
		h.beforeDel.Store(nil)
	}
	return h.Backend.Delete(ctx, p)
}

func hooked(t *testing.T, clk *clock.Fake) (*stead.Store, *hookRefs) {
	eng := memory.New()
	h := &hookRefs{Backend: eng.Refs()}
	st, err := stead.New(context.Background(), hookEng{Engine: eng, r: h}, stead.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, h
}

const keepPulled = "rules:\n  - repositories: [\"m\"]\n    keep_pulled_within: 48h\n"

func tagsOf(t *testing.T, st *stead.Store, repo string) []string {
	var out []string
	for rf, err := range st.Refs.All(context.Background(), "oci/"+repo+"/_tags/") {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.TrimPrefix(rf.Name, "oci/"+repo+"/_tags/"))
	}
	return out
}

// TestPullAfterDeleteRepush: a manifest deleted by digest and pushed
// again has its next pull recorded, whatever the registry remembered of
// the deleted link's pulls.
func TestPullAfterDeleteRepush(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, _ := hooked(t, clk)
	c, reg := pulledClient(t, st, clk, keepPulled)
	img := c.pushImage("m", "v1", bytes.Repeat([]byte("base\n"), 100), "own")
	c.pull("GET", "m", "v1")
	if resp, _ := c.do("DELETE", "/v2/m/manifests/"+img.digest, nil, nil); resp.StatusCode != 202 {
		t.Fatal("delete")
	}
	clk.Advance(time.Minute)
	c.putManifest("m", "v1", imageMT, img.manifest)
	clk.Advance(time.Minute)
	c.pull("GET", "m", "v1") // a real pull, after the re-push
	if at, _ := c.lastPull("m", img.digest); at.IsZero() {
		t.Errorf("pull after delete+re-push not recorded (memo still says %v)", "recorded")
	}
	got, _ := reg.Collect(ctx, registry.CollectOptions{})
	if len(tagsOf(t, st, "m")) == 0 {
		t.Errorf("tag pulled 0s ago deleted by keep_pulled_within: 48h: %+v", got.Deleted)
	}
}

// TestRepushKeepsPull: a pull another server notes while a push of the
// same manifest reads its link is kept by the push, not overwritten.
func TestRepushKeepsPull(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, h := hooked(t, clk)
	c, reg := pulledClient(t, st, clk, keepPulled)
	other, _ := pulledClient(t, st, clk, keepPulled) // a second server
	img := c.pushImage("m", "v1", bytes.Repeat([]byte("base\n"), 100), "own")
	clk.Advance(time.Hour)
	var fired atomic.Bool
	f := func(name string) {
		if strings.Contains(name, "/_manifests/") && fired.CompareAndSwap(false, true) {
			other.pull("GET", "m", "v1") // lands between put's lastPull and its Set
		}
	}
	h.afterGet.Store(&f)
	c.putManifest("m", "v2", imageMT, img.manifest)
	h.afterGet.Store(nil)
	clk.Advance(10 * time.Minute)
	other.pull("GET", "m", "v1") // pulled again, still within the memo
	if at, _ := c.lastPull("m", img.digest); at.IsZero() {
		t.Errorf("two pulls (other server) not recorded: link says never pulled")
	}
	got, _ := reg.Collect(ctx, registry.CollectOptions{})
	if len(got.Deleted) > 0 {
		t.Errorf("keep_pulled_within 48h deleted tags pulled 0 and 10 min ago: %v", deletedNames(got))
	}
}

// TestCollectSeesPullAfterListing: a pull between Collect's listing and
// its judging of the tag keeps the tag.
func TestCollectSeesPullAfterListing(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, h := hooked(t, clk)
	c, reg := pulledClient(t, st, clk, keepPulled)
	img := c.pushImage("m", "v1", bytes.Repeat([]byte("base\n"), 100), "own")
	c.pull("GET", "m", "v1")
	clk.Advance(72 * time.Hour)
	f := func(name string) bool {
		if strings.HasSuffix(name, "/_manifests/"+img.digest) {
			c.pull("GET", "m", "v1")
			return true
		}
		return false
	}
	h.beforeGet.Store(&f)
	got, err := reg.Collect(ctx, registry.CollectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tags := tagsOf(t, st, "m"); len(tags) == 0 {
		at, _ := c.lastPull("m", img.digest)
		t.Errorf("tag deleted though its manifest was pulled at %v after the listing (now %v): %v", at, clk.Now().UTC(), got.Deleted)
	}
}

// TestUntaggedCollectRacesRetag: an untagged manifest tagged again
// while Collect runs keeps its link and its new tag.
func TestUntaggedCollectRacesRetag(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, h := hooked(t, clk)
	reg := registry.New(st, registry.Options{DeleteUntaggedAfter: time.Hour, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	addr := fronttest.Serve(t, st, server.Options{Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	c := &client{t: t, base: "http://" + addr, st: st}
	img := c.pushImage("u", "v1", bytes.Repeat([]byte("base\n"), 100), "own")
	if resp, b := c.do("DELETE", "/v2/u/manifests/v1", nil, nil); resp.StatusCode != 202 {
		t.Fatalf("delete tag %d %s", resp.StatusCode, b)
	}
	clk.Advance(2 * time.Hour)
	f := func(prefix string) bool {
		if prefix == "oci/u/_tags/" {
			c.putManifest("u", "v2", imageMT, img.manifest) // a client re-tags it: 201
			return true
		}
		return false
	}
	h.beforeList.Store(&f)
	got, err := reg.Collect(ctx, registry.CollectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tags := tagsOf(t, st, "u"); len(tags) == 0 {
		t.Errorf("tag v2, pushed (201) during Collect, deleted with its manifest: %+v", got.Deleted)
	}
}
