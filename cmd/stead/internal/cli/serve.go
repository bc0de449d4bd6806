package cli

import (
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/server"
)

func serveCommand(e *env) *cobra.Command {
	var (
		addr        string
		tokenFile   string
		maxBlobSize int64
		maxUploads  int
		perClient   int
		maxConns    int
		connsPer    int
		bodyGrace   time.Duration
		minBodyRate int64
		clientClock bool
		registryOn  bool
		pendingTTL  time.Duration
		cacheOn     bool
		cacheTTL    time.Duration
		collect     serveGC
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP server",
		Long: `Run the HTTP API (docs/openapi.yaml) over the store until SIGINT or
SIGTERM; then finish the requests in flight and exit.

A bearer token (env STEAD_TOKEN, or --token-file) is required on /v1 and
/metrics when set, and must be set when --addr is not a loopback address.

The OCI registry (docs/guides/registry.md) is served at /v2/ unless
--registry=false, under the same token. The build cache for Bazel and
ccache (docs/guides/build-cache.md) is served at /cache/ with --build-cache:
its action results are mutable, so whoever holds the token can change what
builds are handed, which a deployment turns on knowingly.

A server with the registry or the build cache sweeps the store every
--gc-interval (default 1h; 0 turns it off), under the store's sweep lease so
a fleet sweeps one server at a time; see docs/guides/operations.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Both sources are trimmed alike: a token is never whitespace.
			token := strings.TrimSpace(os.Getenv("STEAD_TOKEN"))
			if tokenFile != "" {
				b, err := os.ReadFile(tokenFile)
				if err != nil {
					return usageError("token file: %v", err)
				}
				token = strings.TrimSpace(string(b))
				if token == "" {
					return usageError("token file %s is empty", tokenFile)
				}
			}
			if token == "" && !server.IsLoopback(addr) {
				return usageError("--addr %s is not loopback: set --token-file or STEAD_TOKEN", addr)
			}
			if clientClock && !server.IsLoopback(addr) {
				return usageError("--allow-client-clock is for tests on a loopback address")
			}
			gcInterval, err := collect.every(cmd, registryOn || cacheOn)
			if err != nil {
				return err
			}
			retention, err := collect.policy()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := e.open(ctx, collect.storeOptions()...)
			if err != nil {
				return err
			}
			defer st.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			var mounts []server.Mount
			if registryOn {
				reg := registry.New(st, registry.Options{PendingTTL: pendingTTL, MaxBlobSize: maxBlobSize, Logger: e.log,
					DeleteUntaggedAfter: collect.untaggedAfter, Retention: retention})
				defer reg.Close()
				mounts = append(mounts, server.Mount{Prefix: registry.Prefix, Handler: reg, Unauthorized: registry.Unauthorized,
					Collect: registryCollect(reg)})
			}
			if cacheOn {
				mounts = append(mounts, server.Mount{Prefix: buildcache.Prefix, Handler: buildcache.New(st, buildcache.Options{TTL: cacheTTL, MaxBlobSize: maxBlobSize, Logger: e.log}), Unauthorized: buildcache.Unauthorized})
			}
			fmt.Fprintf(e.stdout, "stead serving %s on http://%s\n", redacted(e.db), ln.Addr())
			return server.New(st, server.Options{
				Token: token, MaxBlobSize: maxBlobSize, MaxUploads: maxUploads, MaxUploadsPerClient: perClient, MaxConns: maxConns, MaxConnsPerClient: connsPer, Logger: e.log,
				BodyGrace: bodyGrace, MinBodyRate: minBodyRate, ClientClock: clientClock, Mounts: mounts,
				GCInterval: gcInterval,
			}).Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:7070", "listen address")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token (else env STEAD_TOKEN)")
	f.Int64Var(&maxBlobSize, "max-blob-size", blob.DefaultMaxSize, "largest blob an upload may carry, in bytes")
	f.IntVar(&maxUploads, "max-uploads", 64, "uploads in progress at once; more are refused with 503")
	f.IntVar(&perClient, "max-uploads-per-client", 0, "uploads one client address has in progress at once; more wait for its own (0: a quarter of --max-uploads)")
	f.IntVar(&maxConns, "max-conns", 1024, "connections open at once; more wait to be accepted")
	f.IntVar(&connsPer, "max-conns-per-client", 0, "connections one client address has open at once; more are closed (0: a quarter of --max-conns)")
	f.DurationVar(&bodyGrace, "body-grace", 10*time.Second, "time an upload may take before --min-body-rate applies")
	f.Int64Var(&minBodyRate, "min-body-rate", 16<<10, "slowest upload accepted after --body-grace, in bytes per second")
	f.BoolVar(&registryOn, "registry", true, "serve the OCI registry at /v2/")
	f.DurationVar(&pendingTTL, "registry-pending-ttl", registry.DefaultPendingTTL, "how long a pushed blob no manifest references is kept")
	f.BoolVar(&cacheOn, "build-cache", false, "serve the Bazel/ccache HTTP build cache at /cache/")
	f.DurationVar(&cacheTTL, "build-cache-ttl", buildcache.DefaultTTL, "how long a build cache entry nobody reads is kept")
	collect.flags(cmd)
	// Tests only: lets requests carry the instant leases are judged at,
	// which lets any client take any lease.
	f.BoolVar(&clientClock, "allow-client-clock", false, "accept client clocks (conformance tests only)")
	_ = f.MarkHidden("allow-client-clock")
	return cmd
}
