package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/distribution/distribution/v3/registry/storage"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/sirupsen/logrus"

	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/gc"
)

// The distribution groups put stead's registry side by side with
// distribution/distribution v3's (in process, its filesystem driver on a
// temporary directory), driven by the same client code below: a push is
// what skopeo and oras do (HEAD each blob, upload the missing ones with a
// POST and one PUT carrying the bytes, then PUT the manifest by tag), a
// pull reads the manifest by tag and every blob it names.
//
//   - oci-dist: small images sharing three base layers (256, 64 and
//     16 KiB), each with a 4 KiB layer and a config of its own. "push" is
//     one new image per op; "pull" reads one of 20 pushed in setup.
//   - oci-dist-large: one image with a fresh 64 MiB layer per push; a pull
//     reads one pushed in setup (-dist-large-mib sets the size).
//   - oci-dist-gc: 20 images pushed, 10 deleted by manifest digest, then
//     one collection per round (a drain): distribution's offline
//     garbage-collect (storage.MarkAndSweep, what `registry
//     garbage-collect` runs, the registry stopped), stead's online sweeps
//     with pushes running beside them. Its rate is blobs freed per second;
//     the time, the bytes freed and the pushes that completed meanwhile are
//     printed after the results.
//   - oci-dist-untag: 10 images pushed under tags, 3 tags deleted, then
//     one collection of the untagged manifests per round (a drain):
//     distribution's `garbage-collect --delete-untagged` against stead's
//     untagged policy, and stead's defaults (policy off) for contrast; the
//     still-tagged images are pulled and checked afterwards (untag.go).
var distLargeMiB = flag.Int("dist-large-mib", 64, "the layer size of oci-dist-large, in MiB")

// startRegistry starts a fresh registry whose collection, when
// untaggedAfter is positive, also deletes the manifests no tag names
// (stead: those untagged for longer than untaggedAfter).
type startRegistry = func(ctx context.Context, untaggedAfter time.Duration) (*registryServer, error)

// distBackends are the registries compared, distribution first (the base).
func distBackends() []struct {
	name  string
	start startRegistry
} {
	stead := func(open opener) startRegistry {
		return func(ctx context.Context, untaggedAfter time.Duration) (*registryServer, error) {
			return startSteadRegistry(ctx, open, untaggedAfter)
		}
	}
	return []struct {
		name  string
		start startRegistry
	}{
		{"distribution", startDistribution},
		{"stead sqlite", stead(openSteadSQLite)},
		{"stead pg", stead(openSteadPG)},
		{"stead pg+tier", stead(openSteadPGTier)},
	}
}

// plain starts a registry of start with no untagged collection.
func plain(start startRegistry) func(context.Context) (*registryServer, error) {
	return func(ctx context.Context) (*registryServer, error) { return start(ctx, 0) }
}

func distributionScenarios() []scenario {
	var all []scenario
	for _, g := range []struct {
		group string
		large bool
	}{{"oci-dist", false}, {"oci-dist-large", true}} {
		for _, op := range []string{"push", "pull"} {
			for _, b := range distBackends() {
				sc := scenario{group: g.group, name: op + " " + b.name, setup: distImages(plain(b.start), g.large, op == "pull")}
				if b.name != "distribution" {
					sc.base = op + " distribution"
				}
				all = append(all, sc)
			}
		}
	}
	for _, b := range distBackends() {
		sc := scenario{group: "oci-dist-gc", name: "collect " + b.name, drain: distCollect(b.name, plain(b.start))}
		if b.name != "distribution" {
			sc.base = "collect distribution"
		}
		all = append(all, sc)
	}
	return append(all, distUntagScenarios()...)
}

// registryServer is one registry on a loopback port.
type registryServer struct {
	base string
	stop func()
	// collect frees what deleted manifests alone kept (and, if the
	// registry was started so, the untagged manifests and what they alone
	// kept); offline says it needs the registry stopped.
	collect func(ctx context.Context) (collected, error)
	offline bool
}

// collected is what one collection freed.
type collected struct {
	blobs int
	bytes int64 // the deleted blobs' sizes
	// files is, for distribution, the bytes of every file its collection
	// removed (blob data, links, revisions); 0 for stead.
	files int64
	// took is the collection's time, its measuring excluded.
	took time.Duration
}

// startDistribution serves distribution's registry, its filesystem driver
// on a fresh temporary directory, deletes enabled. Its collection is
// `registry garbage-collect`, with `--delete-untagged` when untaggedAfter
// is positive (distribution has no period: every untagged manifest goes).
func startDistribution(ctx context.Context, untaggedAfter time.Duration) (*registryServer, error) {
	dir, err := os.MkdirTemp("", "bench-distribution-")
	if err != nil {
		return nil, err
	}
	cfg, err := configuration.Parse(strings.NewReader(fmt.Sprintf(`version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:0
`, dir)))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	appCtx, cancel := context.WithCancel(context.Background())
	app := handlers.NewApp(appCtx, cfg)
	// Its request log (a 404 answering a HEAD is logged as an error) would
	// cost it the terminal's time.
	logrus.SetOutput(io.Discard)
	base, stopHTTP, err := serveHandler(app)
	if err != nil {
		cancel()
		os.RemoveAll(dir)
		return nil, err
	}
	return &registryServer{
		base: base,
		stop: func() { stopHTTP(); app.Shutdown(); cancel(); os.RemoveAll(dir) },
		collect: func(ctx context.Context) (collected, error) {
			var c collected
			before, blobBytes, err := blobFiles(dir)
			if err != nil {
				return c, err
			}
			bytesBefore, err := dirBytes(dir)
			if err != nil {
				return c, err
			}
			t0 := time.Now()
			d, err := factory.Create(ctx, "filesystem", map[string]any{"rootdirectory": dir})
			if err != nil {
				return c, err
			}
			reg, err := storage.NewRegistry(ctx, d, storage.EnableDelete)
			if err != nil {
				return c, err
			}
			if err := storage.MarkAndSweep(ctx, d, reg, storage.GCOpts{Quiet: true, RemoveUntagged: untaggedAfter > 0}); err != nil {
				return c, err
			}
			c.took = time.Since(t0)
			after, blobBytesAfter, err := blobFiles(dir)
			if err != nil {
				return c, err
			}
			bytesAfter, err := dirBytes(dir)
			c.blobs, c.bytes, c.files = before-after, blobBytes-blobBytesAfter, bytesBefore-bytesAfter
			return c, err
		},
		offline: true,
	}, nil
}

// startSteadRegistry serves a fresh stead store from open, the registry
// mounted (serveBench) with untaggedAfter as its DeleteUntaggedAfter, the
// registry and the collector on one clock. Its collection is what `stead
// serve` runs on its GC interval: the registry's Collect on the clock
// moved past untaggedAfter, then sweeps on the clock moved past the grace
// between them, until two in a row free nothing.
func startSteadRegistry(ctx context.Context, open opener, untaggedAfter time.Duration) (*registryServer, error) {
	st, cleanup, err := open(ctx)
	if err != nil {
		return nil, err
	}
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	// Collect logs each deletion, as in `stead serve`; the bench's
	// terminal is spared the lines.
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	base, reg, stop, err := serveBench(st, registry.Options{DeleteUntaggedAfter: untaggedAfter, Now: now, Logger: log})
	if err != nil {
		cleanup()
		return nil, err
	}
	col := gc.New(st.Engine().GC(), gc.Options{Now: now})
	return &registryServer{
		base: base,
		stop: func() { stop(); cleanup() },
		collect: func(ctx context.Context) (collected, error) {
			var c collected
			skew.Add(int64(untaggedAfter + time.Minute))
			t0 := time.Now()
			if _, err := reg.Collect(ctx, registry.CollectOptions{}); err != nil {
				return c, err
			}
			// A manifest goes first, the blobs it alone named at the sweeps
			// after: stage, pass the grace, delete.
			for idle := 0; idle < 2; {
				rep, err := col.Sweep(ctx, gc.SweepOptions{})
				if err != nil {
					return c, err
				}
				c.blobs, c.bytes = c.blobs+int(rep.Deleted), c.bytes+rep.BytesFreed
				if rep.Deleted == 0 && rep.Staged == 0 {
					idle++
				} else {
					idle = 0
				}
				skew.Add(int64(2 * gc.DefaultGrace))
			}
			c.took = time.Since(t0)
			return c, nil
		},
	}, nil
}

// serveHandler serves h on a loopback port.
func serveHandler(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// image is one image's blobs and manifest.
type image struct {
	blobs    [][]byte // config first, then the layers
	manifest []byte
}

// newImage builds an OCI image manifest over config and layers.
func newImage(config []byte, layers ...[]byte) image {
	desc := func(mt string, b []byte) map[string]any {
		return map[string]any{"mediaType": mt, "digest": digestOf(b), "size": len(b)}
	}
	var ls []map[string]any
	for _, l := range layers {
		ls = append(ls, desc("application/vnd.oci.image.layer.v1.tar", l))
	}
	m, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        desc("application/vnd.oci.image.config.v1+json", config),
		"layers":        ls,
	})
	return image{blobs: append([][]byte{config}, layers...), manifest: m}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// filled returns n pseudo-random bytes from seed.
func filled(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := 0; i+8 <= n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b
}

// ociClient is the client code every registry is driven with.
type ociClient struct {
	base string
	http *http.Client
}

// push pushes img to repo:tag: HEAD each blob, upload the missing ones
// (POST, then one PUT with the bytes), PUT the manifest.
func (c *ociClient) push(ctx context.Context, repo, tag string, img image) error {
	for _, b := range img.blobs {
		d := digestOf(b)
		status, _, err := c.send(ctx, "HEAD", c.base+"/v2/"+repo+"/blobs/"+d, nil, "", nil)
		if err != nil {
			return err
		}
		if status == http.StatusOK {
			continue
		}
		status, loc, err := c.send(ctx, "POST", c.base+"/v2/"+repo+"/blobs/uploads/", nil, "", nil)
		if err != nil {
			return err
		}
		if status != http.StatusAccepted {
			return fmt.Errorf("POST upload of %s: %d", repo, status)
		}
		u, err := c.uploadURL(loc, d)
		if err != nil {
			return err
		}
		if status, _, err = c.send(ctx, "PUT", u, b, "application/octet-stream", nil); err != nil {
			return err
		}
		if status != http.StatusCreated {
			return fmt.Errorf("PUT blob %s: %d", d, status)
		}
	}
	status, _, err := c.send(ctx, "PUT", c.base+"/v2/"+repo+"/manifests/"+tag, img.manifest, "application/vnd.oci.image.manifest.v1+json", nil)
	if err == nil && status != http.StatusCreated {
		err = fmt.Errorf("PUT manifest %s:%s: %d", repo, tag, status)
	}
	return err
}

// uploadURL resolves an upload's Location and adds the digest.
func (c *ociClient) uploadURL(loc, digest string) (string, error) {
	base, err := url.Parse(c.base)
	if err != nil {
		return "", err
	}
	u, err := base.Parse(loc)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("digest", digest)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// pull reads repo:tag's manifest and every blob it names, and answers the
// bytes read.
func (c *ociClient) pull(ctx context.Context, repo, tag string) (int64, error) {
	var m bytes.Buffer
	status, _, err := c.send(ctx, "GET", c.base+"/v2/"+repo+"/manifests/"+tag, nil, "", &m)
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("GET manifest %s:%s: %d", repo, tag, status)
	}
	var man struct {
		Config struct {
			Digest string
			Size   int64
		}
		Layers []struct {
			Digest string
			Size   int64
		}
	}
	if err := json.Unmarshal(m.Bytes(), &man); err != nil {
		return 0, err
	}
	total := int64(m.Len())
	for _, d := range append([]struct {
		Digest string
		Size   int64
	}{man.Config}, man.Layers...) {
		var n countWriter
		status, _, err := c.send(ctx, "GET", c.base+"/v2/"+repo+"/blobs/"+d.Digest, nil, "", &n)
		if err != nil {
			return 0, err
		}
		if status != http.StatusOK || int64(n) != d.Size {
			return 0, fmt.Errorf("GET blob %s: %d, %d of %d bytes", d.Digest, status, n, d.Size)
		}
		total += int64(n)
	}
	return total, nil
}

// deleteManifest deletes repo's manifest of img by digest.
func (c *ociClient) deleteManifest(ctx context.Context, repo string, img image) error {
	status, _, err := c.send(ctx, "DELETE", c.base+"/v2/"+repo+"/manifests/"+digestOf(img.manifest), nil, "", nil)
	if err == nil && status != http.StatusAccepted {
		err = fmt.Errorf("DELETE manifest of %s: %d", repo, status)
	}
	return err
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// send sends one request and copies the answer's body to out (discarded
// when nil), answering the status and the Location header.
func (c *ociClient) send(ctx context.Context, method, u string, body []byte, contentType string, out io.Writer) (int, string, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, "", err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if method == "GET" && strings.Contains(u, "/manifests/") {
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if out == nil {
		out = io.Discard
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, resp.Header.Get("Location"), nil
}

// baseLayers are the layers every small image shares.
var baseLayers = [][]byte{filled(1, 256<<10), filled(2, 64<<10), filled(3, 16<<10)}

// smallImage is small image (w, i): the base layers and a 4 KiB layer and
// a config of its own.
func smallImage(w, i int) image {
	seed := uint64(w)<<40 | uint64(i)
	config := fmt.Appendf(nil, `{"architecture":"amd64","os":"linux","bench":"%d/%d"}`, w, i)
	return newImage(config, append(cloneLayers(baseLayers), filled(seed+1000, 4<<10))...)
}

func cloneLayers(layers [][]byte) [][]byte { return append([][]byte(nil), layers...) }

// largeLayer is reused by the large images, its first 16 bytes made
// distinct per image, so a push hashes and sends fresh bytes without
// generating them.
var largeLayer = sync.OnceValue(func() []byte { return filled(7, *distLargeMiB<<20) })

func largeImage(w, i int) image {
	l := bytes.Clone(largeLayer())
	binary.LittleEndian.PutUint64(l, uint64(w)+1)
	binary.LittleEndian.PutUint64(l[8:], uint64(i))
	config := fmt.Appendf(nil, `{"architecture":"amd64","os":"linux","large":"%d/%d"}`, w, i)
	return newImage(config, l)
}

// distImages pushes a new image per op, or pulls one of 20 pushed in
// setup, through a fresh registry from start.
func distImages(start func(context.Context) (*registryServer, error), large, pull bool) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		rs, err := start(ctx)
		if err != nil {
			return nil, nil, err
		}
		c := &ociClient{base: rs.base, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}}
		mk := smallImage
		if large {
			mk = largeImage
		}
		if !pull {
			return func(ctx context.Context, w, i int) error {
				return c.push(ctx, fmt.Sprintf("bench/w%d", w%4), fmt.Sprintf("t%d-%d", w, i), mk(w, i))
			}, rs.stop, nil
		}
		images := 20
		if large {
			images = 2
		}
		for k := range images {
			if err := c.push(ctx, "bench/pull", fmt.Sprint("t", k), mk(-1, k)); err != nil {
				rs.stop()
				return nil, nil, err
			}
		}
		return func(ctx context.Context, w, i int) error {
			_, err := c.pull(ctx, "bench/pull", fmt.Sprint("t", (w+i)%images))
			return err
		}, rs.stop, nil
	}
}

// gcResult is one collection's outcome, printed after the results.
type gcResult struct {
	backend string
	callers int
	collected
	pushes, pushFails int
	offline           bool
}

var (
	gcResultsMu sync.Mutex
	gcResults   []gcResult
)

// distCollect is a drain: setup pushes 20 small images (tags t0…t19) and
// deletes 10 of them by manifest digest; the round's one op collects. A
// stead registry takes pushes of new images meanwhile, one caller's worth
// (counted); distribution's collection runs with no request served.
func distCollect(name string, start func(context.Context) (*registryServer, error)) func(ctx context.Context, callers int) (func(ctx context.Context, worker, i int) (int, error), func(), error) {
	return func(ctx context.Context, callers int) (func(ctx context.Context, worker, i int) (int, error), func(), error) {
		rs, err := start(ctx)
		if err != nil {
			return nil, nil, err
		}
		c := &ociClient{base: rs.base, http: &http.Client{}}
		var imgs []image
		for k := range 20 {
			img := smallImage(-2, k)
			if err := c.push(ctx, "bench/gc", fmt.Sprint("t", k), img); err != nil {
				rs.stop()
				return nil, nil, err
			}
			imgs = append(imgs, img)
		}
		for k := 0; k < 20; k += 2 {
			if err := c.deleteManifest(ctx, "bench/gc", imgs[k]); err != nil {
				rs.stop()
				return nil, nil, err
			}
		}
		var once sync.Once
		return func(ctx context.Context, w, i int) (int, error) {
			n, err := 0, error(nil)
			ran := false
			once.Do(func() {
				ran = true
				res := gcResult{backend: name, callers: callers, offline: rs.offline}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				if !rs.offline {
					wg.Go(func() {
						for j := 0; ; j++ {
							select {
							case <-stop:
								return
							default:
							}
							if err := c.push(ctx, "bench/gc-meanwhile", fmt.Sprint("m", j), smallImage(-3, j)); err != nil {
								res.pushFails++
							} else {
								res.pushes++
							}
						}
					})
				}
				res.collected, err = rs.collect(ctx)
				n = res.blobs
				close(stop)
				wg.Wait()
				if err != nil {
					return
				}
				gcResultsMu.Lock()
				gcResults = append(gcResults, res)
				gcResultsMu.Unlock()
			})
			if !ran {
				return 0, nil
			}
			if err == nil && n == 0 {
				err = errors.New("the collection freed no blob")
			}
			return n, err
		}, rs.stop, nil
	}
}

// printGCResults prints each collection's time, blobs and bytes freed and
// the pushes that completed meanwhile (medians would hide nothing here:
// every round is listed).
func printGCResults() {
	if len(gcResults) == 0 {
		return
	}
	sort.SliceStable(gcResults, func(i, j int) bool { return gcResults[i].callers < gcResults[j].callers })
	fmt.Printf("\ncollections (oci-dist-gc): 10 of 20 images deleted by manifest digest\n")
	for _, r := range gcResults {
		meanwhile := fmt.Sprintf("%d pushes completed meanwhile, %d failed", r.pushes, r.pushFails)
		if r.offline {
			meanwhile = "offline: no push can run (garbage-collect needs the registry stopped or read-only)"
		}
		// Bytes freed: the filesystem driver's files (blob data, links,
		// revisions) for distribution, the deleted blobs' sizes for stead.
		freed := r.bytes
		if r.files > 0 {
			freed = r.files
		}
		fmt.Printf("  %-14s callers %-2d  %8.1f ms  %3d blobs  %9d bytes freed  %s\n", r.backend, r.callers, millis(r.took), r.blobs, freed, meanwhile)
	}
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// blobFiles counts a filesystem driver's blob data files under dir, one
// per blob, and sums their sizes.
func blobFiles(dir string) (int, int64, error) {
	n, total := 0, int64(0)
	err := filepath.WalkDir(filepath.Join(dir, "docker", "registry", "v2", "blobs"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "data" {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n, total = n+1, total+info.Size()
		return nil
	})
	return n, total, err
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	return total, err
}
