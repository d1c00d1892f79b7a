// Command streamviewer serves the stream viewer page (index.html) and passes its event
// stream requests on to a switchboard runtime, so that page and stream share one origin:
// the runtime sends no CORS headers, so a browser refuses a stream from another origin.
// It is a local tool (see README.md).
//
//	go run ./hack/streamviewer --runtime http://localhost:8080
//
// Only GET /v1/executions/{id}/events is passed on, with its query (the signed token) and
// Last-Event-ID; nothing is logged but failures, and never a URL.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

//go:embed index.html
var page []byte

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "streamviewer:", err)
		os.Exit(1)
	}
}

// run parses args and serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("streamviewer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	runtime := fs.String("runtime", "http://localhost:8080", "base URL of the switchboard runtime's execution API")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	h, err := newHandler(*runtime, log.New(stderr, "streamviewer: ", log.LstdFlags))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "streamviewer listening on http://%s/ for %s\n", ln.Addr(), *runtime)
	go func() {
		<-ctx.Done()
		// Open streams never end by themselves; close them rather than wait.
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newHandler serves the page at / and proxies event streams to the runtime at base.
func newHandler(base string, logger *log.Logger) (http.Handler, error) {
	target, err := url.Parse(base)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" || target.RawQuery != "" {
		return nil, errors.New("--runtime must be an absolute http or https URL without a query")
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			// The page never sends credentials but its link's token; cookies of this
			// origin are not the runtime's business.
			r.Out.Header.Del("Cookie")
			r.Out.Header.Del("Authorization")
		},
		// A transport error names the runtime's address, never the request URL with its
		// token.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil {
				logger.Printf("cannot reach the runtime: %v", err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
		ErrorLog: logger,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write(page)
	})
	mux.Handle("GET /v1/executions/{id}/events", proxy)
	return mux, nil
}
