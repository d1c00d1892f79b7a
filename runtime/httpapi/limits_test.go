package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestNonJSONBodiesAre415: a POST body not declared application/json is refused before
// anything is read or created, so a browser's cross-site form post cannot submit or
// cancel an execution.
func TestNonJSONBodiesAre415(t *testing.T) {
	e := newEnv(t)
	body := `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`
	for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=b", "application/jsonx", "application/json-patch+json"} {
		r := e.do(t, http.MethodPost, "/v1/executions", body, "Content-Type", ct)
		if r.status != http.StatusUnsupportedMediaType || !strings.Contains(r.body, `"code":"invalid_request"`) {
			t.Errorf("Content-Type %q: %d %s, want 415 invalid_request", ct, r.status, r.body)
		}
	}
	// Two Content-Type headers are not one JSON declaration either.
	if r := e.do(t, http.MethodPost, "/v1/executions", body, "Content-Type", "application/json", "Content-Type", "text/plain"); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("two Content-Types: %d, want 415", r.status)
	}
	if n := e.store.creates.Load(); n != 0 {
		t.Errorf("%d executions created by refused requests", n)
	}
	// Parameters are allowed.
	if r := e.do(t, http.MethodPost, "/v1/executions", body, "Content-Type", "application/json; charset=utf-8"); r.status != http.StatusAccepted {
		t.Errorf("application/json with charset: %d %s", r.status, r.body)
	}

	id := e.submit(t, body)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded"} {
		// An empty form post carries its Content-Type and no body.
		if r := e.do(t, http.MethodPost, "/v1/executions/"+id+"/cancel", "", "Content-Type", ct); r.status != http.StatusUnsupportedMediaType {
			t.Errorf("cancel with Content-Type %q: %d, want 415", ct, r.status)
		}
	}
	if r := e.do(t, http.MethodPost, "/v1/executions/"+id+"/cancel", "x", "Content-Type", ""); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("cancel with an undeclared body: %d, want 415", r.status)
	}
	if r := e.do(t, http.MethodPost, "/v1/executions/"+id+"/cancel", ""); r.status != http.StatusOK && r.status != http.StatusAccepted {
		t.Errorf("cancel without a body: %d %s", r.status, r.body)
	}
}

// TestEventPagesAreCapped: a polling page holds at most 1000 events and 4 MiB of
// encoded events, always at least one, and next_after walks every event exactly once.
func TestEventPagesAreCapped(t *testing.T) {
	walk := func(t *testing.T, e *env, id string) (pages []int, seen int) {
		t.Helper()
		after := uint64(0)
		for {
			r := e.do(t, http.MethodGet, fmt.Sprintf("/v1/executions/%s/events?after=%d", id, after), "", "Accept", "application/json")
			if r.status != http.StatusOK {
				t.Fatalf("poll: %d %s", r.status, r.body)
			}
			if len(r.body) > 4<<20+64 {
				t.Fatalf("page of %d bytes, over 4 MiB", len(r.body))
			}
			var page struct {
				Events    []protocol.Event `json:"events"`
				NextAfter uint64           `json:"next_after"`
				Terminal  bool             `json:"terminal"`
			}
			if err := json.Unmarshal([]byte(r.body), &page); err != nil {
				t.Fatal(err)
			}
			for i, ev := range page.Events {
				if ev.Sequence != after+uint64(i)+1 {
					t.Fatalf("page after %d: event %d has sequence %d", after, i, ev.Sequence)
				}
			}
			if len(page.Events) == 0 && !page.Terminal {
				t.Fatalf("empty page after %d of a finished execution", after)
			}
			pages = append(pages, len(page.Events))
			seen += len(page.Events)
			after = page.NextAfter
			if page.Terminal {
				return pages, seen
			}
		}
	}

	t.Run("many small events", func(t *testing.T) {
		e := newEnv(t)
		texts := make([]string, 2500)
		for i := range texts {
			texts[i] = "x"
		}
		e.setScript(reply(texts...))
		id := e.submit(t, `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`)
		e.waitTerminal(t, id)
		pages, seen := walk(t, e, id)
		if want := 2500 + 3; seen != want { // accepted, route.selected, the deltas, completed
			t.Errorf("%d events over all pages, want %d", seen, want)
		}
		for _, n := range pages {
			if n > 1000 {
				t.Errorf("page of %d events", n)
			}
		}
		if pages[0] != 1000 {
			t.Errorf("first page holds %d events, want a full 1000", pages[0])
		}
	})

	t.Run("large events", func(t *testing.T) {
		e := newEnv(t)
		big := strings.Repeat("y", protocol.MaxEventBytes-64)
		e.setScript(reply(big, big, big, big, big))
		id := e.submit(t, `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`)
		e.waitTerminal(t, id)
		pages, seen := walk(t, e, id)
		if want := 5 + 3; seen != want {
			t.Errorf("%d events over all pages, want %d", seen, want)
		}
		if len(pages) < 3 {
			t.Errorf("pages %v: five 2 MiB events cannot fit in fewer than three 4 MiB pages", pages)
		}
	})
}

// TestLargestEventReachesTheClient: the Go client's frame limit admits the largest
// event the runtime records, so following such an execution ends with the server's
// snapshot, not a frame error.
func TestLargestEventReachesTheClient(t *testing.T) {
	e := newEnv(t)
	// A result whose data is as large as an event may be, and a text delta large enough
	// (and escape-heavy enough) that the engine splits it.
	result := json.RawMessage(`"` + strings.Repeat("r", protocol.MaxEventBytes-64) + `"`)
	text := strings.Repeat("\u0001é", protocol.MaxEventBytes/3)
	e.setScript(func(_ context.Context, _ engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		if err := emit.Text(0, text); err != nil {
			return engine.Outcome{}, err
		}
		if err := emit.Result(protocol.OutputResultData{Result: result}); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{FinishReason: "stop"}, nil
	})
	id := e.submit(t, `{"ability":"chat","input":[{"type":"text","text":"hi"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap, err := e.client.FollowResult(ctx, id)
	if err != nil {
		t.Fatalf("FollowResult: %v", err)
	}
	if snap.Status != protocol.StatusCompleted || !bytes.Equal(snap.Result, result) || snap.Output[0].Text != text {
		t.Fatalf("client snapshot: status %s, result %d bytes, text %d bytes", snap.Status, len(snap.Result), len(snap.Output[0].Text))
	}
	server, err := e.client.Result(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(snap)
	b, _ := json.Marshal(server)
	if !bytes.Equal(a, b) {
		t.Error("the client's snapshot differs from the server's /result")
	}
}
