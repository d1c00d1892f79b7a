package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func TestIdempotencyConcurrentDuplicates(t *testing.T) {
	e := newEnv(t)
	const n = 100
	body := chat("once")
	results := make([]response, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = e.do(t, http.MethodPost, "/v1/executions", body, "Idempotency-Key", "dup-key")
		})
	}
	close(start)
	wg.Wait()

	var id, firstBody string
	fresh := 0
	for _, r := range results {
		if r.status != http.StatusAccepted {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		var acc client.Accepted
		mustUnmarshal(t, r.body, &acc)
		if id == "" {
			id, firstBody = acc.ID, r.body
		}
		if acc.ID != id || r.body != firstBody {
			t.Fatalf("different answers: %s and %s", firstBody, r.body)
		}
		if r.header.Get("Location") != "/v1/executions/"+id {
			t.Errorf("Location %q", r.header.Get("Location"))
		}
		switch r.header.Get("Idempotent-Replayed") {
		case "":
			fresh++
		case "true":
		default:
			t.Errorf("Idempotent-Replayed %q", r.header.Get("Idempotent-Replayed"))
		}
	}
	if fresh != 1 {
		t.Errorf("%d responses are not marked as replays, want exactly 1", fresh)
	}
	e.waitTerminal(t, id)
	if c, a := e.store.creates.Load(), e.store.accepted.Load(); c != 1 || a != 1 {
		t.Errorf("%d executions created and %d execution.accepted recorded, want 1 and 1", c, a)
	}
	if calls := e.calls.Load(); calls != 1 {
		t.Errorf("adapter called %d times", calls)
	}

	// A replay after the execution finished still answers with the original body.
	r := e.do(t, http.MethodPost, "/v1/executions", body, "Idempotency-Key", "dup-key")
	if r.status != http.StatusAccepted || r.body != firstBody || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("late replay: %d %q %s", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
}

func TestIdempotencyKeyForms(t *testing.T) {
	e := newEnv(t)
	body := chat("forms")

	// Bodies that differ only in formatting share a fingerprint.
	id := e.submit(t, body, "Idempotency-Key", `abc-123`)
	for _, tt := range []struct{ key, body string }{
		{`"abc-123"`, body},
		{`abc-123`, "{\n  \"input\": [{\"text\": \"forms\", \"type\": \"text\"}],\n  \"ability\": \"chat\"\n}"},
	} {
		r := e.do(t, http.MethodPost, "/v1/executions", tt.body, "Idempotency-Key", tt.key)
		var acc client.Accepted
		mustUnmarshal(t, r.body, &acc)
		if r.status != http.StatusAccepted || acc.ID != id || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("key %s: %d %s", tt.key, r.status, r.body)
		}
	}

	// Escapes: "a\"b\\c" is the key a"b\c, which the raw form spells as is.
	id2 := e.submit(t, body, "Idempotency-Key", `"a\"b\\c"`)
	r := e.do(t, http.MethodPost, "/v1/executions", body, "Idempotency-Key", `a"b\c`)
	if !strings.Contains(r.body, id2) || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("escaped and raw forms differ: %s", r.body)
	}

	// The client sends the quoted form; the server sees the same key.
	acc, err := e.client.Submit(context.Background(), mustDecode(t, body), client.WithIdempotencyKey("abc-123"))
	if err != nil || acc.ID != id || !acc.Replayed {
		t.Errorf("client replay: %+v, %v", acc, err)
	}

	// Another body with the same key.
	wantError(t, e.do(t, http.MethodPost, "/v1/executions", chat("other"), "Idempotency-Key", `"abc-123"`),
		http.StatusUnprocessableEntity, protocol.CodeIdempotencyKeyReused)

	for name, hs := range map[string][]string{
		"empty":            {"Idempotency-Key", ``},
		"empty quoted":     {"Idempotency-Key", `""`},
		"two headers":      {"Idempotency-Key", "a", "Idempotency-Key", "b"},
		"too long":         {"Idempotency-Key", strings.Repeat("k", 256)},
		"too long quoted":  {"Idempotency-Key", `"` + strings.Repeat("k", 256) + `"`},
		"space":            {"Idempotency-Key", "a b"},
		"space quoted":     {"Idempotency-Key", `"a b"`},
		"non-ASCII":        {"Idempotency-Key", "clé"},
		"unterminated":     {"Idempotency-Key", `"abc`},
		"trailing garbage": {"Idempotency-Key", `"abc"x`},
		"parameters":       {"Idempotency-Key", `"abc";p=1`},
		"bad escape":       {"Idempotency-Key", `"a\nb"`},
		"inner quote":      {"Idempotency-Key", `"a"b"`},
		"tab":              {"Idempotency-Key", "a\tb"},
		"list of two":      {"Idempotency-Key", `"a", "b"`},
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, e.do(t, http.MethodPost, "/v1/executions", body, hs...), http.StatusBadRequest, protocol.CodeInvalidRequest)
		})
	}
	e.submit(t, body, "Idempotency-Key", strings.Repeat("k", 255))
}

func TestIdempotencyRejectedNotRemembered(t *testing.T) {
	e := newEnv(t)

	// Invalid bodies are rejected before the key is looked at.
	wantError(t, e.do(t, http.MethodPost, "/v1/executions", `{"ability":"chat"}`, "Idempotency-Key", "k1"),
		http.StatusBadRequest, protocol.CodeInvalidRequest)
	r := e.do(t, http.MethodPost, "/v1/executions", chat("valid"), "Idempotency-Key", "k1")
	if r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after a 400: %d %s", r.status, r.body)
	}

	// A routing rejection releases the key: repeating it is rejected again (not a
	// replay of nothing), and another body with the key then succeeds.
	image := `{"ability":"chat","input":[{"type":"image","media_type":"image/png","data":"AA=="}]}`
	for range 2 {
		wantError(t, e.do(t, http.MethodPost, "/v1/executions", image, "Idempotency-Key", "k2"),
			http.StatusUnprocessableEntity, protocol.CodeUnsupportedCapability)
	}
	r = e.do(t, http.MethodPost, "/v1/executions", chat("valid"), "Idempotency-Key", "k2")
	if r.status != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after a 422: %d %s", r.status, r.body)
	}
}

func mustDecode(t testing.TB, body string) *protocol.Request {
	t.Helper()
	req, err := protocol.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}
