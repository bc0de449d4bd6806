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
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() { cancel(cli.Signalled(<-sigs)) }()
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
