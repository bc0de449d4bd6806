package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/steadkit/stead/server"
)

// shutdownGrace bounds how long serve waits for requests in flight after a
// signal.
const shutdownGrace = 10 * time.Second

func serve(ctx context.Context, e *env, args []string) error {
	fs := e.newFlags("serve")
	addr := fs.String("addr", "127.0.0.1:7070", "listen address")
	token := fs.String("token", "", "bearer token required on /v1 (env STEAD_TOKEN); required when -addr is not loopback")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *token == "" {
		*token = os.Getenv("STEAD_TOKEN")
	}
	if *token == "" && !server.IsLoopback(*addr) {
		return fmt.Errorf("%w: -addr %s is not loopback: set -token or STEAD_TOKEN", errUsage, *addr)
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
	srv := &http.Server{
		Handler:           server.New(st, server.Options{Token: *token}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Fprintf(e.stdout, "stead serving %s on http://%s\n", redacted(e.db), ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
