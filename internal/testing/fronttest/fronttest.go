// Package fronttest runs a stead server with its front ends for the
// tests that drive real clients (the OCI conformance suite, skopeo, oras,
// ccache), and finds those clients.
package fronttest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/server"
)

// Serve serves st with mounts on a loopback port until the test ends and
// returns its address, host:port.
func Serve(t testing.TB, st *stead.Store, opts server.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := server.New(st, opts)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// Tool returns the path of the client program name: the file the
// environment variable env names, else name on PATH. A missing tool skips
// the test, unless the environment variable require is set (as .ci/run
// sets it): then the test fails.
func Tool(t testing.TB, name, env, require string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", env, p, err)
		}
		return p
	}
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv(require) != "" {
		t.Fatalf("%s is required (%s is set) but not found: set %s or put it on PATH (.ci/run installs it)", name, require, env)
	}
	t.Skipf("%s not found (set %s or put it on PATH; %s=1 makes this a failure)", name, env, require)
	return ""
}
