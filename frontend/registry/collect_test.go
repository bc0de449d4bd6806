package registry_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
)

const (
	imageMT    = "application/vnd.oci.image.manifest.v1+json"
	indexMT    = "application/vnd.oci.image.index.v1+json"
	configMT   = "application/vnd.oci.image.config.v1+json"
	layerMT    = "application/vnd.oci.image.layer.v1.tar"
	artifactMT = "application/vnd.example.sbom"
)

// collectClient serves a registry over a memory store on a fake clock,
// with a one-second grace and untagged manifests deleted after an hour.
func collectClient(t *testing.T) (*client, *registry.Registry, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Now())
	st, err := stead.Open(context.Background(), "mem://", stead.WithClock(clk.Now), stead.WithGCGrace(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{DeleteUntaggedAfter: time.Hour, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	addr := fronttest.Serve(t, st, server.Options{Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	t.Cleanup(func() {
		st.Close()
	})
	return &client{t: t, base: "http://" + addr, st: st}, reg, clk
}

type pushed struct {
	manifest string         // its bytes
	digest   string         // its digest
	blobs    map[string]int // digest -> size of what it names
}

// putManifest pushes a manifest of media type mt under ref.
func (c *client) putManifest(repo, ref, mt, body string) string {
	c.t.Helper()
	resp, b := c.do("PUT", "/v2/"+repo+"/manifests/"+ref, map[string]string{"Content-Type": mt}, []byte(body))
	if resp.StatusCode != http.StatusCreated {
		c.t.Fatalf("put manifest %s = %d %s", ref, resp.StatusCode, b)
	}
	return digestOf([]byte(body))
}

// pushImage pushes an image of the shared base layer and a layer and
// config of its own, HEADing the base first as clients do, under ref.
func (c *client) pushImage(repo, ref string, base []byte, own string) pushed {
	c.t.Helper()
	cfg := []byte(`{"own":"` + own + `"}`)
	layer := bytes.Repeat([]byte(own), 1000)
	if resp, _ := c.do("HEAD", "/v2/"+repo+"/blobs/"+digestOf(base), nil, nil); resp.StatusCode != 200 {
		c.pushBlob(repo, base)
	}
	c.pushBlob(repo, cfg)
	c.pushBlob(repo, layer)
	man := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":%q,"digest":%q,"size":%d},"layers":[{"mediaType":%q,"digest":%q,"size":%d},{"mediaType":%q,"digest":%q,"size":%d}]}`,
		imageMT, configMT, digestOf(cfg), len(cfg), layerMT, digestOf(base), len(base), layerMT, digestOf(layer), len(layer))
	return pushed{manifest: man, digest: c.putManifest(repo, ref, imageMT, man),
		blobs: map[string]int{digestOf(cfg): len(cfg), digestOf(base): len(base), digestOf(layer): len(layer)}}
}

// TestDeletedImagesGo pushes images sharing a base layer (HEADing it
// before each push), an index tagging an untagged manifest and referrers,
// then deletes two images' tags: once the untagged policy's hour and the
// grace passed on a fake clock, Collect deletes the two untagged manifests
// and the referrer of one, and the sweeps that follow free their own
// layers and configs, while the still-tagged images, the index's child
// and the referrer of a kept image pull byte-identical.
func TestDeletedImagesGo(t *testing.T) {
	t.Parallel()
	c, reg, clk := collectClient(t)
	ctx := context.Background()
	base := bytes.Repeat([]byte("shared base layer\n"), 1000)
	var imgs []pushed
	for i := range 5 {
		ref := fmt.Sprintf("v%d", i)
		if i == 4 {
			ref = "" // pushed by digest below, kept by the index
		}
		if ref == "" {
			img := c.pushImage("app", "v4", base, "own 4")
			if resp, _ := c.do("DELETE", "/v2/app/manifests/v4", nil, nil); resp.StatusCode != 202 {
				t.Fatal("untagging v4")
			}
			imgs = append(imgs, img)
			continue
		}
		imgs = append(imgs, c.pushImage("app", ref, base, fmt.Sprintf("own %d", i)))
	}
	index := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"manifests":[{"mediaType":%q,"digest":%q,"size":%d}]}`,
		indexMT, imageMT, imgs[4].digest, len(imgs[4].manifest))
	indexDigest := c.putManifest("app", "multi", indexMT, index)
	referrer := func(subject pushed) (string, string) {
		empty := c.pushBlob("app", []byte("{}"))
		body := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"artifactType":%q,"config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":%q,"size":2},"layers":[],"subject":{"mediaType":%q,"digest":%q,"size":%d}}`,
			imageMT, artifactMT, empty, imageMT, subject.digest, len(subject.manifest))
		return body, c.putManifest("app", digestOf([]byte(body)), imageMT, body)
	}
	_, goneReferrer := referrer(imgs[0])
	keptReferrerBody, keptReferrer := referrer(imgs[3])
	for _, tag := range []string{"v0", "v1"} {
		if resp, body := c.do("DELETE", "/v2/app/manifests/"+tag, nil, nil); resp.StatusCode != 202 {
			t.Fatalf("DELETE %s = %d %s", tag, resp.StatusCode, body)
		}
	}

	clk.Advance(30 * time.Minute)
	if got, err := reg.Collect(ctx, registry.CollectOptions{}); err != nil || len(got.Deleted) != 0 {
		t.Fatalf("Collect within the hour = %+v, %v; want nothing deleted", got, err)
	}
	clk.Advance(time.Hour)
	if got, err := reg.Collect(ctx, registry.CollectOptions{}); err != nil || len(got.Deleted) != 3 {
		t.Fatalf("Collect past the hour = %+v, %v; want 3 manifests deleted", got, err)
	}
	for range 6 { // staging passes begin once a grace; each level of references takes one
		if _, err := c.st.GC.Sweep(ctx, gc.SweepOptions{}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Second)
	}

	for _, gone := range []string{imgs[0].digest, imgs[1].digest, goneReferrer} {
		if has(t, c.st, digest.Digest(gone)) {
			t.Errorf("manifest %s is still stored", gone)
		}
	}
	for _, img := range imgs[:2] {
		for d := range img.blobs {
			if d == digestOf(base) {
				continue
			}
			if has(t, c.st, digest.Digest(d)) {
				t.Errorf("a deleted image's own blob %s is still stored", d)
			}
		}
	}
	pull := func(ref, want string) {
		t.Helper()
		resp, body := c.do("GET", "/v2/app/manifests/"+ref, nil, nil)
		if resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("GET manifest %s = %d %.200s", ref, resp.StatusCode, body)
		}
	}
	for i, img := range imgs[2:] {
		ref := img.digest
		if i < 2 {
			ref = fmt.Sprintf("v%d", i+2)
		}
		pull(ref, img.manifest)
		for d, size := range img.blobs {
			resp, body := c.do("GET", "/v2/app/blobs/"+d, nil, nil)
			if resp.StatusCode != 200 || len(body) != size || digestOf(body) != d {
				t.Fatalf("GET blob %s of %s = %d, %d bytes", d, ref, resp.StatusCode, len(body))
			}
		}
	}
	pull("multi", index)
	pull(indexDigest, index)
	pull(keptReferrer, keptReferrerBody)
}
