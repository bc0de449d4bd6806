package registry_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// image is an image written to an OCI layout directory.
type image struct {
	manifest digest.Digest
	layers   []digest.Digest
}

// writeLayout writes an OCI image layout at dir holding one image tagged
// tag: a layer of its own per layer (seeded by seed, size bytes of
// incompressible file content each) after the shared layers, each a gzip
// tar of one file, and a config naming their diff ids.
func writeLayout(t *testing.T, dir, tag string, seed uint64, layers int, size int, shared ...[]byte) image {
	t.Helper()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) digest.Digest {
		sum := sha256.Sum256(b)
		if err := os.WriteFile(filepath.Join(blobs, hex.EncodeToString(sum[:])), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return digest.NewDigestFromBytes(digest.SHA256, sum[:])
	}
	var img image
	var descs []ocispec.Descriptor
	var diffIDs []digest.Digest
	contents := append([][]byte(nil), shared...)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range layers {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		contents = append(contents, append([]byte(fmt.Sprintf("layer %d of %d\n", i, seed)), data...))
	}
	for i, c := range contents {
		gz, diff := layerOf(t, fmt.Sprintf("f%d", i), c)
		d := put(gz)
		img.layers = append(img.layers, d)
		descs = append(descs, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: d, Size: int64(len(gz))})
		diffIDs = append(diffIDs, diff)
	}
	cfg, _ := json.Marshal(ocispec.Image{
		Platform: ocispec.Platform{Architecture: "amd64", OS: "linux"},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: diffIDs},
	})
	cfgDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: put(cfg), Size: int64(len(cfg))}
	img.layers = append(img.layers, cfgDesc.Digest)
	man, _ := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest, Config: cfgDesc, Layers: descs})
	img.manifest = put(man)
	index, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{{
		MediaType: ocispec.MediaTypeImageManifest, Digest: img.manifest, Size: int64(len(man)),
		Annotations: map[string]string{ocispec.AnnotationRefName: tag},
	}}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return img
}

// layerOf returns a gzip tar holding one file and the tar's digest.
func layerOf(t *testing.T, name string, content []byte) ([]byte, digest.Digest) {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(content)
	tw.Close()
	var gb bytes.Buffer
	gw := gzip.NewWriter(&gb)
	gw.Write(tb.Bytes())
	gw.Close()
	return gb.Bytes(), digest.FromBytes(tb.Bytes())
}

// sameBlobs fails unless the layout at got holds every blob of img
// byte-identical to the layout at want.
func sameBlobs(t *testing.T, want, got string, img image) {
	t.Helper()
	if err := compareBlobs(want, got, img); err != nil {
		t.Fatal(err)
	}
}

func compareBlobs(want, got string, img image) error {
	for _, d := range append([]digest.Digest{img.manifest}, img.layers...) {
		a, err := os.ReadFile(filepath.Join(want, "blobs", "sha256", d.Encoded()))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(got, "blobs", "sha256", d.Encoded()))
		if err != nil {
			return fmt.Errorf("blob %s not copied back: %v", d, err)
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("blob %s differs after the round trip", d)
		}
	}
	return nil
}
