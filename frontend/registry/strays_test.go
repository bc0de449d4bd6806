package registry_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/steadkit/stead/ref"
)

// TestStrayRefs: refs under oci/ that are no repository's (no "/_", or a
// name the spec refuses), more of them than one query reads, hide no
// repository from _catalog or Repositories, and a page shorter than asked
// is the last.
func TestStrayRefs(t *testing.T) {
	c, reg, _ := collectClient(t)
	ctx := context.Background()
	base := bytes.Repeat([]byte("base\n"), 100)
	for _, repo := range []string{"a", "zed"} {
		c.pushImage(repo, "v1", base, "own "+repo)
	}
	key := parseKey(t, digestOf(base))
	strays := []string{"oci/Bad/_tags/x", "oci/b"}
	for i := range 150 {
		strays = append(strays, fmt.Sprintf("oci/cache/k%03d", i))
	}
	for _, n := range strays {
		if _, err := c.st.Refs.Set(ctx, n, key, ref.SetOptions{Weak: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, body := c.do("GET", "/v2/_catalog", nil, nil); !bytes.Equal(bytes.TrimSpace(body), []byte(`{"repositories":["a","zed"]}`)) {
		t.Errorf("_catalog = %s, want a and zed", body)
	}
	if all, err := reg.Repositories(ctx, "", 10); err != nil || !slices.Equal(all, []string{"a", "zed"}) {
		t.Errorf("Repositories(\"\", 10) = %q, %v; want a and zed", all, err)
	}
	first, err := reg.Repositories(ctx, "", 1)
	if err != nil || !slices.Equal(first, []string{"a"}) {
		t.Fatalf("Repositories(\"\", 1) = %q, %v; want a", first, err)
	}
	if rest, err := reg.Repositories(ctx, "a", 1); err != nil || !slices.Equal(rest, []string{"zed"}) {
		t.Errorf("Repositories after a = %q, %v; want zed", rest, err)
	}
}
