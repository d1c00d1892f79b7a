// Command demoprovider is a local, deterministic fake of five AI provider wire formats —
// OpenAI Chat Completions, Anthropic Messages, Replicate predictions, Gemini
// generateContent (Gemini API and Vertex AI) and Amazon Bedrock Converse — for the
// first-run demo (make demo), end-to-end tests and benchmarks. It is not a provider
// adapter: it answers the way the providers document, with scripted behaviour selected
// by the request's model name (see README.md).
//
//	go run ./hack/demoprovider --addr 127.0.0.1:9090
//
// Once it accepts connections it prints exactly one line to stdout,
// "demoprovider listening on http://ADDR", and it stops cleanly on SIGINT or SIGTERM.
// GET /stats answers counters of what it served (predictions created and canceled, chat
// requests), for end-to-end tests.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// shutdownGrace bounds how long a stop waits for in-flight responses to finish.
const shutdownGrace = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demoprovider:", err)
		os.Exit(1)
	}
}

// run parses args, serves until ctx ends, then shuts down. The ready line goes to
// stdout; flag errors and the request log go to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demoprovider", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", defaultAddr, "listen address (port 0 picks a free port)")
	chunks := fs.Int("chunks", defaultChunks, "pieces an echoed text is streamed in")
	delay := fs.Duration("delay", defaultDelay, "delay before each streamed piece")
	slowDelay := fs.Duration("slow-delay", defaultSlowDelay, `delay per piece for models containing "slow"`)
	apiKey := fs.String("api-key", "", "if set, require this key where each provider expects its credential (see README.md)")
	jobDuration := fs.Duration("job-duration", defaultJobDuration, "time a Replicate prediction takes to finish")
	quiet := fs.Bool("quiet", false, "do not log requests to stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	case *chunks < 1:
		return errors.New("--chunks must be at least 1")
	case *delay < 0 || *slowDelay < 0:
		return errors.New("--delay and --slow-delay must not be negative")
	case *jobDuration <= 0:
		return errors.New("--job-duration must be positive")
	}

	handler := newServer(config{
		Chunks: *chunks, Delay: *delay, SlowDelay: *slowDelay,
		APIKey: *apiKey, JobDuration: *jobDuration,
	})
	if !*quiet {
		handler = logRequests(log.New(stderr, "demoprovider: ", log.LstdFlags|log.Lmicroseconds), handler)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// Every request context derives from base, so cancelling it on shutdown releases
	// stalled and paced streams instead of waiting for their clients.
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "demoprovider listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	cancelBase()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// logRequests logs one line per finished request: method, path, status and duration.
// It never logs headers, so a credential cannot reach the log.
func logRequests(l *log.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		l.Printf("%s %s %d %s", r.Method, r.URL.Path, rec.status, time.Since(start).Round(time.Millisecond))
	})
}

// statusRecorder remembers the response status. Unwrap lets http.ResponseController
// reach the underlying writer's Flush.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	written bool
}

// WriteHeader records the first status written.
func (s *statusRecorder) WriteHeader(code int) {
	if !s.written {
		s.status, s.written = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap returns the wrapped writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
