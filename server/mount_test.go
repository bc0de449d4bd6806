package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/server"
	"github.com/steadkit/stead/server/access"
)

// TestMount checks that a front end is served under its prefix with the
// caller the server's token authenticates in its context, refusals
// answered its own way, and that the API is
// still served beside it.
func TestMount(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fe := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := access.Check(r.Context(), access.Area, "cache", access.Read); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fe"`)
			http.Error(w, "front end says no", http.StatusUnauthorized)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write([]byte(r.Method + " " + r.URL.Path + " " + strconv.Itoa(len(b))))
	})
	srv := httptest.NewServer(server.New(st, server.Options{Token: "tok", Logger: quiet, Mounts: []server.Mount{{Prefix: "/fe/", Handler: fe}}}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		method, path, token, body string
		status                    int
		want                      string
	}{
		{"GET", "/fe/a/b", "", "", 401, "front end says no"},
		{"PUT", "/fe/a/b", "wrong", "data", 401, "front end says no"},
		{"GET", "/fe/a/b", "tok", "", 200, "GET /fe/a/b 0"},
		{"PATCH", "/fe/x", "tok", "12345", 200, "PATCH /fe/x 5"},
		{"GET", "/v1/info", "", "", 401, `"code":"unauthorized"`},
		{"GET", "/v1/info", "tok", "", 200, `"cluster"`},
		{"DELETE", "/fe/../v1/info", "tok", "", 404, `"code":"route_not_found"`},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s %s (token %q) = %d %s; want %d %s", tc.method, tc.path, tc.token, resp.StatusCode, b, tc.status, tc.want)
		}
	}
}
