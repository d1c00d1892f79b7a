package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// --allow-loopback-endpoints defaults to true in standalone mode only, and an explicit
// value wins in either mode.
func TestAllowLoopbackEndpointsDefault(t *testing.T) {
	for args, want := range map[string]bool{
		"":                           false,
		"--allow-loopback-endpoints": true,
		"--manifests=dir":            true,
		"--manifests=dir --allow-loopback-endpoints=false": false,
	} {
		o, err := parseFlags(strings.Fields(args), &strings.Builder{})
		if err != nil {
			t.Fatalf("parseFlags(%q): %v", args, err)
		}
		if o.allowLoopback != want {
			t.Errorf("parseFlags(%q): allow loopback %v, want %v", args, o.allowLoopback, want)
		}
	}
}

// fencedModels are one openai-compatible deployment per endpoint, each under its own
// ability, with the demo's credential.
func fencedModels(endpoints map[string]string) func(string) string {
	return func(string) string {
		var b strings.Builder
		for ability, endpoint := range endpoints {
			fmt.Fprintf(&b, `---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: %[1]s, namespace: e2e}
spec:
  provider: openai-compatible
  model: echo
  endpoint: %[2]s
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [%[1]s]
  capabilities: {streaming: true}
`, ability, endpoint)
		}
		return b.String()
	}
}

// On the built binary with loopback endpoints refused: an execution routed to a cloud
// metadata address (on any port), to an open or a closed loopback port, or to a name
// that resolves to loopback fails with provider_rejected and one message for all, not
// retryable; the loopback listener never sees a connection.
func TestEndpointFenceEndToEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	endpoints := map[string]string{
		"metadata":       "http://169.254.169.254/v1",
		"metadata-redis": "http://169.254.169.254:6379/v1",
		"metadata-v6":    "http://[fd00:ec2::254]/v1",
		"loopback-open":  "http://" + ln.Addr().String() + "/v1",
		"loopback-close": "http://" + freeAddr(t) + "/v1",
		"localhost":      "http://localhost:" + port + "/v1",
	}
	e := setupWith(t, fencedModels(endpoints), "--allow-loopback-endpoints=false")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var first *protocol.Error
	for ability, endpoint := range endpoints {
		acc, err := e.client.Submit(ctx, textRequest(ability, "hello"))
		if err != nil {
			t.Fatalf("%s: %v", ability, err)
		}
		snap, err := e.client.FollowResult(ctx, acc.ID)
		if err != nil {
			t.Fatalf("%s: %v", ability, err)
		}
		if snap.Status != protocol.StatusFailed || snap.Error == nil ||
			snap.Error.Code != protocol.CodeProviderRejected || snap.Error.Retryable {
			t.Errorf("%s (%s): snapshot %+v, want failed with provider_rejected, not retryable", ability, endpoint, snap)
			continue
		}
		if first == nil {
			first = snap.Error
		} else if snap.Error.Message != first.Message {
			t.Errorf("%s: message %q, want every refusal's %q", ability, snap.Error.Message, first.Message)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections, want none", n)
	}
	if first != nil {
		for _, leak := range []string{"169.254", "fd00", "127.0.0.1", "localhost", port, "6379"} {
			if strings.Contains(first.Message, leak) {
				t.Errorf("the refusal %q names %q", first.Message, leak)
			}
		}
	}
}
