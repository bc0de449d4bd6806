package registry_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/testing/fronttest"
)

// run runs a client, failing the test with its output when it fails.
func run(t *testing.T, dir, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := fronttestRun(ctx, dir, bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return out
}

// fronttestRun runs a client in dir, without a user's own configuration.
func fronttestRun(ctx context.Context, dir, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	return cmd.CombinedOutput()
}

// TestSkopeoRoundTrip copies a multi-layer image from an OCI layout into
// the registry and back with skopeo, on SQLite and PostgreSQL: every blob
// comes back byte-identical.
func TestSkopeoRoundTrip(t *testing.T) {
	t.Parallel()
	skopeo := fronttest.Tool(t, "skopeo", "STEAD_SKOPEO", "STEAD_REQUIRE_SKOPEO")
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			_, addr := serveRegistry(t, e.url(t), registry.Options{})
			dir := t.TempDir()
			src, back := filepath.Join(dir, "src"), filepath.Join(dir, "back")
			img := writeLayout(t, src, "v1", 1, 3, 300<<10)
			ref := "docker://" + addr + "/team/app:v1"
			run(t, dir, skopeo, "copy", "--preserve-digests", "--dest-tls-verify=false", "oci:"+src+":v1", ref)
			run(t, dir, skopeo, "copy", "--preserve-digests", "--src-tls-verify=false", ref, "oci:"+back+":v1")
			sameBlobs(t, src, back, img)
			out := run(t, dir, skopeo, "inspect", "--tls-verify=false", "--raw", ref)
			if got := string(out); !strings.Contains(got, img.layers[0].String()) {
				t.Fatalf("skopeo inspect --raw = %s; want the pushed manifest", got)
			}
		})
	}
}

// TestOrasReferrers pushes an artifact with oras, attaches a signature
// to it (a manifest with a subject), lists its referrers with oras
// discover and through the API with an artifactType filter, and pulls the
// signature back byte-identical.
func TestOrasReferrers(t *testing.T) {
	t.Parallel()
	oras := fronttest.Tool(t, "oras", "STEAD_ORAS", "STEAD_REQUIRE_ORAS")
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			_, addr := serveRegistry(t, e.url(t), registry.Options{})
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello stead\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "sig.txt"), []byte("signed, really\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			repo := addr + "/art/hello"
			run(t, dir, oras, "push", "--plain-http", "--artifact-type", "application/vnd.example.hello", repo+":v1", "hello.txt:text/plain")
			out := run(t, dir, oras, "attach", "--plain-http", "--distribution-spec", "v1.1-referrers-api", "--artifact-type", "application/vnd.example.sig",
				"--format", "go-template", "--template", "{{.digest}}", repo+":v1", "sig.txt:text/plain")
			sig := strings.TrimSpace(string(out))
			out = run(t, dir, oras, "discover", "--plain-http", "--distribution-spec", "v1.1-referrers-api", "--format", "json", repo+":v1")
			if !strings.Contains(string(out), sig) || !strings.Contains(string(out), "application/vnd.example.sig") {
				t.Fatalf("oras discover = %s; want the signature %s", out, sig)
			}

			// The API's filter.
			subject := strings.TrimSpace(string(run(t, dir, oras, "resolve", "--plain-http", repo+":v1")))
			for filter, want := range map[string]int{"application/vnd.example.sig": 1, "application/other": 0} {
				resp, err := http.Get("http://" + addr + "/v2/art/hello/referrers/" + subject + "?artifactType=" + filter)
				if err != nil {
					t.Fatal(err)
				}
				var idx ocispec.Index
				err = json.NewDecoder(resp.Body).Decode(&idx)
				resp.Body.Close()
				if err != nil || resp.Header.Get("OCI-Filters-Applied") != "artifactType" || len(idx.Manifests) != want {
					t.Fatalf("referrers?artifactType=%s = %+v, %v, filters %q; want %d", filter, idx, err, resp.Header.Get("OCI-Filters-Applied"), want)
				}
				if want == 1 && (idx.Manifests[0].Digest.String() != sig || idx.Manifests[0].ArtifactType != filter) {
					t.Fatalf("referrer = %+v; want %s of type %s", idx.Manifests[0], sig, filter)
				}
			}

			pulled := filepath.Join(dir, "pulled")
			run(t, dir, oras, "pull", "--plain-http", "-o", pulled, repo+"@"+sig)
			got, err := os.ReadFile(filepath.Join(pulled, "sig.txt"))
			if err != nil || string(got) != "signed, really\n" {
				t.Fatalf("pulled signature = %q, %v", got, err)
			}
		})
	}
}
