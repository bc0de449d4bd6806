package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// TestLsPagesOverHTTP lists a store of one page and one blob more through
// a stead server: ls reads it a page at a time (GET /v1/blobs with a
// cursor), every key once and in order; --limit and --after hold.
func TestLsPagesOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := stead.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const n = blob.DefaultPageSize + 1
	var lines []string
	for i := range n {
		value := fmt.Sprint("ls ", i)
		key, err := st.Blobs.Put(ctx, strings.NewReader(value))
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%s %d", key, len(value)))
	}
	slices.Sort(lines)
	var lists atomic.Int64
	h := server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/blobs" {
			lists.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		args  []string
		want  []string
		pages int64
	}{
		{[]string{"ls"}, lines, 2},
		{[]string{"ls", "--limit", fmt.Sprint(n - 1)}, lines[:n-1], 1},
		{[]string{"ls", "--after", strings.Fields(lines[n-2])[0]}, lines[n-1:], 1},
	} {
		lists.Store(0)
		code, stdout, stderr := run(t, ctx, append([]string{"--db", srv.URL}, tc.args...)...)
		if code != 0 {
			t.Fatalf("%v = %d %q", tc.args, code, stderr)
		}
		if got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); !slices.Equal(got, tc.want) {
			t.Errorf("%v printed %d lines, want the %d stored, in order", tc.args, len(got), len(tc.want))
		}
		if got := lists.Load(); got != tc.pages {
			t.Errorf("%v read %d pages, want %d", tc.args, got, tc.pages)
		}
	}
}
