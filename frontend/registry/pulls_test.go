package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server"
)

// linkSpy is an engine counting the sets of manifest links.
type linkSpy struct {
	engine.Engine
	refs *spyRefs
}

func (e linkSpy) Refs() ref.Backend { return e.refs }

type spyRefs struct {
	ref.Backend
	sets atomic.Int64
}

func (s *spyRefs) Set(ctx context.Context, p ref.SetParams) (ref.Ref, error) {
	r, err := s.Backend.Set(ctx, p)
	if err == nil && strings.Contains(p.Name, "/_manifests/") {
		s.sets.Add(1)
	}
	return r, err
}

// spied opens a store over eng counting its manifest links' sets.
func spied(t *testing.T, eng engine.Engine, clk *clock.Fake) (*stead.Store, *atomic.Int64) {
	t.Helper()
	spy := linkSpy{Engine: eng, refs: &spyRefs{Backend: eng.Refs()}}
	st, err := stead.New(context.Background(), spy, stead.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, &spy.refs.sets
}

// pulledClient serves a registry with policy on st, on the clock clk.
func pulledClient(t *testing.T, st *stead.Store, clk *clock.Fake, policy string) (*client, *registry.Registry) {
	t.Helper()
	var ret *registry.Retention
	if policy != "" {
		var err error
		if ret, err = registry.ParseRetention([]byte(policy)); err != nil {
			t.Fatal(err)
		}
	}
	reg := registry.New(st, registry.Options{Retention: ret, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	addr := fronttest.Serve(t, st, server.Options{Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	return &client{t: t, base: "http://" + addr, st: st}, reg
}

// pull GETs repo's manifest ref (a tag or a digest), as a pull does.
func (c *client) pull(method, repo, ref string) {
	c.t.Helper()
	if resp, body := c.do(method, "/v2/"+repo+"/manifests/"+ref, nil, nil); resp.StatusCode != 200 {
		c.t.Fatalf("%s %s:%s = %d %.200s", method, repo, ref, resp.StatusCode, body)
	}
}

// lastPull reads the pull time recorded in the link of manifest d of
// repo, and the link's version (each write raises it).
func (c *client) lastPull(repo, d string) (time.Time, int64) {
	c.t.Helper()
	rf, err := c.st.Refs.Get(context.Background(), "oci/"+repo+"/_manifests/"+d)
	if err != nil {
		c.t.Fatal(err)
	}
	var l struct {
		Pulled time.Time `json:"pulled"`
	}
	if err := json.Unmarshal(rf.Annotation, &l); err != nil {
		c.t.Fatalf("link of %s@%s: %v", repo, d, err)
	}
	return l.Pulled, rf.Version
}

func deletedNames(got registry.Collected) []string {
	var out []string
	for _, d := range got.Deleted {
		out = append(out, d.Repository+":"+d.Tag)
	}
	slices.Sort(out)
	return out
}

// TestRetentionPulled applies keep_pulled_within, alone and with the
// other rules, on a fake clock: a manifest pulled by tag or by digest
// within the period keeps its tags, one pulled before or only HEADed does
// not, and a tag moved to another manifest goes by the new manifest's
// pulls.
func TestRetentionPulled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, err := stead.Open(ctx, "mem://", stead.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, reg := pulledClient(t, st, clk, `
rules:
  - repositories: ["pulled"]
    keep_pulled_within: 48h
  - repositories: ["mixed"]
    keep_tags: ["stable"]
    keep_pushed_within: 24h
    keep_pulled_within: 48h
`)
	base := bytes.Repeat([]byte("base\n"), 100)
	push := func(repo, tag string) pushed { return c.pushImage(repo, tag, base, repo+"/"+tag) }

	// t0: everything pushed; old and stale pulled.
	push("pulled", "bytag")
	byDigest := push("pulled", "bydigest")
	push("pulled", "never")
	push("pulled", "old")
	push("pulled", "moveaway")
	push("pulled", "moveto")
	next := push("pulled", "moveto-next")
	push("mixed", "stable")
	push("mixed", "pulledone")
	push("mixed", "stale")
	c.pull("GET", "pulled", "old")
	c.pull("GET", "mixed", "stale")
	c.pull("GET", "pulled", "moveto")

	clk.Advance(30 * time.Hour) // t0+30h
	c.pull("GET", "pulled", "bytag")
	c.pull("GET", "pulled", byDigest.digest)
	c.pull("HEAD", "pulled", "never") // a HEAD is no pull
	c.pull("GET", "pulled", "moveaway")
	c.pull("GET", "pulled", next.digest)
	c.pull("GET", "mixed", "pulledone")
	// moveaway goes to a manifest never pulled, moveto to one just pulled.
	c.pushImage("pulled", "moveaway", base, "another")
	c.putManifest("pulled", "moveto", imageMT, next.manifest)
	if resp, _ := c.do("DELETE", "/v2/pulled/manifests/moveto-next", nil, nil); resp.StatusCode != 202 {
		t.Fatal("deleting moveto-next")
	}

	clk.Advance(30 * time.Hour) // t0+60h
	push("mixed", "fresh")
	clk.Advance(10 * time.Hour) // t0+70h: the pulls at t0+30h are 40h old

	want := []string{
		"mixed:stale",     // pulled 70h ago, pushed 70h ago, not stable
		"pulled:moveaway", // its new manifest was never pulled
		"pulled:never",    // only HEADed
		"pulled:old",      // pulled 70h ago
	}
	dry, err := reg.Collect(ctx, registry.CollectOptions{DryRun: true})
	if err != nil || !slices.Equal(deletedNames(dry), want) {
		t.Fatalf("dry run = %v, %v;\nwant %v", deletedNames(dry), err, want)
	}
	for _, d := range dry.Deleted {
		wantReason := "no retention rule keeps the tag (never pulled)"
		if d.Tag == "old" || d.Tag == "stale" {
			wantReason = "no retention rule keeps the tag (last pulled " + clk.Now().Add(-70*time.Hour).UTC().Format(time.RFC3339) + ")"
		}
		if d.Reason != wantReason {
			t.Errorf("%s:%s goes because %q, want %q", d.Repository, d.Tag, d.Reason, wantReason)
		}
	}
	done, err := reg.Collect(ctx, registry.CollectOptions{})
	if err != nil || !slices.Equal(deletedNames(done), want) {
		t.Fatalf("Collect = %v, %v;\nwant %v", deletedNames(done), err, want)
	}
	for repo, tags := range map[string][]string{
		"pulled": {"bydigest", "bytag", "moveto"},
		"mixed":  {"fresh", "pulledone", "stable"},
	} {
		if got := c.tagsOf(repo); !slices.Equal(got, tags) {
			t.Errorf("tags of %s = %v, want %v", repo, got, tags)
		}
	}

	// Nine hours later the pulls at t0+30h are past 48h: only what
	// another rule keeps stays.
	clk.Advance(9 * time.Hour)
	done, err = reg.Collect(ctx, registry.CollectOptions{})
	if want := []string{"mixed:pulledone", "pulled:bydigest", "pulled:bytag", "pulled:moveto"}; err != nil || !slices.Equal(deletedNames(done), want) {
		t.Fatalf("Collect at t0+79h = %v, %v;\nwant %v", deletedNames(done), err, want)
	}
}

// pullEngines open each engine the pull notes are checked on.
var pullEngines = []struct {
	name string
	open func(t *testing.T) engine.Engine
}{
	{"memory", func(t *testing.T) engine.Engine { return memory.New() }},
	{"sqlite", func(t *testing.T) engine.Engine {
		cfg, err := sqlite.ParseURL("sqlite://" + filepath.Join(t.TempDir(), "s.db"))
		if err != nil {
			t.Fatal(err)
		}
		eng, err := sqlite.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}},
	{"postgres", func(t *testing.T) engine.Engine {
		cfg, err := postgres.ParseURL(pgtest.New(t).StoreURL())
		if err != nil {
			t.Fatal(err)
		}
		eng, err := postgres.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}},
	{"remote", func(t *testing.T) engine.Engine {
		backing, err := stead.Open(context.Background(), "mem://")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { backing.Close() })
		addr := fronttest.Serve(t, backing, server.Options{ClientClock: true})
		eng, err := remote.Open(context.Background(), remote.Config{URL: "http://" + addr})
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}},
}

// TestPullThrottle checks, on every engine, that a manifest's pull is
// written at most once per half of stead.PullResolution: many pulls by
// tag and digest write once, HEADs never, a second registry over the store
// reads the time recorded rather than writing it again, a push of the same
// manifest keeps it, and a manifest deleted by digest leaves no ref behind.
func TestPullThrottle(t *testing.T) {
	t.Parallel()
	for _, e := range pullEngines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			pullThrottle(t, e.open(t))
		})
	}
}

func pullThrottle(t *testing.T, eng engine.Engine) {
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, sets := spied(t, eng, clk)
	c, _ := pulledClient(t, st, clk, "")
	img := c.pushImage("thr", "v1", bytes.Repeat([]byte("base\n"), 100), "own")
	if at, _ := c.lastPull("thr", img.digest); !at.IsZero() {
		t.Fatalf("a manifest never pulled was pulled at %v", at)
	}
	writes := func(what string, want int64, at time.Time) {
		t.Helper()
		if got, _ := c.lastPull("thr", img.digest); sets.Load() != want || !got.Equal(at) {
			t.Fatalf("%s: %d link writes, pulled %v; want %d, %v", what, sets.Load(), got, want, at)
		}
	}
	w := sets.Load()
	t1 := clk.Now().UTC()
	for i := range 20 {
		c.pull("GET", "thr", []string{"v1", img.digest}[i%2])
		c.pull("HEAD", "thr", "v1")
	}
	writes("20 pulls", w+1, t1)
	clk.Advance(stead.PullResolution/2 - time.Minute)
	c.pull("GET", "thr", "v1")
	other, _ := pulledClient(t, st, clk, "") // remembers nothing
	other.pull("GET", "thr", img.digest)
	writes("within half the resolution", w+1, t1)
	clk.Advance(time.Minute)
	t2 := clk.Now().UTC()
	c.pull("GET", "thr", "v1")
	other.pull("GET", "thr", "v1")
	writes("half the resolution later", w+2, t2)
	c.putManifest("thr", "v2", imageMT, img.manifest)
	writes("pushed again", w+3, t2)
	if resp, _ := c.do("DELETE", "/v2/thr/manifests/"+img.digest, nil, nil); resp.StatusCode != 202 {
		t.Fatal("deleting the manifest")
	}
	for rf, err := range st.Refs.All(ctx, "oci/thr/") {
		if err != nil {
			t.Fatal(err)
		}
		if rf.Key.String() == img.digest {
			t.Errorf("ref %s names the deleted manifest", rf.Name)
		}
	}
	if resp, _ := c.do("GET", "/v2/thr/manifests/"+img.digest, nil, nil); resp.StatusCode != 404 || sets.Load() != w+3 {
		t.Errorf("a pull of the deleted manifest = %d, %d link writes", resp.StatusCode, sets.Load()-w-3)
	}
}

// TestConcurrentPulls pulls one manifest at once through two stores on one
// PostgreSQL: every pull answers, and one write records the time.
func TestConcurrentPulls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := postgres.ParseURL(pgtest.New(t).StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	var cs []*client
	var sets []*atomic.Int64
	for range 2 {
		eng, err := postgres.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		st, n := spied(t, eng, clk)
		c, _ := pulledClient(t, st, clk, "")
		cs, sets = append(cs, c), append(sets, n)
	}
	img := cs[0].pushImage("conc", "v1", bytes.Repeat([]byte("base\n"), 100), "own")
	before := sets[0].Load()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c := cs[i%2]
			if resp, body := c.do("GET", "/v2/conc/manifests/"+[]string{"v1", img.digest}[i/2%2], nil, nil); resp.StatusCode != 200 {
				t.Errorf("pull %d = %d %.200s", i, resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	n := sets[0].Load() - before + sets[1].Load()
	if at, _ := cs[1].lastPull("conc", img.digest); !at.Equal(clk.Now().UTC()) || n != 1 {
		t.Fatalf("after concurrent pulls: pulled %v in %d link writes, want %v in 1", at, n, clk.Now().UTC())
	}
}
