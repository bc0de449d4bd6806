package buildcache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server"
)

// clock is a test clock moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type cacheClient struct {
	t     *testing.T
	base  string
	st    *stead.Store
	clk   *clock
	cache *buildcache.Cache
}

// newCache serves a build cache with ttl over a memory store on a clock
// of the test's.
func newCache(t *testing.T, ttl time.Duration) *cacheClient {
	t.Helper()
	return newCacheSized(t, ttl, 1<<20)
}

// newCacheSized is newCache taking content up to maxBlob bytes.
func newCacheSized(t *testing.T, ttl time.Duration, maxBlob int64) *cacheClient {
	t.Helper()
	return newCacheOpts(t, buildcache.Options{TTL: ttl, MaxBlobSize: maxBlob})
}

// newCacheOpts is newCache with opts, reads remembered on the test's
// clock.
func newCacheOpts(t *testing.T, opts buildcache.Options) *cacheClient {
	t.Helper()
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	st, err := stead.Open(context.Background(), "mem://", stead.WithClock(clk.Now), stead.WithPinTTL(time.Second), stead.WithGCGrace(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opts.Now = clk.Now
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cache := buildcache.New(st, opts)
	addr := fronttest.Serve(t, st, server.Options{Token: "tok", Mounts: []server.Mount{
		{Prefix: buildcache.Prefix, Handler: cache},
		{Prefix: buildcache.TurboPrefix, Handler: cache.Turbo()},
		{Prefix: buildcache.NxPrefix, Handler: cache.Nx()},
		{Prefix: buildcache.GradlePrefix, Handler: cache.Gradle()},
	}})
	return &cacheClient{t: t, base: "http://" + addr, st: st, clk: clk, cache: cache}
}

func (c *cacheClient) do(method, path string, body []byte) (int, []byte) {
	c.t.Helper()
	status, _, b := c.doHeaders(method, path, body, nil)
	return status, b
}

func (c *cacheClient) doHeaders(method, path string, body []byte, headers map[string]string) (int, http.Header, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// sweep runs a few sweeps a second apart. A cache whose every entry
// lapsed declares no liveness, so they may collect everything.
func (c *cacheClient) sweep() {
	c.t.Helper()
	for range 5 {
		c.clk.Add(time.Second)
		if _, err := c.st.GC.Sweep(context.Background(), gc.SweepOptions{AllUnreferenced: true}); err != nil {
			c.t.Fatal(err)
		}
	}
}

func hexOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestHostileRequests(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	content := []byte("object file")
	for _, tc := range []struct {
		method, path string
		body         []byte
		status       int
	}{
		{"PUT", "/cache/cas/" + hexOf([]byte("other")), content, 400}, // not its digest
		{"PUT", "/cache/cas/" + strings.ToUpper(hexOf(content)), content, 400},
		{"PUT", "/cache/cas/" + hexOf(content)[:63], content, 400},
		{"PUT", "/cache/cas/" + hexOf(content) + "/x", content, 400},
		{"GET", "/cache/cas/zz", nil, 400},
		{"GET", "/cache/other/" + hexOf(content), nil, 404},
		{"GET", "/cache/", nil, 404},
		{"DELETE", "/cache/ac/" + hexOf(content), nil, 405},
		{"PUT", "/cache/cas/" + hexOf(make([]byte, 1<<20+1)), make([]byte, 1<<20+1), 413},
		{"PUT", "/cache/ac/" + hexOf(content), make([]byte, buildcache.MaxActionResult+1), 413},
		{"GET", "/cache/cas/" + hexOf(content), nil, 404},
		{"GET", "/cache/ac/" + hexOf(content), nil, 404},
	} {
		if status, body := c.do(tc.method, tc.path, tc.body); status != tc.status {
			t.Errorf("%s %s = %d %s; want %d", tc.method, tc.path, status, body, tc.status)
		}
	}
	if page, err := c.st.Refs.List(context.Background(), "", "", 10); err != nil || len(page) != 0 {
		t.Fatalf("refs after refused requests: %v, %v", page, err)
	}
	req, _ := http.NewRequest("GET", c.base+"/cache/cas/"+hexOf(content), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("without a token = %d %v", resp.StatusCode, resp.Header)
	}
}

// TestEntriesExpireUnlessRead checks that a read renews an entry and that
// an entry nobody reads lapses and is collected, while an action result's
// outputs live as long as it does.
func TestEntriesExpireUnlessRead(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	out := []byte("compiled output")
	unused := []byte("nobody reads this")
	for _, b := range [][]byte{out, unused} {
		if status, body := c.do("PUT", "/cache/cas/"+hexOf(b), b); status != 200 {
			t.Fatalf("PUT cas = %d %s", status, body)
		}
	}
	result, err := proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "a.o", Digest: &repb.Digest{Hash: hexOf(out), SizeBytes: int64(len(out))}}}})
	if err != nil {
		t.Fatal(err)
	}
	action := hexOf([]byte("action"))
	if status, body := c.do("PUT", "/cache/ac/"+action, result); status != 200 {
		t.Fatalf("PUT ac = %d %s", status, body)
	}
	// The result's blob references its output.
	outKey, _ := blob.ParseKey("sha256:" + hexOf(out))
	ex, err := c.st.GC.Explain(context.Background(), outKey)
	if err != nil || len(ex.Parents) != 1 || ex.Parents[0] != blob.KeyOf(result) {
		t.Fatalf("output's parents = %v, %v; want the action result", ex.Parents, err)
	}

	// Read the result every 40 minutes for three hours: it stays.
	for range 5 {
		c.clk.Add(40 * time.Minute)
		if status, body := c.do("GET", "/cache/ac/"+action, nil); status != 200 || !bytes.Equal(body, result) {
			t.Fatalf("GET ac after %v = %d", c.clk.Now(), status)
		}
	}
	c.sweep()
	// The output's own entry lapsed, unread; the result keeps it.
	if status, body := c.do("GET", "/cache/cas/"+hexOf(out), nil); status != 200 || !bytes.Equal(body, out) {
		t.Fatalf("output kept by its result = %d", status)
	}
	if status, _ := c.do("GET", "/cache/cas/"+hexOf(unused), nil); status != 404 {
		t.Fatalf("unread content after its TTL = %d; want 404", status)
	}
	if ok, _ := c.st.Blobs.Has(context.Background(), blob.KeyOf(unused)); ok {
		t.Fatal("unread content still stored after its TTL and a sweep")
	}
	// Nobody reads the result for an hour: it goes, then its output.
	c.clk.Add(61 * time.Minute)
	c.sweep()
	if status, _ := c.do("GET", "/cache/ac/"+action, nil); status != 404 {
		t.Fatalf("unread result after its TTL = %d; want 404", status)
	}
	c.sweep()
	if ok, _ := c.st.Blobs.Has(context.Background(), outKey); ok {
		t.Fatal("output still stored once its result went")
	}
}

// TestActionResultNotParsed keeps an entry that is not an ActionResult
// (as ccache writes) as it is, without references.
func TestActionResultNotParsed(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	for _, v := range [][]byte{{}, []byte("\xff\xff\xff not a protobuf"), []byte("ccache entry")} {
		key := hexOf(append([]byte("k"), v...))
		if status, body := c.do("PUT", "/cache/ac/"+key, v); status != 200 {
			t.Fatalf("PUT ac %q = %d %s", v, status, body)
		}
		if status, body := c.do("GET", "/cache/ac/"+key, nil); status != 200 || !bytes.Equal(body, v) {
			t.Fatalf("GET ac %q = %d %q", v, status, body)
		}
	}
}

// TestActionResultNamingMissingOutputs refuses a result naming content
// the cache does not hold, and takes it once that content is put.
func TestActionResultNamingMissingOutputs(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	out := []byte("late output")
	result, err := proto.Marshal(&repb.ActionResult{OutputFiles: []*repb.OutputFile{{Path: "o", Digest: &repb.Digest{Hash: hexOf(out), SizeBytes: int64(len(out))}}}})
	if err != nil {
		t.Fatal(err)
	}
	action := hexOf([]byte("a1"))
	if status, body := c.do("PUT", "/cache/ac/"+action, result); status != 400 || !strings.Contains(string(body), hexOf(out)) {
		t.Fatalf("PUT ac naming a missing output = %d %s; want 400 naming it", status, body)
	}
	if status, _ := c.do("GET", "/cache/ac/"+action, nil); status != 404 {
		t.Fatalf("GET ac after a refused PUT = %d; want 404", status)
	}
	if status, body := c.do("PUT", "/cache/cas/"+hexOf(out), out); status != 200 {
		t.Fatalf("PUT cas = %d %s", status, body)
	}
	if status, body := c.do("PUT", "/cache/ac/"+action, result); status != 200 {
		t.Fatalf("PUT ac = %d %s", status, body)
	}
	if status, body := c.do("GET", "/cache/ac/"+action, nil); status != 200 || !bytes.Equal(body, result) {
		t.Fatalf("GET ac = %d", status)
	}
}

// TestIncompleteResultNotServed stores a result whose output is not
// stored (as a result put without its outputs as children would be): it
// is not served.
func TestIncompleteResultNotServed(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	ctx := context.Background()
	result, err := proto.Marshal(&repb.ActionResult{StdoutDigest: &repb.Digest{Hash: hexOf([]byte("gone")), SizeBytes: 4}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.st.Blobs.Put(ctx, bytes.NewReader(result))
	if err != nil {
		t.Fatal(err)
	}
	action := hexOf([]byte("a"))
	if _, err := c.st.Refs.Set(ctx, "cache/ac/"+action, key, ref.SetOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if status, _ := c.do("GET", "/cache/ac/"+action, nil); status != 404 {
		t.Fatalf("GET ac naming a missing output = %d; want 404", status)
	}
}

// TestResultServedAgainOnlyWhileComplete serves a result, then loses
// the output it names (the result's bytes were stored without it as a
// child): the result read before is not served again.
func TestResultServedAgainOnlyWhileComplete(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	ctx := context.Background()
	out := []byte("output")
	if status, _ := c.do("PUT", "/cache/cas/"+hexOf(out), out); status != 200 {
		t.Fatalf("PUT cas = %d", status)
	}
	result, err := proto.Marshal(&repb.ActionResult{StdoutDigest: &repb.Digest{Hash: hexOf(out), SizeBytes: int64(len(out))}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := c.st.Blobs.Put(ctx, bytes.NewReader(result))
	if err != nil {
		t.Fatal(err)
	}
	action := hexOf([]byte("a"))
	if _, err := c.st.Refs.Set(ctx, "cache/ac/"+action, key, ref.SetOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if status, body := c.do("GET", "/cache/ac/"+action, nil); status != 200 || !bytes.Equal(body, result) {
			t.Fatalf("GET ac = %d %q", status, body)
		}
	}
	if err := c.st.Refs.Delete(ctx, "cache/cas/"+hexOf(out), 0); err != nil {
		t.Fatal(err)
	}
	c.sweep()
	if ok, _ := c.st.Blobs.Has(ctx, blob.KeyOf(out)); ok {
		t.Fatal("the output is still stored after the sweep")
	}
	if status, _ := c.do("GET", "/cache/ac/"+action, nil); status != 404 {
		t.Fatalf("GET ac naming an output lost since the last read = %d; want 404", status)
	}
}

// TestCASServesOnlyCacheContent leaves a blob stored outside the cache
// unserved under cas/.
func TestCASServesOnlyCacheContent(t *testing.T) {
	t.Parallel()
	c := newCache(t, time.Hour)
	other := []byte("a registry layer, say")
	if _, err := c.st.Blobs.Put(context.Background(), bytes.NewReader(other)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"GET", "HEAD"} {
		if status, _ := c.do(m, "/cache/cas/"+hexOf(other), nil); status != 404 {
			t.Fatalf("%s cas of a blob put outside the cache = %d; want 404", m, status)
		}
	}
}
