package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// fleet is the stead serve processes of one database behind a
// round-robin reverse proxy.
type fleet struct {
	t     *testing.T
	db    string
	flags []string

	mu      sync.Mutex
	servers []*process // by slot; a killed one stays until restarted
	next    int

	// hook, when set, sees each request to an upload (with the slot of
	// the server it went to, once the proxy connected to one) before its
	// body is forwarded, and may wrap the body; done sees its answer.
	hook atomic.Pointer[fleetHook]
	// chunks counts the requests that carried an upload's bytes.
	chunks atomic.Int64
}

type fleetHook struct {
	body func(slot func() int, body io.ReadCloser) io.ReadCloser
	done func(r *http.Request, slot int, resp *http.Response)
}

// slotKey carries a request's *int slot, set once the proxy connects.
type slotKey struct{}

// startFleet starts n stead serve processes over db, one after another
// (the first migrates the store), and the proxy in front of them; it
// returns the proxy's host:port.
func startFleet(t *testing.T, db string, n int, flags ...string) (*fleet, string) {
	t.Helper()
	f := &fleet{t: t, db: db, flags: flags}
	for range n {
		f.servers = append(f.servers, startServe(t, db, "", flags...))
	}
	tr := &http.Transport{DisableKeepAlives: true, DialContext: f.dial}
	t.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "fleet"})
			pr.Out.Host = pr.In.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			if h := f.hook.Load(); h != nil && h.done != nil && isUpload(resp.Request) {
				h.done(resp.Request, *resp.Request.Context().Value(slotKey{}).(*int), resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// A server that went away mid-request: the client's
			// connection ends after its request, with no answer, as
			// through a TCP load balancer.
			if b, ok := r.Context().Value(heldKey{}).(*heldBody); ok {
				_, _ = io.Copy(io.Discard, b)
			}
			panic(http.ErrAbortHandler)
		},
	}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slot := -1
		r = r.WithContext(context.WithValue(r.Context(), slotKey{}, &slot))
		if isUpload(r) && r.ContentLength != 0 && (r.Method == http.MethodPatch || r.Method == http.MethodPut) {
			f.chunks.Add(1)
		}
		if h := f.hook.Load(); h != nil && h.body != nil && isUpload(r) && r.Body != nil {
			r.Body = h.body(func() int { return slot }, r.Body)
		}
		if r.Body != nil {
			b := &heldBody{r: r.Body}
			r.Body = b
			r = r.WithContext(context.WithValue(r.Context(), heldKey{}, b))
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	return f, strings.TrimPrefix(proxy.URL, "http://")
}

// heldBody is a request body the transport may close (and read from
// another goroutine) while the proxy still reads it to its end; heldKey
// carries it in the request's context.
type heldBody struct {
	mu sync.Mutex
	r  io.Reader
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.r.Read(p)
}

func (b *heldBody) Close() error { return nil }

type heldKey struct{}

func isUpload(r *http.Request) bool { return strings.Contains(r.URL.Path, "/blobs/uploads/") }

// dial connects to the next server in turn that accepts the connection:
// every request has a connection of its own (no keep-alive), so requests
// go round the fleet. The slot it picked is told to the request.
func (f *fleet) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	f.mu.Lock()
	n := len(f.servers)
	start := f.next
	f.next = (f.next + 1) % n
	f.mu.Unlock()
	var last error
	for i := range n {
		slot := (start + i) % n
		f.mu.Lock()
		addr := strings.TrimPrefix(f.servers[slot].base, "http://")
		f.mu.Unlock()
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err == nil {
			if p, ok := ctx.Value(slotKey{}).(*int); ok {
				*p = slot
			}
			return conn, nil
		}
		last = err // refused: a server that is down is skipped
	}
	return nil, fmt.Errorf("no server of the fleet accepts connections: %w", last)
}

// kill SIGKILLs the server in slot and waits for it to be gone.
func (f *fleet) kill(slot int) {
	f.mu.Lock()
	p := f.servers[slot]
	f.mu.Unlock()
	_ = p.cmd.Process.Kill()
	err := <-p.done
	p.done <- err // for startServe's cleanup
}

// restart starts a new server in slot, over the same database.
func (f *fleet) restart(slot int) {
	p := startServe(f.t, f.db, "", f.flags...)
	f.mu.Lock()
	f.servers[slot] = p
	f.mu.Unlock()
}

// killMidBody makes the first request to an upload that carries more than
// after bytes kill its server once that many are forwarded, mid-body; it
// returns the slot killed (-1 until then).
func (f *fleet) killMidBody(after int64) *atomic.Int64 {
	killed := &atomic.Int64{}
	killed.Store(-1)
	var once atomic.Bool
	f.hook.Store(&fleetHook{body: func(slot func() int, body io.ReadCloser) io.ReadCloser {
		return &tripBody{ReadCloser: body, after: after, trip: func() {
			if once.CompareAndSwap(false, true) {
				s := slot()
				f.kill(s)
				killed.Store(int64(s))
			}
		}}
	}})
	return killed
}

// killAfterChunk makes the first PATCH of more than size bytes that its
// server accepted kill that server before the client is answered, so that
// the upload goes on through another; it returns the slot killed (-1
// until then), and whether a PUT then finished that upload.
func (f *fleet) killAfterChunk(size int64) (killed *atomic.Int64, finished *atomic.Bool) {
	killed, finished = &atomic.Int64{}, &atomic.Bool{}
	killed.Store(-1)
	var once atomic.Bool
	var upload atomic.Pointer[string]
	f.hook.Store(&fleetHook{done: func(r *http.Request, slot int, resp *http.Response) {
		switch {
		case r.Method == http.MethodPatch && resp.StatusCode == http.StatusAccepted && rangeEnd(resp) >= size && once.CompareAndSwap(false, true):
			path := r.URL.Path
			upload.Store(&path)
			f.kill(slot)
			killed.Store(int64(slot))
		case r.Method == http.MethodPut && resp.StatusCode == http.StatusCreated && upload.Load() != nil && *upload.Load() == r.URL.Path:
			finished.Store(true)
		}
	}})
	return killed, finished
}

// rangeEnd is the last byte of an upload's Range header.
func rangeEnd(resp *http.Response) int64 {
	var end int64
	fmt.Sscanf(resp.Header.Get("Range"), "0-%d", &end)
	return end
}

// tripBody calls trip once more than after bytes were read through it.
type tripBody struct {
	io.ReadCloser
	after, read int64
	trip        func()
}

func (b *tripBody) Read(p []byte) (int, error) {
	if b.read > b.after {
		b.trip()
	}
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	return n, err
}

// fleetDo sends a request through the fleet's proxy (with body, and
// Content-Range when cr is set), failing t unless it is answered status;
// the answer's body is read whole.
func fleetDo(t *testing.T, method, url string, body []byte, cr string, status int) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cr != "" {
		req.Header.Set("Content-Range", cr)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != status {
		t.Fatalf("%s %s = %d %s (%v), want %d", method, url, resp.StatusCode, b, err, status)
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// ociImage is an image written to an OCI layout directory: its manifest
// and its blobs (layers and config), by digest.
type ociImage struct {
	manifest string
	blobs    []string
}

// writeImage writes an OCI layout at dir holding one image tagged tag, of
// layers uncompressed tar layers of size bytes drawn from seed.
func writeImage(t *testing.T, dir, tag string, seed uint64, layers, size int) ociImage {
	t.Helper()
	dst := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		if err := os.WriteFile(filepath.Join(dst, hex.EncodeToString(sum[:])), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + hex.EncodeToString(sum[:]), len(b)
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	var img ociImage
	var descs []desc
	var diffIDs []string
	rng := rand.NewChaCha8([32]byte{byte(seed)})
	for i := range layers {
		content := make([]byte, size)
		_, _ = rng.Read(content)
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%d", i), Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(content)
		tw.Close()
		d, n := put(tb.Bytes())
		img.blobs = append(img.blobs, d)
		descs = append(descs, desc{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: d, Size: n})
		diffIDs = append(diffIDs, d)
	}
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	cd, cn := put(cfg)
	img.blobs = append(img.blobs, cd)
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc{MediaType: "application/vnd.oci.image.config.v1+json", Digest: cd, Size: cn}, "layers": descs})
	md, mn := put(man)
	img.manifest = md
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
		"manifests": []desc{{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: md, Size: mn, Annotations: map[string]string{"org.opencontainers.image.ref.name": tag}}}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return img
}

// sameLayoutBlobs fails unless the layout at got holds the manifest and
// every blob of img byte-identical to the layout at want.
func sameLayoutBlobs(t *testing.T, want, got string, img ociImage) {
	t.Helper()
	for _, d := range append([]string{img.manifest}, img.blobs...) {
		name := strings.TrimPrefix(d, "sha256:")
		a, err := os.ReadFile(filepath.Join(want, "blobs", "sha256", name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(got, "blobs", "sha256", name))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("blob %s pulled back: %d bytes (%v), want the %d pushed", d, len(b), err, len(a))
		}
	}
}

// runTool runs a client in dir with HOME there (no user configuration),
// failing t with its output when it fails.
func runTool(t *testing.T, dir, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return out
}

// bucketDigests returns the SHA-256 digests of the files under dir.
func bucketDigests(t *testing.T, dir string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		sum := sha256.Sum256(b)
		got["sha256:"+hex.EncodeToString(sum[:])] = true
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFleet pushes images through three stead serve processes on one
// PostgreSQL database with a file:// bytes tier, behind a round-robin
// proxy, so that an upload's POST, PATCH and PUT reach different servers:
// skopeo (one PATCH per layer) while a server is SIGKILLed mid-PATCH (its
// retry completes through the others), skopeo again while the server
// that took a layer's PATCH is killed before the PUT (another commits
// it), and oras (POST, then the layer in the PUT). Every image pulls back
// byte-identical, every layer is an object of the bucket, and the
// database holds at most 1 KiB per chunk pushed.
func TestFleet(t *testing.T) {
	t.Parallel()
	skopeo := fronttest.Tool(t, "skopeo", "STEAD_SKOPEO", "STEAD_REQUIRE_SKOPEO")
	oras := fronttest.Tool(t, "oras", "STEAD_ORAS", "STEAD_REQUIRE_ORAS")
	pg := pgtest.New(t)
	bucket := t.TempDir()
	db := pg.StoreURL() + "&bytes=" + url.QueryEscape("file://"+filepath.ToSlash(bucket))
	f, proxy := startFleet(t, db, 3, "--gc-interval", "0")
	dir := t.TempDir()
	const layerSize = 3 << 20
	var layers []string

	// skopeo, one server killed mid-PATCH: its --retry-times copy
	// completes through the others.
	src1 := filepath.Join(dir, "src1")
	img1 := writeImage(t, src1, "v1", 1, 3, layerSize)
	layers = append(layers, img1.blobs[:3]...)
	killed := f.killMidBody(1 << 20)
	ref1 := "docker://" + proxy + "/fleet/one:v1"
	out := runTool(t, dir, skopeo, "copy", "--preserve-digests", "--retry-times", "3", "--dest-tls-verify=false", "oci:"+src1+":v1", ref1)
	slot := int(killed.Load())
	if slot < 0 {
		t.Fatal("no server was killed during the first push")
	}
	t.Logf("first push: server %d killed mid-PATCH; skopeo said:\n%s", slot, out)
	f.hook.Store(nil)
	f.restart(slot)

	// skopeo, the server that took a layer's PATCH killed before the PUT:
	// another server commits the upload.
	src2 := filepath.Join(dir, "src2")
	img2 := writeImage(t, src2, "v2", 2, 3, layerSize)
	layers = append(layers, img2.blobs[:3]...)
	killed, finished := f.killAfterChunk(layerSize)
	ref2 := "docker://" + proxy + "/fleet/two:v2"
	runTool(t, dir, skopeo, "copy", "--preserve-digests", "--retry-times", "3", "--dest-tls-verify=false", "oci:"+src2+":v2", ref2)
	if slot = int(killed.Load()); slot < 0 || !finished.Load() {
		t.Fatalf("second push: killed slot %d, upload finished through another server %v; want a kill, and the upload finished", slot, finished.Load())
	}
	f.hook.Store(nil)
	f.restart(slot)

	// oras: each layer's POST and PUT on different servers.
	files := filepath.Join(dir, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		t.Fatal(err)
	}
	var fileArgs []string
	contents := map[string][]byte{}
	for i := range 2 {
		name := fmt.Sprintf("part%d.bin", i)
		b := make([]byte, layerSize+i)
		_, _ = rand.NewChaCha8([32]byte{byte(10 + i)}).Read(b)
		if err := os.WriteFile(filepath.Join(files, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		contents[name] = b
		sum := sha256.Sum256(b)
		layers = append(layers, "sha256:"+hex.EncodeToString(sum[:]))
		fileArgs = append(fileArgs, name)
	}
	repo := proxy + "/fleet/files"
	runTool(t, files, oras, append([]string{"push", "--plain-http", repo + ":v1"}, fileArgs...)...)

	// Content-Range chunks of 1 MiB, each PATCH through the next server:
	// the blob is a chunk set of objects.
	parts := make([]byte, 4<<20)
	_, _ = rand.NewChaCha8([32]byte{20}).Read(parts)
	sum := sha256.Sum256(parts)
	partsDigest := "sha256:" + hex.EncodeToString(sum[:])
	base := "http://" + proxy
	loc := fleetDo(t, "POST", base+"/v2/fleet/parts/blobs/uploads/", nil, "", http.StatusAccepted).Header.Get("Location")
	for i := range 4 {
		fleetDo(t, "PATCH", base+loc, parts[i<<20:(i+1)<<20], fmt.Sprintf("%d-%d", i<<20, (i+1)<<20-1), http.StatusAccepted)
	}
	fleetDo(t, "PUT", base+loc+"?digest="+partsDigest, nil, "", http.StatusCreated)

	// Every pull is byte-identical.
	resp := fleetDo(t, "GET", base+"/v2/fleet/parts/blobs/"+partsDigest, nil, "", http.StatusOK)
	if got, err := io.ReadAll(resp.Body); err != nil || !bytes.Equal(got, parts) {
		t.Fatalf("pull of the chunked blob: %d bytes (%v), want the %d pushed", len(got), err, len(parts))
	}
	for _, tc := range []struct {
		src, ref string
		img      ociImage
	}{{src1, ref1, img1}, {src2, ref2, img2}} {
		back := filepath.Join(dir, "back-"+filepath.Base(tc.src))
		runTool(t, dir, skopeo, "copy", "--preserve-digests", "--src-tls-verify=false", tc.ref, "oci:"+back+":v")
		sameLayoutBlobs(t, tc.src, back, tc.img)
	}
	pulled := filepath.Join(dir, "pulled")
	runTool(t, dir, oras, "pull", "--plain-http", "-o", pulled, repo+":v1")
	for name, want := range contents {
		if got, err := os.ReadFile(filepath.Join(pulled, name)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("oras pulled %s: %d bytes (%v), want the %d pushed", name, len(got), err, len(want))
		}
	}

	// The bucket holds every layer whole; the database, no layer's bytes.
	inBucket := bucketDigests(t, bucket)
	for _, d := range layers {
		if !inBucket[d] {
			t.Errorf("layer %s is not an object of the bucket", d)
		}
	}
	ctx := t.Context()
	s := func(table string) string { return pgx.Identifier{pg.Schema, table}.Sanitize() }
	var rows, rowBytes int64
	if err := pg.Admin.QueryRow(ctx, "SELECT count(*), coalesce(sum(pg_column_size(c.*)), 0) FROM "+s("blob_chunks")+" c").Scan(&rows, &rowBytes); err != nil {
		t.Fatal(err)
	}
	var large, tiered, valueBytes int64
	if err := pg.Admin.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE object IS NOT NULL OR chunks IS NOT NULL), coalesce(sum(octet_length(value)), 0) FROM "+s("blobs")+" WHERE size > $1",
		blob.InlineLimit).Scan(&large, &tiered, &valueBytes); err != nil {
		t.Fatal(err)
	}
	if large != int64(len(layers))+1 || tiered != large || valueBytes != 0 {
		t.Errorf("blobs over the inline limit: %d, %d of them in the bucket, %d bytes of value in the database; want the %d layers and the chunked blob, all in the bucket, none", large, tiered, valueBytes, len(layers))
	}
	if rows < 4 {
		t.Errorf("%d chunk rows; want the chunked blob's 4", rows)
	}
	chunks := f.chunks.Load()
	t.Logf("%d chunk requests; the database holds %d chunk rows, %d bytes; %d blobs in the bucket", chunks, rows, rowBytes, tiered)
	if rowBytes+valueBytes > chunks<<10 {
		t.Errorf("the database holds %d bytes of chunk rows (%d rows) after %d chunk requests; want at most 1 KiB each", rowBytes, rows, chunks)
	}
}
