// Command harbinger-lab runs Harbinger's research lab: the live
// comparisons with RabbitMQ, Redis and NATS JetStream (bench flow, bench
// cost) and the simulator's ablation studies (experiments). It is built
// from the lab module, apart from the harbinger binary users run. Run
// "harbinger-lab help" for the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/harbinger-mq/harbinger/lab/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
