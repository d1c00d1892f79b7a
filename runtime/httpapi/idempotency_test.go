package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
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

// TestIdempotencyKeyLimit: a caller whose unexpired keys reach
// MaxReservations gets 429 rate_limited for a new one before anything is
// created, told to retry when its earliest key expires; replays, submissions without a
// key and other callers are not limited, and a refused submission's key does not count.
func TestIdempotencyKeyLimit(t *testing.T) {
	const limit = 3
	e := newAuthEnv(t, withEngine(func(c *engine.Config) { c.MaxReservations = limit }))
	chatBody := `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`
	var first accepted
	for i := range limit {
		acc := e.submitAs(t, aliceToken, "chat", "Idempotency-Key", fmt.Sprintf("alice-%d", i))
		if i == 0 {
			first = acc
		}
	}
	// The accepted executions run in the background: let each make its adapter call
	// before counting, so that a late one is not taken for the refused submission's.
	eventually(t, "the accepted executions' adapter calls", func() bool { return e.calls.Load() >= limit })
	creates, calls := e.store.creates.Load(), e.calls.Load()

	a := e.call(t, http.MethodPost, "/v1/executions", aliceToken, chatBody, "Idempotency-Key", "alice-new")
	if a.status != http.StatusTooManyRequests || a.code(t) != protocol.CodeRateLimited {
		t.Fatalf("key %d of alice: %d %s, want 429 rate_limited", limit+1, a.status, a.body)
	}
	var body protocol.ErrorBody
	if err := json.Unmarshal(a.body, &body); err != nil {
		t.Fatal(err)
	}
	// The earliest key was made a moment ago with the default ttl of a day.
	wait := time.Duration(body.Error.RetryAfterMs) * time.Millisecond
	if !body.Error.Retryable || wait < engine.DefaultIdempotencyTTL-time.Minute || wait > engine.DefaultIdempotencyTTL {
		t.Errorf("retryable %v, retry_after_ms %d: want retryable, in about %v", body.Error.Retryable, body.Error.RetryAfterMs, engine.DefaultIdempotencyTTL)
	}
	if got, want := a.header.Get("Retry-After"), strconv.FormatInt((body.Error.RetryAfterMs+999)/1000, 10); got != want {
		t.Errorf("Retry-After %q, want %q", got, want)
	}
	if c, n := e.store.creates.Load(), e.calls.Load(); c != creates || n != calls {
		t.Errorf("the refused submission created %d executions and called the adapter %d times", c-creates, n-calls)
	}

	if again := e.submitAs(t, aliceToken, "chat", "Idempotency-Key", "alice-0"); again.ID != first.ID {
		t.Errorf("alice's replay at her limit gave %s, want %s", again.ID, first.ID)
	}
	e.submitAs(t, aliceToken, "chat") // without a key

	// Bob counts his own keys, and those of his refused submissions are released.
	e.submitAs(t, bobToken, "chat", "Idempotency-Key", "alice-new")
	for i := range 2 * limit {
		a := e.call(t, http.MethodPost, "/v1/executions", bobToken, `{"ability":"translate","input":[{"type":"text","text":"hi"}]}`,
			"Idempotency-Key", fmt.Sprintf("bob-refused-%d", i))
		if a.status != http.StatusUnprocessableEntity || a.code(t) != protocol.CodeUnsupportedCapability {
			t.Fatalf("bob's refused submission %d: %d %s, want 422 unsupported_capability", i, a.status, a.body)
		}
	}
	for i := 1; i < limit; i++ {
		e.submitAs(t, bobToken, "chat", "Idempotency-Key", fmt.Sprintf("bob-%d", i))
	}
	if a := e.call(t, http.MethodPost, "/v1/executions", bobToken, chatBody, "Idempotency-Key", "bob-new"); a.status != http.StatusTooManyRequests {
		t.Errorf("key %d of bob: %d %s, want 429", limit+1, a.status, a.body)
	}
}

// A replay answers the 202 body of the first submission byte for byte, stream tokens
// included: it is rendered again from the execution's id and creation time, and a token
// signed again for them is the same while its key is in force. A reservation stored by
// the previous version, which kept that body itself, replays the same way.
func TestReplayBodies(t *testing.T) {
	e := newAuthEnv(t)
	const body = `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`
	first := e.call(t, http.MethodPost, "/v1/executions", aliceToken, body, "Idempotency-Key", "now")
	again := e.call(t, http.MethodPost, "/v1/executions", aliceToken, body, "Idempotency-Key", "now")
	if first.status != http.StatusAccepted || again.status != http.StatusAccepted || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay: %d %s, want %d %s", again.status, again.body, first.status, first.body)
	}

	// The previous version stored its 202 body in the reservation; the key's execution
	// is one submitted without a key here.
	plain := e.call(t, http.MethodPost, "/v1/executions", aliceToken, body)
	var acc struct {
		ID        string `json:"id"`
		CreatedAt string `json:"created_at"`
		Links     struct {
			Events string `json:"events"`
		} `json:"links"`
	}
	if err := json.Unmarshal(plain.body, &acc); err != nil {
		t.Fatal(err)
	}
	_, token, _ := strings.Cut(acc.Links.Events, "?token=")
	stored := fmt.Sprintf(`{"id":"%[1]s","status":"accepted","created_at":"%[2]s","links":{"self":"/v1/executions/%[1]s",`+
		`"events":"/v1/executions/%[1]s/events?token=%[3]s","result":"/v1/executions/%[1]s/result?token=%[3]s","cancel":"/v1/executions/%[1]s/cancel"}}`,
		acc.ID, acc.CreatedAt, token)
	if stored != string(plain.body) {
		t.Fatalf("202 body %s, want the form of the previous version %s", plain.body, stored)
	}
	createdAt, err := time.Parse(time.RFC3339Nano, acc.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := protocol.Fingerprint([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	r := eventstore.Reservation{Scope: "principal:alice", Fingerprint: fp, ExecutionID: acc.ID, Response: []byte(stored), CreatedAt: createdAt}
	if _, ok, err := e.store.Reserve(t.Context(), "principal:alice earlier", r, time.Hour, 0); err != nil || !ok {
		t.Fatalf("Reserve: %v, %v", ok, err)
	}
	replay := e.call(t, http.MethodPost, "/v1/executions", aliceToken, body, "Idempotency-Key", "earlier")
	if replay.status != http.StatusAccepted || replay.header.Get("Idempotent-Replayed") != "true" || string(replay.body) != stored {
		t.Errorf("replay of the previous version's reservation: %d %q %s, want %s", replay.status, replay.header.Get("Idempotent-Replayed"), replay.body, stored)
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
