package telemetry_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/telemetry"
)

// TestAccessLogKeepsEveryLine: the production logger samples repeated messages (100 per
// second, then every 100th); the access log keeps one JSON line per request, also when
// they are more than its buffer holds and after Close.
func TestAccessLogKeepsEveryLine(t *testing.T) {
	var out bytes.Buffer
	access := telemetry.NewAccessLog(zap.Options{DestWriter: &out})
	const n = 10_000 // more than the buffer holds: a full buffer is written out, never dropped
	for range n {
		access.Write(httpapi.AccessEntry{Route: "POST /v1/executions", Method: "POST", Status: 202, Duration: time.Millisecond, Principal: "anonymous"})
	}
	access.Close()
	access.Write(httpapi.AccessEntry{Route: "/", Method: "GET", Status: 404}) // after Close: written directly
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != n+1 {
		t.Fatalf("%d lines, want %d", len(lines), n+1)
	}
	var line struct {
		Logger string `json:"logger"`
		Msg    string `json:"msg"`
		Route  string `json:"route"`
		Status int    `json:"status"`
		Method string `json:"method"`
		Dur    any    `json:"duration"`
	}
	if err := json.Unmarshal([]byte(lines[n-1]), &line); err != nil {
		t.Fatalf("not a JSON line: %q: %v", lines[n-1], err)
	}
	if line.Logger != "access" || line.Msg != "HTTP request" || line.Route != "POST /v1/executions" || line.Status != 202 || line.Method != "POST" || line.Dur == nil {
		t.Errorf("line = %+v", line)
	}
}

// Buffered lines are written out while the process runs, not only at Close.
func TestAccessLogWritesWhileRunning(t *testing.T) {
	var out lockedBuffer
	access := telemetry.NewAccessLog(zap.Options{DestWriter: &out})
	defer access.Close()
	access.Write(httpapi.AccessEntry{Route: "GET /v1/executions/{id}", Method: "GET", Status: 200})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), `"route":"GET /v1/executions/{id}"`) {
		if time.Now().After(deadline) {
			t.Fatal("the line was not written out within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
