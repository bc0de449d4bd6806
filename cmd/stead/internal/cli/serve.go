package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/frontend/buildcache"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/server"
)

func serveCommand(e *env) *cobra.Command {
	var (
		addr         string
		tokenFile    string
		maxBlobSize  int64
		maxUploads   int
		perClient    int
		maxConns     int
		connsPer     int
		bodyGrace    time.Duration
		minBodyRate  int64
		clientClock  bool
		registryOn   bool
		pendingTTL   time.Duration
		cacheOn      bool
		cacheTTL     time.Duration
		users        accessFlags
		cacheGRPC    string
		cacheMaxSize int64
		accessLog    bool
		tlsCert      string
		tlsKey       string
		collect      serveGC
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP server",
		Long: `Run the HTTP API (docs/openapi.yaml) over the store until SIGINT or
SIGTERM; then finish the requests in flight and exit.

A bearer token (env STEAD_TOKEN, or --token-file) is required on /v1 and
/metrics when set; it, or users from --htpasswd, must be set when --addr
is not a loopback address. --access says what each may do
(docs/guides/registry.md, "Users and access").

The OCI registry (docs/guides/registry.md) is served at /v2/ unless
--registry=false, under the same token. The build cache for Bazel and
ccache (docs/guides/build-cache.md) is served at /cache/ with --build-cache,
with Turborepo's at /v8/, Nx's at /nx/ and, with --build-cache-grpc, the
Remote Execution API's over gRPC:
its action results are mutable, so whoever holds the token can change what
builds are handed, which a deployment turns on knowingly.

A server with the registry or the build cache sweeps the store every
--gc-interval (default 1h; 0 turns it off), under the store's sweep lease so
a fleet sweeps one server at a time; see docs/guides/operations.md.

Every flag, --db and --log-level included, may instead come from the
environment, as STEAD_ and its name in capitals with underscores
(STEAD_MAX_CONNS), or from the YAML file --config names (max-conns: 512);
a flag overrides the environment, which overrides the file.`,
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
			if token == "" && users.htpasswd == "" && !server.IsLoopback(addr) {
				return usageError("--addr %s is not loopback: set --token-file, STEAD_TOKEN or --htpasswd", addr)
			}
			if clientClock && !server.IsLoopback(addr) {
				return usageError("--allow-client-clock is for tests on a loopback address")
			}
			gcInterval, err := collect.every(cmd, registryOn || cacheOn)
			if err != nil {
				return err
			}
			if cacheMaxSize < 0 {
				return usageError("--build-cache-max-size %d: want a byte count, or 0 for no budget", cacheMaxSize)
			}
			if cacheMaxSize > 0 && gcInterval == 0 {
				return usageError("--build-cache-max-size is kept before each sweep: it needs a --gc-interval above 0")
			}
			retention, err := collect.policy()
			if err != nil {
				return err
			}
			if (tlsCert == "") != (tlsKey == "") {
				return usageError("--tls-cert and --tls-key go together")
			}
			ctx := cmd.Context()
			auth, stopReload, err := users.authority(ctx, token, e.log)
			if err != nil {
				return err
			}
			defer stopReload()
			st, err := e.open(ctx, append(collect.storeOptions(), stead.WithMaxBlobSize(maxBlobSize))...)
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
				mounts = append(mounts, registryMount(reg))
			}
			var srv *server.Server
			startGRPC := func() {} // once srv, which checks its credentials, is set
			if cacheOn {
				cache := buildcache.New(st, buildcache.Options{TTL: cacheTTL, MaxBlobSize: maxBlobSize, MaxSize: cacheMaxSize, Logger: e.log})
				mounts = append(mounts,
					server.Mount{Prefix: buildcache.Prefix, Handler: cache, Collect: cacheCollect(cache), RefPrefix: buildcache.RefPrefix},
					server.Mount{Prefix: buildcache.TurboPrefix, Handler: cache.Turbo()},
					server.Mount{Prefix: buildcache.NxPrefix, Handler: cache.Nx()},
					server.Mount{Prefix: buildcache.GradlePrefix, Handler: cache.Gradle()})
				if cacheGRPC != "" {
					if auth.Open() && !server.IsLoopback(cacheGRPC) {
						return usageError("--build-cache-grpc %s is not loopback: set --token-file, STEAD_TOKEN or --htpasswd", cacheGRPC)
					}
					gln, err := net.Listen("tcp", cacheGRPC)
					if err != nil {
						return err
					}
					gs := cache.GRPC(func(header, addr, action string) error { return srv.Authorized(header, addr, "cache", action) })
					defer gln.Close()
					defer gs.Stop()
					context.AfterFunc(ctx, gs.GracefulStop)
					startGRPC = func() {
						fmt.Fprintf(e.stdout, "stead build cache on grpc://%s\n", gln.Addr())
						go func() { _ = gs.Serve(gln) }()
					}
				}
			} else if cacheGRPC != "" {
				return usageError("--build-cache-grpc needs --build-cache")
			} else if cacheMaxSize != 0 {
				return usageError("--build-cache-max-size needs --build-cache")
			}
			opts := server.Options{
				Access: auth, MaxBlobSize: maxBlobSize, MaxUploads: maxUploads, MaxUploadsPerClient: perClient, MaxConns: maxConns, MaxConnsPerClient: connsPer, Logger: e.log,
				BodyGrace: bodyGrace, MinBodyRate: minBodyRate, ClientClock: clientClock, Mounts: mounts,
				GCInterval: gcInterval,
			}
			if accessLog {
				opts.AccessLog = slog.New(slog.NewTextHandler(e.stdout, nil))
			}
			scheme := "http"
			if tlsCert != "" {
				cfg, err := server.CertFiles(tlsCert, tlsKey, e.log)
				if err != nil {
					ln.Close()
					return err
				}
				ln, scheme = tls.NewListener(ln, cfg), "https"
			}
			srv = server.New(st, opts)
			fmt.Fprintf(e.stdout, "stead serving %s on %s://%s\n", redacted(e.db), scheme, ln.Addr())
			startGRPC()
			return srv.Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	f.String("config", "", "YAML file of settings: flag names to values (see docs/guides/operations.md); flags and STEAD_* variables override it")
	f.StringVar(&addr, "addr", "127.0.0.1:7070", "listen address")
	f.StringVar(&tokenFile, "token-file", "", "file holding the bearer token (else env STEAD_TOKEN)")
	users.register(cmd)
	f.Int64Var(&maxBlobSize, "max-blob-size", blob.DefaultMaxSize, "largest blob an upload may carry, in bytes")
	f.IntVar(&maxUploads, "max-uploads", 64, "uploads in progress at once; more are refused with 503")
	f.IntVar(&perClient, "max-uploads-per-client", 0, "uploads one client address has in progress at once; more wait for its own (0: a quarter of --max-uploads)")
	f.IntVar(&maxConns, "max-conns", 1024, "connections open at once; more wait to be accepted")
	f.IntVar(&connsPer, "max-conns-per-client", 0, "connections one client address has open at once; more are closed (0: a quarter of --max-conns)")
	f.DurationVar(&bodyGrace, "body-grace", 10*time.Second, "time an upload may take before --min-body-rate applies")
	f.Int64Var(&minBodyRate, "min-body-rate", 16<<10, "slowest upload accepted after --body-grace, in bytes per second")
	f.BoolVar(&registryOn, "registry", true, "serve the OCI registry at /v2/")
	f.DurationVar(&pendingTTL, "registry-pending-ttl", registry.DefaultPendingTTL, "how long a pushed blob no manifest references is kept")
	f.BoolVar(&cacheOn, "build-cache", false, "serve the build cache: Bazel/ccache at /cache/, Turborepo at /v8/, Nx at /nx/, Gradle at /gradle/")
	f.DurationVar(&cacheTTL, "build-cache-ttl", buildcache.DefaultTTL, "how long a build cache entry nobody reads is kept")
	f.Int64Var(&cacheMaxSize, "build-cache-max-size", 0, "size budget of the whole build cache, in bytes: before each sweep the least recently read entries go until the rest fit (0: none)")
	f.StringVar(&cacheGRPC, "build-cache-grpc", "", "also serve the build cache over the Remote Execution API's gRPC on this address (with --build-cache)")
	f.StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain), read again when it changes; with --tls-key")
	f.StringVar(&tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	f.BoolVar(&accessLog, "access-log", false, "write a line per request to stdout: method, route, status, bytes, duration, client, identity")
	collect.flags(cmd)
	// Tests only: lets requests carry the instant leases are judged at,
	// which lets any client take any lease.
	f.BoolVar(&clientClock, "allow-client-clock", false, "accept client clocks (conformance tests only)")
	_ = f.MarkHidden("allow-client-clock")
	return cmd
}
