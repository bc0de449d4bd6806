package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// serveGRPC runs `stead serve` on mem:// with args until the test ends,
// and dials the gRPC address it prints; stop ends serve and returns its
// exit code and standard error.
func serveGRPC(t *testing.T, args ...string) (conn *grpc.ClientConn, stop func() (code int, stderr string)) {
	t.Helper()
	s := startServe(t, func(line string) bool { return strings.Contains(line, "grpc://") },
		append([]string{"--db", "mem://", "serve", "--addr", "127.0.0.1:0"}, args...)...)
	stop = s.stop
	conn, err := grpc.NewClient(s.url(t, "grpc://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, stop
}

// TestServeBuildCacheHTTP puts and gets an entry through each of the
// build cache's HTTP protocols on `stead serve --build-cache`, behind the
// server's token (bearer, and Gradle's Basic password); without
// --build-cache the routes are not served.
func TestServeBuildCacheHTTP(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, nil, "--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--token-file", tokenFile, "--build-cache")
	base, stop := srv.url(t, "http://"), srv.stop
	do := func(method, path string, body []byte, auth func(*http.Request)) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != nil {
			auth(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") }
	basic := func(r *http.Request) { r.SetBasicAuth("token", "tok") }
	content := []byte("an output of the build")
	sum := sha256.Sum256(content)
	digest := hex.EncodeToString(sum[:])
	for _, c := range []struct {
		what, path string
		auth       func(*http.Request)
	}{
		{"Bazel's cas/", "/cache/cas/" + digest, bearer},
		{"Turborepo's", "/v8/artifacts/0123abcd", bearer},
		{"Nx's", "/nx/v1/cache/4567", bearer},
		{"Gradle's", "/gradle/abc123", basic},
	} {
		if code, _ := do("PUT", c.path, content, nil); code != http.StatusUnauthorized {
			t.Errorf("%s PUT without credentials = %d, want 401", c.what, code)
		}
		if code, b := do("PUT", c.path, content, c.auth); code/100 != 2 {
			t.Errorf("%s PUT = %d %q", c.what, code, b)
		}
		if code, b := do("GET", c.path, nil, c.auth); code != http.StatusOK || !bytes.Equal(b, content) {
			t.Errorf("%s GET = %d %q, want 200 and the content", c.what, code, b)
		}
	}
	if code, _ := stop(); code != 0 {
		t.Fatalf("serve exited %d after cancel", code)
	}
	base = startServe(t, nil, "--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--token-file", tokenFile).url(t, "http://")
	if code, _ := do("GET", "/cache/cas/"+digest, nil, bearer); code != http.StatusNotFound {
		t.Fatalf("GET /cache/ without --build-cache = %d, want 404", code)
	}
}

// TestServeBuildCacheGRPC serves the build cache over gRPC beside HTTP,
// behind the server's token.
func TestServeBuildCacheGRPC(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, stop := serveGRPC(t, "--token-file", tokenFile, "--build-cache", "--build-cache-grpc", "127.0.0.1:0")
	caps := repb.NewCapabilitiesClient(conn)
	if _, err := caps.GetCapabilities(ctx, &repb.GetCapabilitiesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetCapabilities without the token = %v", err)
	}
	got, err := caps.GetCapabilities(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok"), &repb.GetCapabilitiesRequest{})
	if err != nil || got.GetCacheCapabilities().GetDigestFunctions()[0] != repb.DigestFunction_SHA256 {
		t.Fatalf("GetCapabilities = %v, %v", got, err)
	}
	if code, stderr := stop(); code != 0 {
		t.Fatalf("serve exited %d after cancel: %q", code, stderr)
	}
	if code, _, stderr := run(t, context.Background(), "--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--build-cache-grpc", "127.0.0.1:0"); code != 2 || !strings.Contains(stderr, "needs --build-cache") {
		t.Fatalf("--build-cache-grpc without --build-cache = %d %q", code, stderr)
	}
}

// TestServeBuildCacheGRPCUsers checks callers of the gRPC port against
// --htpasswd users and --access rules, sent as Basic credentials in the
// authorization metadata: a reader reads and may not write, a writer
// writes, a wrong password and an unknown user are unauthenticated.
func TestServeBuildCacheGRPCUsers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file, rules := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "access.yaml")
	for _, u := range []string{"reader", "writer"} {
		if code := execute(context.Background(), []string{"user", "add", "--htpasswd", file, u}, &env{stdin: strings.NewReader(u + "-pw\n"), stdout: io.Discard, stderr: io.Discard}); code != 0 {
			t.Fatal(code)
		}
	}
	if err := os.WriteFile(rules, []byte("rules:\n  - who: [reader]\n    cache: [read]\n  - who: [writer]\n    cache: [read, write]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, _ := serveGRPC(t, "--htpasswd", file, "--access", rules,
		"--build-cache", "--build-cache-grpc", "127.0.0.1:0", "--build-cache-max-size", "1048576")
	cas := repb.NewContentAddressableStorageClient(conn)
	content := []byte("built by the writer")
	sum := sha256.Sum256(content)
	d := &repb.Digest{Hash: hex.EncodeToString(sum[:]), SizeBytes: int64(len(content))}
	as := func(user, pass string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	}
	write := func(c context.Context) error {
		resp, err := cas.BatchUpdateBlobs(c, &repb.BatchUpdateBlobsRequest{Requests: []*repb.BatchUpdateBlobsRequest_Request{{Digest: d, Data: content}}})
		if err == nil && resp.GetResponses()[0].GetStatus().GetCode() != 0 {
			err = status.ErrorProto(resp.GetResponses()[0].GetStatus())
		}
		return err
	}
	read := func(c context.Context) error {
		resp, err := cas.FindMissingBlobs(c, &repb.FindMissingBlobsRequest{BlobDigests: []*repb.Digest{d}})
		if err == nil && len(resp.GetMissingBlobDigests()) != 0 {
			t.Errorf("FindMissingBlobs after the write: missing %v", resp.GetMissingBlobDigests())
		}
		return err
	}
	for _, c := range []struct {
		what string
		err  error
		want codes.Code
	}{
		{"reader writes", write(as("reader", "reader-pw")), codes.PermissionDenied},
		{"writer writes", write(as("writer", "writer-pw")), codes.OK},
		{"reader reads", read(as("reader", "reader-pw")), codes.OK},
		{"reader with a wrong password", read(as("reader", "writer-pw")), codes.Unauthenticated},
		{"an unknown user", read(as("nobody", "x")), codes.Unauthenticated},
		{"no credentials", read(ctx), codes.Unauthenticated},
	} {
		if got := status.Code(c.err); got != c.want {
			t.Errorf("%s: %v; want %v", c.what, c.err, c.want)
		}
	}
}

// TestServeBuildCacheMaxSizeRefused refuses a size budget that is
// negative, without the build cache, or without sweeps to keep it.
func TestServeBuildCacheMaxSizeRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--build-cache", "--build-cache-max-size", "-1"}, "want a byte count"},
		{[]string{"--build-cache-max-size", "100"}, "needs --build-cache"},
		{[]string{"--build-cache", "--build-cache-max-size", "100", "--gc-interval", "0"}, "needs a --gc-interval"},
	} {
		args := append([]string{"--db", "mem://", "serve", "--addr", "127.0.0.1:0"}, c.args...)
		if code, _, stderr := run(t, context.Background(), args...); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v = %d %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
