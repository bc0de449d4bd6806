package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// The oci-dist-untag group: per registry, 10 small images (sharing the
// base layers) pushed under tags t0…t9, the tags of 3 deleted (DELETE
// /v2/<name>/manifests/<tag>, which both registries serve: the manifests
// stay, untagged), then one collection per round (a drain, its rate the
// blobs freed per second): distribution's `garbage-collect
// --delete-untagged` (storage.MarkAndSweep with RemoveUntagged), stead's
// registry Collect with DeleteUntaggedAfter then its sweeps (on a clock
// moved past the untagged period, then past the grace between sweeps),
// and, for contrast, stead with its defaults (no untagged policy). After
// each collection the 7 still-tagged images are pulled and checked
// byte-identical to what was pushed, and each untagged manifest is
// fetched by digest: gone under a policy, still served under the
// defaults. A failed check ends the bench.

const (
	untagGroup  = "oci-dist-untag"
	untagRepo   = "bench/untag"
	untagImages = 10
	// untagPeriod is stead's DeleteUntaggedAfter in the group.
	untagPeriod = time.Hour
)

// untagDeleted are the images whose tags are deleted.
var untagDeleted = []int{1, 4, 7}

func untagImage(k int) image { return smallImage(-4, k) }

func distUntagScenarios() []scenario {
	var all, defaults []scenario
	backends := distBackends()
	for i, b := range backends {
		sc := scenario{group: untagGroup, name: "untagged " + b.name, drain: distUntag(i, b.name, b.start, untagPeriod)}
		if b.name != "distribution" {
			sc.base = "untagged distribution"
			defaults = append(defaults, scenario{group: untagGroup, name: "defaults " + b.name, drain: distUntag(len(backends)+i, b.name, b.start, 0)})
		}
		all = append(all, sc)
	}
	return append(all, defaults...)
}

// untagResult is one collection of oci-dist-untag, recorded once its
// checks passed.
type untagResult struct {
	order   int // the scenario's, for printing
	backend string
	callers int
	policy  bool // distribution's --delete-untagged, stead's DeleteUntaggedAfter
	offline bool
	collected
}

var (
	untagResultsMu sync.Mutex
	untagResults   []untagResult
)

// distUntag is oci-dist-untag's drain on a registry from start, with
// untaggedAfter as its untagged period (0: none); order places its
// results when printed.
func distUntag(order int, name string, start startRegistry, untaggedAfter time.Duration) func(ctx context.Context, callers int) (func(ctx context.Context, worker, i int) (int, error), func(), error) {
	return func(ctx context.Context, callers int) (func(ctx context.Context, worker, i int) (int, error), func(), error) {
		rs, err := start(ctx, untaggedAfter)
		if err != nil {
			return nil, nil, err
		}
		c := &ociClient{base: rs.base, http: &http.Client{}}
		for k := range untagImages {
			if err := c.push(ctx, untagRepo, fmt.Sprint("t", k), untagImage(k)); err != nil {
				rs.stop()
				return nil, nil, err
			}
		}
		for _, k := range untagDeleted {
			if err := c.deleteTag(ctx, untagRepo, fmt.Sprint("t", k)); err != nil {
				rs.stop()
				return nil, nil, err
			}
		}
		res := untagResult{order: order, backend: name, callers: callers, policy: untaggedAfter > 0, offline: rs.offline}
		var once sync.Once
		ran := false // the collection ran and succeeded
		op := func(ctx context.Context, w, i int) (int, error) {
			n, err, first := 0, error(nil), false
			once.Do(func() {
				first = true
				res.collected, err = rs.collect(ctx)
				n, ran = res.blobs, err == nil
			})
			if first && err == nil && n == 0 && res.policy {
				err = errors.New("the collection freed no blob")
			}
			return n, err
		}
		cleanup := func() {
			var err error
			if ran {
				err = checkUntagged(ctx, c, res.policy)
			}
			rs.stop()
			if err != nil {
				fatalf("%s, %s (untagged policy %v): %v", untagGroup, name, res.policy, err)
			}
			if ran {
				untagResultsMu.Lock()
				untagResults = append(untagResults, res)
				untagResultsMu.Unlock()
			}
		}
		return op, cleanup, nil
	}
}

// checkUntagged pulls every still-tagged image and checks it
// byte-identical to the one pushed, and fetches each untagged manifest by
// digest: gone when the collection had an untagged policy, else served.
func checkUntagged(ctx context.Context, c *ociClient, policy bool) error {
	for k := range untagImages {
		img := untagImage(k)
		if !slices.Contains(untagDeleted, k) {
			if err := c.pullExact(ctx, untagRepo, fmt.Sprint("t", k), img); err != nil {
				return err
			}
			continue
		}
		d := digestOf(img.manifest)
		status, _, err := c.send(ctx, "GET", c.base+"/v2/"+untagRepo+"/manifests/"+d, nil, "", nil)
		if err != nil {
			return err
		}
		want := http.StatusOK
		if policy {
			want = http.StatusNotFound
		}
		if status != want {
			return fmt.Errorf("GET untagged manifest %s@%s after the collection: %d, want %d", untagRepo, d, status, want)
		}
	}
	return nil
}

// pullExact pulls repo:tag and checks its manifest and every blob the
// manifest names byte-identical to img's.
func (c *ociClient) pullExact(ctx context.Context, repo, tag string, img image) error {
	var got bytes.Buffer
	status, _, err := c.send(ctx, "GET", c.base+"/v2/"+repo+"/manifests/"+tag, nil, "", &got)
	if err != nil {
		return err
	}
	if status != http.StatusOK || !bytes.Equal(got.Bytes(), img.manifest) {
		return fmt.Errorf("GET manifest %s:%s: %d, %d bytes read, not byte-identical to the %d pushed", repo, tag, status, got.Len(), len(img.manifest))
	}
	// The manifest is the one pushed, so the blobs it names are img's.
	for _, b := range img.blobs {
		got.Reset()
		d := digestOf(b)
		status, _, err := c.send(ctx, "GET", c.base+"/v2/"+repo+"/blobs/"+d, nil, "", &got)
		if err != nil {
			return err
		}
		if status != http.StatusOK || !bytes.Equal(got.Bytes(), b) {
			return fmt.Errorf("GET blob %s of %s:%s: %d, %d bytes read, not byte-identical to the %d pushed", d, repo, tag, status, got.Len(), len(b))
		}
	}
	return nil
}

// deleteTag deletes repo's tag, leaving its manifest untagged.
func (c *ociClient) deleteTag(ctx context.Context, repo, tag string) error {
	status, _, err := c.send(ctx, "DELETE", c.base+"/v2/"+repo+"/manifests/"+tag, nil, "", nil)
	if err == nil && status != http.StatusAccepted {
		err = fmt.Errorf("DELETE tag %s:%s: %d", repo, tag, status)
	}
	return err
}

// printUntagResults prints each collection of oci-dist-untag: its time,
// the blobs and bytes it freed, against what the untagged images alone
// hold (their manifests, configs and own layers).
func printUntagResults() {
	if len(untagResults) == 0 {
		return
	}
	var own int64
	for _, k := range untagDeleted {
		img := untagImage(k)
		own += int64(len(img.manifest) + len(img.blobs[0]) + len(img.blobs[len(img.blobs)-1]))
	}
	fmt.Printf("\ncollections (%s): %d of %d tags deleted; the untagged images alone hold %d blobs, %d bytes\n",
		untagGroup, len(untagDeleted), untagImages, 3*len(untagDeleted), own)
	slices.SortStableFunc(untagResults, func(a, b untagResult) int { return cmp.Or(a.callers-b.callers, a.order-b.order) })
	for _, r := range untagResults {
		how := "defaults (no untagged policy)"
		switch {
		case r.policy && r.offline:
			how = "garbage-collect --delete-untagged, offline"
		case r.policy:
			how = fmt.Sprintf("delete untagged after %v, online", untagPeriod)
		}
		files := ""
		if r.files > 0 {
			files = fmt.Sprintf(" (%d bytes of files)", r.files)
		}
		fmt.Printf("  %-14s callers %-2d  %8.1f ms  %3d blobs  %9d bytes freed%s  %s\n", r.backend, r.callers, millis(r.took), r.blobs, r.bytes, files, how)
	}
	fmt.Printf("  after each: the %d still-tagged images pulled byte-identical; the untagged manifests gone under a policy, served under the defaults\n", untagImages-len(untagDeleted))
}
