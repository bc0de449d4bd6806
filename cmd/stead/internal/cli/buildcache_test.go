package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestServeBuildCacheGRPC serves the build cache over gRPC beside HTTP,
// behind the server's token.
func TestServeBuildCacheGRPC(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	var wg sync.WaitGroup
	code := -1
	wg.Go(func() {
		code = Run(ctx, []string{"--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--token-file", tokenFile, "--build-cache", "--build-cache-grpc", "127.0.0.1:0"}, pw, &stderr)
		pw.Close()
	})
	rd := bufio.NewReader(pr)
	var addr string
	for addr == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("serve printed no gRPC address: %v; stderr %q", err, stderr.String())
		}
		if _, a, ok := strings.Cut(strings.TrimSpace(line), "grpc://"); ok {
			addr = a
		}
	}
	go io.Copy(io.Discard, rd)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	caps := repb.NewCapabilitiesClient(conn)
	if _, err := caps.GetCapabilities(ctx, &repb.GetCapabilitiesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetCapabilities without the token = %v", err)
	}
	got, err := caps.GetCapabilities(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok"), &repb.GetCapabilitiesRequest{})
	if err != nil || got.GetCacheCapabilities().GetDigestFunctions()[0] != repb.DigestFunction_SHA256 {
		t.Fatalf("GetCapabilities = %v, %v", got, err)
	}
	cancel()
	wg.Wait()
	if code != 0 {
		t.Fatalf("serve exited %d after cancel: %q", code, stderr.String())
	}
	if code, _, stderr := run(t, context.Background(), "--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--build-cache-grpc", "127.0.0.1:0"); code != 2 || !strings.Contains(stderr, "needs --build-cache") {
		t.Fatalf("--build-cache-grpc without --build-cache = %d %q", code, stderr)
	}
}
