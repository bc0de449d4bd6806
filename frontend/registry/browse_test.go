package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// parseKey parses a digest the test made.
func parseKey(t *testing.T, s string) blob.Key {
	t.Helper()
	k, err := blob.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestRepositories: the console's view of the registry lists its
// repositories in the catalog's order, a page at a time from a cursor,
// skipping refs that are no repository's, and a repository's tags and
// manifests a page at a time with its usage; a name the spec refuses is
// ErrInvalidName.
func TestRepositories(t *testing.T) {
	t.Parallel()
	c, reg, _ := collectClient(t)
	ctx := context.Background()
	base := bytes.Repeat([]byte("base\n"), 100)
	for _, repo := range []string{"a", "a-b", "a/b", "zed"} {
		c.pushImage(repo, "v1", base, "own "+repo)
	}
	for i := range 3 {
		c.pushImage("a", fmt.Sprintf("t%d", i), base, fmt.Sprintf("own a %d", i))
	}
	// A ref under oci/ that is no repository's, between a/b's and zed's.
	key := parseKey(t, digestOf(base))
	if _, err := c.st.Refs.Set(ctx, "oci/b", key, ref.SetOptions{Weak: true}); err != nil {
		t.Fatal(err)
	}
	all, err := reg.Repositories(ctx, "", 10)
	if want := []string{"a-b", "a", "a/b", "zed"}; err != nil || !slices.Equal(all, want) {
		t.Fatalf("Repositories = %q, %v; want %q (the catalog's order)", all, err, want)
	}
	var paged []string
	for after := ""; ; {
		page, err := reg.Repositories(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	if !slices.Equal(paged, all) {
		t.Fatalf("Repositories two at a time = %q, want %q", paged, all)
	}
	if _, err := reg.Repositories(ctx, "Not/A/Name", 2); !errors.Is(err, steaderr.ErrInvalidName) {
		t.Fatalf("Repositories after an invalid name = %v, want ErrInvalidName", err)
	}

	v, err := reg.Repository(ctx, "a", "", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tags) != 2 || v.Tags[0].Name != "t0" || v.Tags[1].Name != "t1" || !v.MoreTags {
		t.Fatalf("first page of a's tags = %+v (more %v), want t0, t1 and more", v.Tags, v.MoreTags)
	}
	if len(v.Manifests) != 2 || !v.MoreManifests || v.RefPrefix != "oci/a/_" || v.Usage.Blobs == 0 || v.Usage.Bytes == 0 {
		t.Fatalf("a = %+v, want 2 of its 4 manifests, more, its ref prefix and usage", v)
	}
	rest, err := reg.Repository(ctx, "a", "t1", v.Manifests[1].Name, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Tags) != 2 || rest.Tags[0].Name != "t2" || rest.Tags[1].Name != "v1" || rest.MoreTags {
		t.Fatalf("a's tags after t1 = %+v (more %v), want t2, v1 and no more", rest.Tags, rest.MoreTags)
	}
	if len(rest.Manifests) != 2 || rest.MoreManifests || rest.Manifests[0].Name <= v.Manifests[1].Name {
		t.Fatalf("a's manifests after the second = %+v (more %v), want the last 2", rest.Manifests, rest.MoreManifests)
	}
	for _, name := range []string{"", "A", "a/_tags", "<script>"} {
		if _, err := reg.Repository(ctx, name, "", "", 2); !errors.Is(err, steaderr.ErrInvalidName) {
			t.Errorf("Repository(%q) = %v, want ErrInvalidName", name, err)
		}
	}
}
