package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, stdout := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0", "--delay", "0", "--quiet"}, stdout, io.Discard)
		stdout.Close()
	}()

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no ready line: %v", err)
	}
	m := regexp.MustCompile(`^demoprovider listening on (http://127\.0\.0\.1:\d+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("ready line = %q", line)
	}
	base := m[1]
	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()

	// A stalled stream must not hold up the shutdown.
	body := `{"model":"gpt-stall","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	resp, err = http.Post(base+"/openai/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if strings.Contains(l, `"content":"h"`) { // "hi" streams as "h", "i"
			break
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-time.After(shutdownGrace + 2*time.Second):
		t.Fatal("run did not stop")
	}
	if _, err := io.ReadAll(br); err != nil {
		t.Logf("stalled stream ended with %v", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--chunks", "0"},
		{"--delay", "-1s"},
		{"--job-duration", "0"},
		{"--nope"},
		{"extra"},
		{"--addr", "256.0.0.1:1"},
	} {
		if err := run(t.Context(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
