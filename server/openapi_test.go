package server_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/server"
)

// TestOpenAPIMatchesRoutes checks docs/openapi.yaml against the routes the
// server registers, both ways, so the two cannot drift.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pathLine := regexp.MustCompile(`^  (/\S*):$`)
	opLine := regexp.MustCompile(`^    (get|put|post|delete|patch|head):`)
	var documented []string
	inPaths, path := false, ""
	for line := range strings.Lines(string(doc)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "paths:":
			inPaths = true
		case inPaths && line != "" && !strings.HasPrefix(line, " "):
			inPaths = false
		case inPaths && pathLine.MatchString(line):
			path = pathLine.FindStringSubmatch(line)[1]
		case inPaths && opLine.MatchString(line):
			documented = append(documented, strings.ToUpper(opLine.FindStringSubmatch(line)[1])+" "+path)
		}
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
	slices.Sort(documented)
	slices.Sort(routes)
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is not in docs/openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("docs/openapi.yaml documents %q, which the server does not serve", d)
		}
	}
	if len(routes) == 0 || len(documented) == 0 {
		t.Fatalf("routes %v, documented %v", routes, documented)
	}
}
