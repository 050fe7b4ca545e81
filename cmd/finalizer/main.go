// Command finalizer tells downstream jobs when a period of streaming data is
// complete. See README.md; `finalizer --help` lists the subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // period boundaries in any IANA zone, even on hosts without a tz database
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
