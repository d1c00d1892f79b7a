package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Module paths of the two binaries a session builds when they are not given.
const (
	switchboardPkg  = "github.com/switchboard-dev/switchboard/cmd/switchboard"
	demoProviderPkg = "github.com/switchboard-dev/switchboard/hack/demoprovider"
	relayPkg        = "github.com/switchboard-dev/switchboard/hack/relay"
)

// benchKey is the credential the demo provider requires and the runtime's Secret holds;
// direct calls present it too, so that both sides do the same work upstream.
const benchKey = "bench-key"

// benchNamespace and benchAbility address the one ModelDeployment of the benchmarks.
const (
	benchNamespace = "bench"
	benchAbility   = "chat"
)

// common holds the flags every subcommand shares.
type common struct {
	switchboard   string
	demoprovider  string
	relay         string
	maxConcurrent int
	retention     time.Duration
	extraFlags    string
	keep          bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.switchboard, "switchboard", "", "switchboard binary to measure (default: build ./cmd/switchboard into a temporary folder)")
	fs.StringVar(&c.demoprovider, "demoprovider", "", "demo provider binary (default: build ./hack/demoprovider into a temporary folder)")
	fs.StringVar(&c.relay, "relay", "", "baseline relay binary (default: build ./hack/relay into a temporary folder)")
	fs.IntVar(&c.maxConcurrent, "max-concurrent", 4096, "switchboard --max-concurrent-executions")
	fs.DurationVar(&c.retention, "retention", 10*time.Minute, "switchboard --retention: how long finished executions are kept (in memory or in Redis)")
	fs.StringVar(&c.extraFlags, "switchboard-flags", "", "more switchboard flags, space-separated (e.g. \"--zap-log-level=error\")")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary folder (binaries, manifests, process logs); it is always kept after a failure")
}

// session is one run's temporary folder, binaries and started processes.
type session struct {
	common
	dir    string
	stderr io.Writer
	procs  []*proc
}

// newSession creates the temporary folder, builds the binaries that were not given and
// prints which binaries are measured.
func newSession(ctx context.Context, c common, stdout, stderr io.Writer) (*session, error) {
	dir, err := os.MkdirTemp("", "switchboard-bench-")
	if err != nil {
		return nil, err
	}
	s := &session{common: c, dir: dir, stderr: stderr}
	type build struct {
		path      *string
		pkg, name string
	}
	var builds []build
	if s.switchboard == "" {
		builds = append(builds, build{&s.switchboard, switchboardPkg, "switchboard"})
	}
	if s.demoprovider == "" {
		builds = append(builds, build{&s.demoprovider, demoProviderPkg, "demoprovider"})
	}
	if s.relay == "" {
		builds = append(builds, build{&s.relay, relayPkg, "relay"})
	}
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		out := filepath.Join(dir, b.name)
		wg.Go(func() {
			fmt.Fprintf(stderr, "bench: building %s\n", b.pkg)
			cmd := exec.CommandContext(ctx, "go", "build", "-o", out, b.pkg) //nolint:gosec // G204: this module's packages, into the session's folder
			if msg, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("build %s (run bench inside the repository, or pass -%s): %w\n%s", b.pkg, b.name, err, msg)
				return
			}
			*b.path = out
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for _, p := range []*string{&s.switchboard, &s.demoprovider, &s.relay} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		*p = abs
	}
	fmt.Fprintf(stdout, "switchboard:  %s (%s)\n", s.switchboard, binaryVersion(ctx, s.switchboard))
	fmt.Fprintf(stdout, "demoprovider: %s\n", s.demoprovider)
	fmt.Fprintf(stdout, "relay:        %s (the baseline: the same exchanges with net/http alone)\n", s.relay)
	fmt.Fprintf(stdout, "client:       %d CPUs, GOMAXPROCS %d\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	return s, nil
}

// binaryVersion is the first line of `bin --version`, or "version unknown".
func binaryVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || line == "" {
		return "version unknown"
	}
	return line
}

// close stops every process the session started and removes the temporary folder,
// unless *errp is set or -keep was given: then the folder, with the processes' logs,
// is kept and named.
func (s *session) close(errp *error) {
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].stop(); err != nil && *errp == nil {
			*errp = err
		}
	}
	if *errp != nil || s.keep {
		fmt.Fprintf(s.stderr, "bench: binaries, manifests and process logs kept in %s\n", s.dir)
		return
	}
	os.RemoveAll(s.dir)
}

// proc is a started process whose combined output goes to a log file in the session's
// folder.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs bin with args; name names its log file and its failures.
func (s *session) start(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(s.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...) //nolint:gosec // G204: the binaries this session built or was given
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // an exit is reported by whoever waits for the process
		f.Close()
		close(p.done)
	}()
	s.procs = append(s.procs, p)
	return p, nil
}

// pid is the process id, for /proc.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGINT and waits for the exit, killing the process after 15 seconds. It
// may be called more than once.
func (p *proc) stop() error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(os.Interrupt) // fails harmlessly once it has exited
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop on SIGINT; killed", p.name)
	}
}

// failure describes an unexpected state of the process with the end of its log.
func (p *proc) failure(format string, args ...any) error {
	state := "running"
	if p.exited() {
		state = p.cmd.ProcessState.String()
	}
	data, _ := os.ReadFile(p.log)
	if len(data) > 2048 {
		data = data[len(data)-2048:]
	}
	return fmt.Errorf("%s (%s): %s; end of %s:\n%s", p.name, state, fmt.Sprintf(format, args...), p.log, data)
}

// startDemoProvider starts the demo provider on a free loopback port, streaming every
// answer in chunks pieces, each after delay, and returns its address.
func (s *session) startDemoProvider(chunks int, delay time.Duration) (string, error) {
	return s.startDemoProviderAt("127.0.0.1:0", chunks, delay)
}

// startDemoProviderAt is startDemoProvider listening on addr, so that a gateway started
// before the run can be pointed at it.
func (s *session) startDemoProviderAt(addr string, chunks int, delay time.Duration) (string, error) {
	p, err := s.start("demoprovider", s.demoprovider, "--addr", addr, "--quiet",
		"--delay", delay.String(), "--chunks", fmt.Sprint(chunks), "--api-key", benchKey)
	if err != nil {
		return "", err
	}
	return p.readyAddr("demoprovider listening on http://")
}

// startRelay starts the baseline relay (hack/relay) in front of the OpenAI-compatible
// API at endpoint, asking for the bench model. name names its log.
func (s *session) startRelay(name, endpoint string) (*runtimeProc, error) {
	model := overheadModel
	p, err := s.start(name, s.relay, "--addr", "127.0.0.1:0", "--upstream", endpoint, "--model", model, "--api-key", benchKey)
	if err != nil {
		return nil, err
	}
	addr, err := p.readyAddr("relay listening on http://")
	if err != nil {
		return nil, err
	}
	return &runtimeProc{proc: p, api: addr, metrics: addr}, nil
}

// readyAddr waits for the line that starts with ready in p's log and returns the rest
// of it: the address p listens on.
func (p *proc) readyAddr(ready string) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !p.exited() {
		data, _ := os.ReadFile(p.log)
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), ready); ok {
				return addr, nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", p.failure("no ready line")
}

// runtimeProc is a started switchboard, or the relay, and its addresses.
type runtimeProc struct {
	*proc
	api     string // host:port of the execution API
	metrics string // host:port of /metrics
}

// startSwitchboard starts switchboard in standalone mode, serving one openai-compatible
// ModelDeployment of the bench model at endpoint, and waits until it is ready. name names its log;
// args are added to its flags.
func (s *session) startSwitchboard(ctx context.Context, name, endpoint string, args ...string) (*runtimeProc, error) {
	return s.startSwitchboardWith(ctx, name, manifest(endpoint, overheadModel), args...)
}

// startSwitchboardWith is startSwitchboard serving the manifests of models (YAML
// documents, written to the one file of its --manifests folder) instead.
func (s *session) startSwitchboardWith(ctx context.Context, name, models string, args ...string) (*runtimeProc, error) {
	dir := filepath.Join(s.dir, name+"-manifests")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "models.yaml"), []byte(models), 0o600); err != nil {
		return nil, err
	}
	addrs := make([]string, 3)
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	flags := append([]string{
		"--manifests", dir,
		"--runtime-bind-address", addrs[0],
		"--health-probe-bind-address", addrs[1],
		"--metrics-bind-address", addrs[2],
		"--max-concurrent-executions", fmt.Sprint(s.maxConcurrent),
		"--retention", s.retention.String(),
	}, args...)
	flags = append(flags, strings.Fields(s.extraFlags)...)
	p, err := s.start(name, s.switchboard, flags...)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !p.exited() && ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addrs[1]+"/readyz", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return &runtimeProc{proc: p, api: addrs[0], metrics: addrs[2]}, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, p.failure("not ready")
}

// manifest is the runtime's only model: a Secret with the demo provider's key and one
// streaming openai-compatible ModelDeployment.
func manifest(endpoint, model string) string {
	return deploymentManifest(endpoint, model, "")
}

// budgetManifest is manifest with the model priced and capped and one Budget over it
// (spec/budgets.md) whose limits never refuse during a run: every execution reserves
// and settles a cost and a request in the Budget's Month window, and nothing else
// differs from manifest. The Budget's counters are named by its file uid (bench/bench)
// and the month, so that runs against one Redis add to the same keys; a month of runs
// stays far below the limits (a call reserves about 0.003 USD).
func budgetManifest(endpoint, model string) string {
	return deploymentManifest(endpoint, model, `  pricing: {currency: USD, inputTokens: "2.50", outputTokens: "10.00"}
  limits: {maxOutputTokens: 256}
`) + fmt.Sprintf(`---
apiVersion: ai.switchboard.dev/v1alpha1
kind: Budget
metadata: {name: bench, namespace: %s}
spec:
  limits:
    - {window: Month, cost: "1000000.00", requests: 1000000000}
`, benchNamespace)
}

// deploymentManifest is manifest with spec appended to the ModelDeployment's spec
// (indented fields, each line ending in a newline).
func deploymentManifest(endpoint, model, spec string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: bench-credentials, namespace: %[3]s}
stringData: {api-key: %[4]s}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: bench, namespace: %[3]s}
spec:
  provider: openai-compatible
  model: %[2]s
  endpoint: %[1]s
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: bench-credentials, key: api-key}}
  abilities: [%[5]s]
  capabilities: {streaming: true}
%[6]s`, endpoint, model, benchNamespace, benchKey, benchAbility, spec)
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// newHTTPClient returns a keep-alive client that keeps up to conns idle connections per
// host and opens as many as it needs. It has no timeout: calls are bounded by their
// context, and a timeout would cut event streams.
func newHTTPClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// goroutines reads go_goroutines from the runtime's /metrics; ok is false when it
// cannot (a binary without the metric, or no metrics server).
func goroutines(ctx context.Context, metricsAddr string) (n int, ok bool) {
	v, ok := goMetrics(ctx, metricsAddr, "go_goroutines")
	if !ok {
		return 0, false
	}
	return int(v[0]), true
}

// goMetrics reads the values of the named samples (without labels) from the runtime's
// /metrics, in order; ok is false when it cannot read every one of them.
func goMetrics(ctx context.Context, metricsAddr string, names ...string) (vals []float64, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	vals = make([]float64, len(names))
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), " ")
		if i := slices.Index(names, name); i >= 0 {
			if _, err := fmt.Sscan(v, &vals[i]); err != nil {
				return nil, false
			}
			found++
		}
	}
	return vals, found == len(names)
}
