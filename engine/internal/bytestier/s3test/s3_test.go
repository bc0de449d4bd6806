// Package s3test runs the engine conformance suite with the bytes tier on
// S3: gocloud.dev's s3blob against an in-process S3 server (gofakes3 on
// loopback), so the tier is checked against S3's protocol (multipart
// uploads, conditional writes, ranged reads, paged listings) and not only
// against a directory.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	_ "gocloud.dev/blob/s3blob"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/internal/bytestier"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/steaderr"
)

// server is one in-process S3 server for the package's tests; each
// engine gets a bucket of its own.
type server struct {
	backend *s3mem.Backend
	url     string
	n       atomic.Int64
}

func newServer(t *testing.T) *server {
	t.Helper()
	backend := s3mem.New()
	ts := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(ts.Close)
	return &server{backend: backend, url: ts.URL}
}

// bucketURL creates a fresh bucket and returns its s3blob URL.
func (s *server) bucketURL(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("stead-%d", s.n.Add(1))
	if err := s.backend.CreateBucket(name); err != nil {
		t.Fatal(err)
	}
	q := url.Values{
		"endpoint": {s.url}, "use_path_style": {"true"}, "disable_https": {"true"},
		"region": {"us-east-1"}, "anonymous": {"true"},
	}
	return "s3://" + name + "?" + q.Encode()
}

// TestConformanceS3 runs the tier's areas of the suite over SQLite with
// the bytes tier on S3.
func TestConformanceS3(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	enginetest.Run(t, enginetest.Harness{
		Areas: enginetest.TierAreas,
		New: func(t *testing.T) engine.Engine {
			e, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "s.db"), Bytes: s.bucketURL(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			if err := e.Migrate(context.WithoutCancel(t.Context())); err != nil {
				t.Fatal(err)
			}
			return e
		},
	})
}

// objects lists the bucket's object names under o/ as the server holds
// them.
func (s *server) objects(t *testing.T, bucket string) []string {
	t.Helper()
	list, err := s.backend.ListBucket(bucket, &gofakes3.Prefix{Prefix: "o/", HasPrefix: true}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Contents {
		names = append(names, c.Key)
	}
	return names
}

// TestS3Object puts a value of several multipart parts: it is one object
// in the bucket, read back by ranges, and gone once its blob is deleted;
// the marker and object writes are conditional, so a second store cannot
// claim the bucket and no object is written twice.
func TestS3Object(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	ctx := t.Context()
	bucketURL := s.bucketURL(t)
	bucket := bucketURL[len("s3://"):strings.IndexByte(bucketURL, '?')]
	e, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "s.db"), Bytes: bucketURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	store := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
	value := make([]byte, 12<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(value)
	key, err := store.Put(ctx, bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.objects(t, bucket); len(got) != 1 {
		t.Fatalf("bucket holds %q, want one object", got)
	}
	rd, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 1000)
	if _, err := rd.ReadAt(part, 7<<20); err != nil || !bytes.Equal(part, value[7<<20:7<<20+1000]) {
		t.Fatalf("ReadAt = %v, or other bytes than the value's", err)
	}
	if got, err := io.ReadAll(rd); err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Read = %d bytes, %v", len(got), err)
	}
	rd.Close()
	if err := store.Verify(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CheckBytesTier(ctx); err != nil {
		t.Fatalf("CheckBytesTier: %v", err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if got := s.objects(t, bucket); len(got) != 0 {
		t.Fatalf("bucket holds %q after Delete, want nothing", got)
	}

	other, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "s.db"), Bytes: bucketURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	if err := other.Migrate(ctx); !errors.Is(err, steaderr.ErrConflict) {
		t.Fatalf("a second store's Migrate on a claimed bucket = %v, want ErrConflict", err)
	}

	tier, err := bytestier.Open(ctx, bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	name := bytestier.NewName()
	for i, want := range []error{nil, steaderr.ErrConflict} {
		if _, err := tier.Write(ctx, name, strings.NewReader("once"), 0, nil); !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("write %d of one name = %v, want %v", i+1, err, want)
		}
	}
}
