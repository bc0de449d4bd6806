package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/steadkit/stead/server"
)

func serve(ctx context.Context, e *env, args []string) error {
	fs := e.newFlags("serve")
	addr := fs.String("addr", "127.0.0.1:7070", "listen address")
	tokenFile := fs.String("token-file", "", "file holding the bearer token required on /v1 and /metrics (else env STEAD_TOKEN); a token is required when -addr is not loopback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	token := os.Getenv("STEAD_TOKEN")
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("%w: token file: %w", errUsage, err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("%w: token file %s is empty", errUsage, *tokenFile)
		}
	}
	if token == "" && !server.IsLoopback(*addr) {
		return fmt.Errorf("%w: -addr %s is not loopback: set -token-file or STEAD_TOKEN", errUsage, *addr)
	}
	st, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "stead serving %s on http://%s\n", redacted(e.db), ln.Addr())
	return server.New(st, server.Options{Token: token}).Serve(ctx, ln)
}
