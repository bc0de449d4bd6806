package registry_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

// TestBlobLinksAreWeak: a repository's link of a blob is a weak ref to
// the blob itself. Pushes (whole, chunked) and mounts put no empty blob;
// a link keeps nothing, so once the pending refs lapse a sweep takes the
// blobs, their links go with them, and the blobs answer BLOB_UNKNOWN.
func TestBlobLinksAreWeak(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	const pendingTTL, grace = time.Hour, time.Minute
	st, addr := serveRegistry(t, "mem://", registry.Options{PendingTTL: pendingTTL},
		stead.WithClock(clk.Now), stead.WithPinTTL(time.Minute), stead.WithGCGrace(grace))
	c := &client{t: t, base: "http://" + addr, st: st}

	whole := c.pushBlob("r", []byte("a whole layer"))
	resp, body := c.do("POST", "/v2/r/blobs/uploads/", nil, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("start upload = %d %s", resp.StatusCode, body)
	}
	chunked := digestOf([]byte("a chunked layer"))
	resp, body = c.do("PUT", resp.Header.Get("Location")+"?digest="+chunked, nil, []byte("a chunked layer"))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("finish upload = %d %s", resp.StatusCode, body)
	}
	resp, body = c.do("POST", "/v2/s/blobs/uploads/?mount="+whole+"&from=r", nil, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("mount = %d %s", resp.StatusCode, body)
	}
	if has, err := st.Blobs.Has(ctx, blob.KeyOf(nil)); err != nil || has {
		t.Fatalf("Has(the empty blob) = %v, %v; want no empty blob put", has, err)
	}
	links := map[string]blob.Key{}
	for name, d := range map[string]string{"oci/r/_blobs/" + whole: whole, "oci/r/_blobs/" + chunked: chunked, "oci/s/_blobs/" + whole: whole} {
		k, err := blob.ParseKey(d)
		if err != nil {
			t.Fatal(err)
		}
		links[name] = k
	}
	for name, d := range links {
		r, err := st.Refs.Get(ctx, name)
		if err != nil || r.Key != d || !r.Weak {
			t.Fatalf("link %s = %+v, %v; want a weak ref to %s", name, r, err, d)
		}
	}

	clk.Advance(pendingTTL)
	for range 2 {
		if _, err := st.GC.Sweep(ctx, gc.SweepOptions{}); err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		clk.Advance(grace)
	}
	for name, d := range links {
		if has, err := st.Blobs.Has(ctx, d); err != nil || has {
			t.Fatalf("Has(%s) after its pending refs lapsed = %v, %v; want it collected", d, has, err)
		}
		if _, err := st.Refs.Get(ctx, name); !errors.Is(err, steaderr.ErrNotFound) {
			t.Fatalf("link %s after its blob was collected: %v, want ErrNotFound", name, err)
		}
	}
	for _, path := range []string{"/v2/r/blobs/" + whole, "/v2/r/blobs/" + chunked, "/v2/s/blobs/" + whole} {
		resp, body := c.do("GET", path, nil, nil)
		wantError(t, "GET of a collected blob", resp, body, http.StatusNotFound, "BLOB_UNKNOWN")
		if resp, _ := c.do("HEAD", path, nil, nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("HEAD of a collected blob = %d, want 404", resp.StatusCode)
		}
	}
}
