package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// End-to-end tests: the built switchboard binary in standalone mode, serving manifests
// from a temporary folder, against the built demo provider; driven over HTTP with the Go
// client.

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "switchboard-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	for pkg, name := range map[string]string{".": "switchboard", "../../hack/demoprovider": "demoprovider"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	stopCluster()
	os.RemoveAll(dir)
	os.Exit(code)
}

// lockedBuffer collects a process's output for assertions.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs a built binary until the test ends; its combined output is returned.
func start(tb testing.TB, name string, args ...string) *lockedBuffer {
	tb.Helper()
	out, _ := startProcess(tb, name, args...)
	return out
}

// process is a started binary. Wait returns once it has exited; it may be called more
// than once.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *process) Wait(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		tb.Fatalf("%s did not exit within %s", p.cmd.Path, timeout)
	}
}

// startProcess is start for a test that also signals the process itself. When the test
// ends, a process still running gets SIGINT, then SIGKILL after 15 seconds.
func startProcess(tb testing.TB, name string, args ...string) (*lockedBuffer, *process) {
	tb.Helper()
	return startLabeled(tb, name, name, args...)
}

// startLabeled is startProcess for a test that runs several processes of one binary:
// label names this one in failures and in the output logged when the test fails.
func startLabeled(tb testing.TB, label, name string, args ...string) (*lockedBuffer, *process) {
	tb.Helper()
	return startCommand(tb, label, exec.Command(filepath.Join(binDir, name), args...))
}

// startCommand is startLabeled for a command the test prepared (its environment, say).
func startCommand(tb testing.TB, label string, cmd *exec.Cmd) (*lockedBuffer, *process) {
	tb.Helper()
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // fails harmlessly once it has exited
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			tb.Errorf("%s did not stop on SIGINT", label)
		}
		if tb.Failed() {
			tb.Logf("%s output:\n%s", label, out.String())
		}
	})
	return out, p
}

// handedOut holds the addresses freeAddr returned: the kernel may offer a port again
// once its probe listener is closed, before the process meant to listen on it has
// started, and two processes of one test would then race for it.
var handedOut sync.Map

// freeAddr returns a loopback address with a free port that no earlier call returned.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if _, taken := handedOut.LoadOrStore(addr, true); !taken {
			return addr
		}
	}
}

func eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const e2eKey = "e2e-key-6b1f"

// manifests renders the test's models, all served by the demo provider at provider.
func manifests(provider string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: demo, namespace: e2e}
stringData: {api-key: %[2]s}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: flaky, namespace: e2e}
spec:
  provider: openai-compatible
  model: echo-error-503
  endpoint: http://%[1]s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [chat]
  capabilities: {streaming: true}
  routing: {priority: 10}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: echo, namespace: e2e}
spec:
  provider: openai-compatible
  model: echo
  endpoint: http://%[1]s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [chat]
  capabilities: {streaming: true, tools: true}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: claude, namespace: e2e}
spec:
  provider: anthropic
  model: echo
  endpoint: http://%[1]s/anthropic
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [summarize]
  capabilities: {streaming: true}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: painter, namespace: e2e}
spec:
  provider: replicate
  model: demo/painter-slow
  endpoint: http://%[1]s/replicate
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [text-to-image]
  capabilities: {input: [text], output: [image]}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: staller, namespace: e2e}
spec:
  provider: openai-compatible
  model: echo-stall
  endpoint: http://%[1]s/openai/v1
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [stall]
  capabilities: {streaming: true}
`, provider, e2eKey)
}

type env struct {
	api, probe string
	// providerAddr is the demo provider's address.
	providerAddr string
	dir          string
	provider     *lockedBuffer
	runtime      *lockedBuffer
	process      *process
	client       *client.Client
}

// setup starts the demo provider and switchboard on the test's manifests; args are
// added to switchboard's flags.
func setup(t *testing.T, args ...string) *env {
	t.Helper()
	return setupWith(t, nil, args...)
}

// setupWith is setup with more manifests: extra renders them for the demo provider's
// address.
func setupWith(t *testing.T, extra func(provider string) string, args ...string) *env {
	t.Helper()
	providerAddr := freeAddr(t)
	e := &env{api: freeAddr(t), probe: freeAddr(t), dir: t.TempDir(), providerAddr: providerAddr}
	e.provider = start(t, "demoprovider", "--addr", providerAddr, "--api-key", e2eKey, "--job-duration", "1s")
	eventually(t, 10*time.Second, "demo provider", func() bool {
		return strings.Contains(e.provider.String(), "listening on")
	})
	e.writeModels(t, extra)
	e.runtime, e.process = startProcess(t, "switchboard", append([]string{"--manifests", e.dir, "--runtime-bind-address", e.api,
		"--health-probe-bind-address", e.probe, "--metrics-bind-address", "0", "--cleanup-grace", "2s"}, args...)...)
	eventually(t, 15*time.Second, "switchboard /readyz", func() bool {
		resp, err := http.Get("http://" + e.probe + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	c, err := client.New("http://" + e.api)
	if err != nil {
		t.Fatal(err)
	}
	e.client = c
	return e
}

// writeModels writes the test's manifests, with extra's, as the folder switchboard
// watches; a running switchboard reloads them.
func (e *env) writeModels(t *testing.T, extra func(provider string) string) {
	t.Helper()
	models := manifests(e.providerAddr)
	if extra != nil {
		models += "---\n" + extra(e.providerAddr)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "models.yaml"), []byte(models), 0o600); err != nil {
		t.Fatal(err)
	}
}

func textRequest(ability, text string, parts ...protocol.Part) *protocol.Request {
	return &protocol.Request{Ability: ability, Input: append([]protocol.Part{{Type: protocol.PartText, Text: text}}, parts...)}
}

func types(events []protocol.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = string(ev.Type)
	}
	return out
}

func follow(t *testing.T, ctx context.Context, c *client.Client, id string) []protocol.Event {
	t.Helper()
	var events []protocol.Event
	if err := c.Follow(ctx, id, 0, func(ev protocol.Event) error {
		events = append(events, ev)
		return nil
	}); err != nil {
		t.Fatalf("Follow: %v", err)
	}
	return events
}

func TestEndToEnd(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("streamed text with fallback from a 503 deployment", func(t *testing.T) {
		acc, err := e.client.Submit(ctx, textRequest("chat", "hello end to end"))
		if err != nil {
			t.Fatal(err)
		}
		events := follow(t, ctx, e.client, acc.ID)
		got := strings.Join(types(events), " ")
		want := "execution.accepted route.selected route.attempt_failed route.selected output.delta"
		if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "usage.reported execution.completed") {
			t.Errorf("events = %s", got)
		}
		var failed protocol.AttemptFailedData
		if err := json.Unmarshal(events[2].Data, &failed); err != nil {
			t.Fatal(err)
		}
		if failed.Deployment != "e2e/flaky" || failed.Error.Code != protocol.CodeProviderUnavailable || !failed.Error.Retryable {
			t.Errorf("attempt_failed = %+v", failed)
		}
		snap, err := e.client.FollowResult(ctx, acc.ID)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Status != protocol.StatusCompleted || len(snap.Output) != 1 || snap.Output[0].Text != "hello end to end" {
			t.Errorf("snapshot = %+v", snap)
		}
		server, err := e.client.Result(ctx, acc.ID)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(snap)
		b, _ := json.Marshal(server)
		if !bytes.Equal(a, b) {
			t.Errorf("client snapshot %s != server /result %s", a, b)
		}
	})

	t.Run("tool call with assembled arguments", func(t *testing.T) {
		req := textRequest("chat", "Weather in Paris?", protocol.Part{Type: protocol.PartTool, Name: "get_weather",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)})
		acc, err := e.client.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := e.client.FollowResult(ctx, acc.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.ToolCalls) != 1 || snap.ToolCalls[0].Name != "get_weather" || snap.ToolCalls[0].Arguments != `{"city":"Paris"}` {
			t.Errorf("tool calls = %+v", snap.ToolCalls)
		}
		if snap.FinishReason != "tool_calls" {
			t.Errorf("finish reason = %q", snap.FinishReason)
		}
	})

	t.Run("anthropic streamed text", func(t *testing.T) {
		acc, err := e.client.Submit(ctx, textRequest("summarize", "short text"))
		if err != nil {
			t.Fatal(err)
		}
		snap, err := e.client.FollowResult(ctx, acc.ID)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Status != protocol.StatusCompleted || len(snap.Output) != 1 || snap.Output[0].Text != "short text" {
			t.Errorf("snapshot = %+v", snap)
		}
	})

	t.Run("an image part is refused when no model declares input.image", func(t *testing.T) {
		req := &protocol.Request{Ability: "chat", Requirements: []protocol.Capability{protocol.CapInputText},
			Input: []protocol.Part{{Type: protocol.PartImage, MediaType: "image/png", Data: "aGk="}}}
		_, err := e.client.Submit(ctx, req)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code() != protocol.CodeUnsupportedCapability {
			t.Fatalf("Submit error = %v, want unsupported_capability", err)
		}
	})

	t.Run("async job cancelled mid-way", func(t *testing.T) {
		acc, err := e.client.Submit(ctx, textRequest("text-to-image", "a lighthouse"))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := e.client.Events(ctx, acc.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var events []protocol.Event
		cancelled := false
		for stream.Next() {
			ev := stream.Event()
			events = append(events, ev)
			if ev.Type == protocol.EventProgress && !cancelled {
				cancelled = true
				if _, err := e.client.Cancel(ctx, acc.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		last := events[len(events)-1]
		var failed protocol.FailedData
		if err := json.Unmarshal(last.Data, &failed); err != nil {
			t.Fatal(err)
		}
		if last.Type != protocol.EventFailed || failed.Error.Code != protocol.CodeCancelled {
			t.Errorf("last event = %s %s", last.Type, last.Data)
		}
		for _, ev := range events {
			if ev.Type == protocol.EventOutputResult {
				t.Error("a cancelled job produced a result")
			}
		}
		eventually(t, 5*time.Second, "remote cancel at the provider", func() bool {
			return hasLine(e.provider.String(), "POST /replicate/v1/predictions/", "/cancel")
		})
		// Cancelling a terminal execution is a no-op.
		st, err := e.client.Cancel(ctx, acc.ID)
		if err != nil || st.Status != "failed" {
			t.Errorf("second cancel = %+v, %v", st, err)
		}
	})

	t.Run("a manifest edit is applied without restart", func(t *testing.T) {
		if _, err := e.client.Submit(ctx, textRequest("translate", "bonjour")); err == nil {
			t.Fatal("translate served before it was declared")
		}
		path := filepath.Join(e.dir, "models.yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		edited := strings.Replace(string(data), "abilities: [summarize]", "abilities: [summarize, translate]", 1)
		if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
			t.Fatal(err)
		}
		eventually(t, 3*time.Second, "the new ability", func() bool {
			_, err := e.client.Submit(ctx, textRequest("translate", "bonjour"))
			return err == nil
		})
	})

	t.Run("the credential never reaches logs, events or results", func(t *testing.T) {
		if strings.Contains(e.runtime.String(), e2eKey) {
			t.Error("switchboard's log holds the credential")
		}
		resp, err := http.Get("http://" + e.probe + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), e2eKey) {
			t.Error("readyz holds the credential")
		}
	})
}

func hasLine(out string, parts ...string) bool {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
