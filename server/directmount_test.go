package server

import (
	"slices"
	"testing"
)

func TestDirectMounts(t *testing.T) {
	t.Parallel()
	patterns := []string{"GET /v1/blobs/{key}", "POST /v1/blobs/{key}/refs", "GET /ui/", "GET /ui/{$}", "/v2/", "/v2/x/", "/v3/", "/ui/y/", "/v1/blobs/z/", "/q"}
	var mounts []Mount
	for _, p := range []string{"/v2/", "/v2/x/", "/v3/", "/ui/y/", "/v1/blobs/z/", "/q"} {
		mounts = append(mounts, Mount{Prefix: p})
	}
	var got []string
	for _, m := range directMounts(mounts, patterns) {
		got = append(got, m.Prefix)
	}
	// /v2/ has /v2/x/ under it, /ui/y/ a wildcard pattern above it,
	// /v1/blobs/z/ the {key} patterns, /q no trailing slash.
	if want := []string{"/v2/x/", "/v3/"}; !slices.Equal(got, want) {
		t.Fatalf("direct mounts = %q, want %q", got, want)
	}
}
