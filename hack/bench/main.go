// Command bench measures the built switchboard binary end to end, against the demo
// provider streaming with no delay (see README.md):
//
//	go run ./hack/bench overhead    # latency a call through the runtime adds to a direct call
//	go run ./hack/bench fanout      # one execution's events streamed to many subscribers
//	go run ./hack/bench throughput  # executions per second, memory, redis and postgres EventStores
//
// Each subcommand builds switchboard, the demo provider and the baseline relay
// (hack/relay) into a temporary folder, or takes them from -switchboard, -demoprovider
// and -relay, so that a binary built from another commit can be measured with the same
// client in the same session. Tables go to stdout,
// progress to stderr; any failed call or execution ends the run with an error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// commands are the subcommands by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"overhead":   runOverhead,
	"fanout":     runFanout,
	"throughput": runThroughput,
}

const usage = `usage: bench overhead|fanout|throughput [flags]
  bench SUBCOMMAND -h lists a subcommand's flags`

// run dispatches to the subcommand named by args[0].
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("unknown subcommand %q\n%s", args[0], usage)
	}
	// Progress goes to stderr from several goroutines (the fan-out's gate logs from its
	// handlers): one lock orders the writes.
	err := cmd(ctx, args[1:], stdout, &lockedWriter{w: stderr})
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// lockedWriter serializes the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
