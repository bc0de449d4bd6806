package registry_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
)

// TestMonolithicPushReadOverV1: a layer pushed in one request to a store
// with a bytes tier is a bucket object, and /v1 serves it byte for byte;
// once its object is gone, a pull is the registry's fault (500), not the
// client's digest (400 DIGEST_INVALID).
func TestMonolithicPushReadOverV1(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "s.db") + "?bytes=" + url.QueryEscape("file://"+filepath.ToSlash(bucket))
	st, err := stead.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{MaxBlobSize: 4 << 20})
	addr := fronttest.Serve(t, st, server.Options{Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	t.Cleanup(func() {
		st.Close()
	})
	c := &client{t: t, base: "http://" + addr, st: st}
	layer := make([]byte, 2*blob.InlineLimit+11)
	_, _ = rand.NewChaCha8([32]byte{5}).Read(layer)
	d := digestOf(layer)
	if resp, body := c.do("POST", "/v2/r/blobs/uploads/?digest="+d, nil, layer); resp.StatusCode != http.StatusCreated {
		t.Fatalf("monolithic push = %d %s", resp.StatusCode, body)
	}
	key, err := blob.ParseKey(d)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.Engine().Blobs().Get(t.Context(), key)
	if err != nil || stored.Object == "" {
		t.Fatalf("the pushed layer is stored as %+v (%v), want an object", stored, err)
	}
	if resp, body := c.do("GET", "/v1/blobs/"+d, nil, nil); resp.StatusCode != http.StatusOK || !bytes.Equal(body, layer) {
		t.Fatalf("GET /v1/blobs of the layer = %d, %d bytes, want 200 and its %d", resp.StatusCode, len(body), len(layer))
	}
	if err := os.Remove(filepath.Join(bucket, filepath.FromSlash(stored.Object))); err != nil {
		t.Fatal(err)
	}
	if resp, body := c.do("GET", "/v2/r/blobs/"+d, nil, nil); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("pull of a layer whose object is gone = %d %s, want 500", resp.StatusCode, body)
	}
}
