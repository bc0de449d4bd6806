package server_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/internal/testing/apicheck"
	"github.com/steadkit/stead/server"
)

// TestOpenAPIMatchesRoutes checks docs/openapi.yaml, loaded and validated
// by kin-openapi, against the routes the server registers, both ways, so
// the two cannot drift. A GET route serves HEAD too.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	documented := apicheck.Load(t).Operations()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	routes := server.New(st, server.Options{}).Routes()
	for i, r := range routes {
		// OpenAPI has no wildcard of many segments: {name...} is {name}.
		routes[i] = strings.ReplaceAll(r, "...}", "}")
	}
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is not in docs/openapi.yaml", r)
		}
	}
	for _, d := range documented {
		served := d
		if rest, ok := strings.CutPrefix(d, "HEAD "); ok {
			served = "GET " + rest
		}
		if !slices.Contains(routes, served) {
			t.Errorf("docs/openapi.yaml documents %q, which the server does not serve", d)
		}
	}
	if len(routes) == 0 || len(documented) == 0 {
		t.Fatalf("routes %v, documented %v", routes, documented)
	}
}
