package server_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/testing/apicheck"
	"github.com/steadkit/stead/server"
)

// TestOpenAPIMatchesRoutes checks docs/openapi.yaml, loaded and validated
// by kin-openapi, against the routes the server registers, both ways, so
// the two cannot drift. A GET route serves HEAD too.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	documented := apicheck.Load(t).Operations()
	// The literal-slash forms of a ref's name are the one route
	// /v1/refs/{name...}, up to the documented depth.
	literal := regexp.MustCompile(`^(\w+) /v1/refs((?:/\{s\d\})+)/\{name\}$`)
	depths := map[string]int{}
	for i, d := range documented {
		if m := literal.FindStringSubmatch(d); m != nil {
			n := strings.Count(m[2], "/")
			if want := fmt.Sprintf("/{s%d}", n); !strings.HasSuffix(m[2], want) || strings.Count(m[2], "{s") != n {
				t.Errorf("docs/openapi.yaml: %q: want prefix segments s1 to s%d in order", d, n)
			}
			depths[m[1]]++
			documented[i] = m[1] + " /v1/refs/{name}"
		}
	}
	for m, n := range depths {
		if n != wire.RefDepth-1 {
			t.Errorf("docs/openapi.yaml documents %s on %d literal-slash ref paths, want %d", m, n, wire.RefDepth-1)
		}
	}
	if len(depths) != 4 {
		t.Errorf("literal-slash ref paths document methods %v, want GET, PUT, PATCH and DELETE", depths)
	}
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
