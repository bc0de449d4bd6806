package registry_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/fronttest"
)

// TestOnlineGC pushes images that share a base layer into two
// repositories with skopeo, then deletes two of them (one whose image
// another repository still tags) while skopeo pushes more and pulls the
// tagged ones, and sweeps run back to back with a tiny grace: every pull
// succeeds byte-identical throughout, and once the grace and the pins
// lapsed, the layers only the deleted image reached are gone while every
// tagged image still pulls whole.
func TestOnlineGC(t *testing.T) {
	t.Parallel()
	skopeo := fronttest.Tool(t, "skopeo", "STEAD_SKOPEO", "STEAD_REQUIRE_SKOPEO")
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			// A push must fit in pendingTTL (the default is a day); on a loaded
			// machine skopeo may take a few seconds between layers and manifest.
			const pinTTL, grace, pendingTTL = 300 * time.Millisecond, 50 * time.Millisecond, 5 * time.Second
			st, addr := serveRegistry(t, e.url(t), registry.Options{PendingTTL: pendingTTL}, stead.WithPinTTL(pinTTL), stead.WithGCGrace(grace))
			dir := t.TempDir()
			base := bytes.Repeat([]byte("shared base layer\n"), 4<<10)
			layout := func(name string, seed uint64) (string, image) {
				p := filepath.Join(dir, name)
				return p, writeLayout(t, p, "v", seed, 2, 64<<10, base)
			}
			push := func(src, ref string) {
				run(t, dir, skopeo, "copy", "--preserve-digests", "--dest-tls-verify=false", "oci:"+src+":v", "docker://"+addr+"/"+ref)
			}
			var pulls atomic.Int64
			pull := func(ref string, img image, src string) error {
				back := filepath.Join(t.TempDir(), "pull")
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if out, err := fronttestRun(ctx, dir, skopeo, "copy", "--preserve-digests", "--src-tls-verify=false", "docker://"+addr+"/"+ref, "oci:"+back+":v"); err != nil {
					return fmt.Errorf("pull %s: %v\n%s", ref, err, out)
				}
				pulls.Add(1)
				return compareBlobs(src, back, img)
			}

			a1src, a1 := layout("a1", 1)
			a2src, a2 := layout("a2", 2)
			b1src, b1 := layout("b1", 3)
			push(a1src, "gc/one:a1")
			push(a2src, "gc/one:a2")
			push(b1src, "gc/two:b1")
			push(a1src, "gc/two:a1")

			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var sweeps atomic.Int64
			errs := make(chan error, 100)
			wg.Add(2)
			go func() { // sweeps, back to back
				defer wg.Done()
				for ctx.Err() == nil {
					if _, err := st.GC.Sweep(ctx, gc.SweepOptions{}); err != nil && ctx.Err() == nil {
						errs <- fmt.Errorf("sweep: %w", err)
						return
					}
					sweeps.Add(1)
				}
			}()
			go func() { // pulls of what stays tagged
				defer wg.Done()
				for ctx.Err() == nil {
					for _, p := range []struct {
						ref, src string
						img      image
					}{{"gc/one:a1", a1src, a1}, {"gc/two:b1", b1src, b1}} {
						if err := pull(p.ref, p.img, p.src); err != nil {
							errs <- err
							return
						}
					}
				}
			}()

			// Deletes (skopeo deletes the manifest by digest, with every
			// tag naming it) while new images are pushed.
			run(t, dir, skopeo, "delete", "--tls-verify=false", "docker://"+addr+"/gc/one:a2")
			run(t, dir, skopeo, "delete", "--tls-verify=false", "docker://"+addr+"/gc/two:a1")
			var pushed []struct {
				ref, src string
				img      image
			}
			for i := range 3 {
				src, img := layout(fmt.Sprintf("c%d", i), uint64(10+i))
				push(src, fmt.Sprintf("gc/one:c%d", i))
				pushed = append(pushed, struct {
					ref, src string
					img      image
				}{fmt.Sprintf("gc/one:c%d", i), src, img})
			}

			// Once the pins, the pending refs and the grace lapsed, the
			// sweeps take a2's own layers, its config and its manifest.
			gone := append([]digest.Digest{a2.manifest}, a2.layers[1:]...) // a2.layers[0] is the shared base
			deadline := time.Now().Add(30 * time.Second)
			for {
				left := 0
				for _, d := range gone {
					if has(t, st, d) {
						left++
					}
				}
				if left == 0 {
					break
				}
				if time.Now().After(deadline) {
					for _, d := range gone {
						k, _ := blob.ParseKey(d.String())
						ex, err := st.GC.Explain(context.Background(), k)
						t.Logf("%s: %+v %v", d, ex, err)
					}
					t.Fatalf("%d of a2's %d blobs still stored 30s after its delete (%d sweeps)", left, len(gone), sweeps.Load())
				}
				time.Sleep(100 * time.Millisecond)
			}
			stop()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if pulls.Load() == 0 || sweeps.Load() == 0 {
				t.Fatalf("%d pulls and %d sweeps ran during the deletes", pulls.Load(), sweeps.Load())
			}
			for _, d := range append(append([]digest.Digest{a1.manifest}, a1.layers...), b1.manifest) {
				if !has(t, st, d) {
					t.Errorf("blob %s of a tagged image was collected", d)
				}
			}
			for _, p := range append(pushed, struct {
				ref, src string
				img      image
			}{"gc/one:a1", a1src, a1}, struct {
				ref, src string
				img      image
			}{"gc/two:b1", b1src, b1}) {
				if err := pull(p.ref, p.img, p.src); err != nil {
					t.Error(err)
				}
			}
			t.Logf("%d pulls and %d sweeps ran", pulls.Load(), sweeps.Load())
		})
	}
}

func has(t *testing.T, st *stead.Store, d digest.Digest) bool {
	t.Helper()
	k, err := blob.ParseKey(d.String())
	if err != nil {
		t.Fatal(err)
	}
	ok, err := st.Blobs.Has(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
