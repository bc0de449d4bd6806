// Command stead runs and administers a stead store. See `stead help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/steadkit/stead/cmd/stead/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
