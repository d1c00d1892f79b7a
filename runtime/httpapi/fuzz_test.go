package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// marker is what the seeds put wherever a caller's text could be echoed: the ability,
// metadata keys and values, extension keys and values, unknown field names (JSON paths),
// the Idempotency-Key and the Content-Type. Nothing the runtime writes contains it, so
// any response holding it leaks caller content.
const marker = "ZQXCANARY"

// FuzzSubmit drives POST /v1/executions end to end — Content-Type check, body limit,
// strict decoder, idempotency, routing (with adapter admission) and creation — with a
// recording adapter behind it, and asserts for every input:
//
//   - no 5xx: every bad input gets a specific 4xx;
//   - every error is a JSON error body with a known code matching the status;
//   - a request that is not accepted reaches no adapter (the adapter's call count does
//     not move), and an accepted one reaches it at most once, whatever key replays it;
//   - no response, headers included, holds the caller's marker.
//
// The checked-in corpus (testdata/fuzz/FuzzSubmit) and the seeds below run in every
// `go test`; `make test` also fuzzes it for a bounded time.
func FuzzSubmit(f *testing.F) {
	seeds := []struct{ body, contentType, key string }{
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}]}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}]}`, "application/json", "key-1"},
		{`{"ability":"chat","input":[{"type":"text","text":"other"}]}`, "application/json", "key-1"},
		{`{"ability":"` + strings.ToLower(marker) + `","input":[{"type":"text","text":"hi"}]}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}],"metadata":{"` + strings.ToLower(marker) + `":"` + marker + `"}}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}],"extensions":{"` + strings.ToLower(marker) + `.x":1}}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}],"extensions":{"openai.reasoning_effort":"` + marker + `"}}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}],"extensions":{"replicate.input":{"` + marker + `":"` + marker + `"}}}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi","` + marker + `":1}]}`, "application/json", ""},
		{`{"ability":"chat","` + marker + `":{"a":[1]},"input":[{"type":"text","text":"hi"}]}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"image","media_type":"image/png","uri":"https://` + marker + `/x.png"}]}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"tool","name":"` + marker + `","parameters":{"type":"object"}}]}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}],"routing":{"prefer":["ai/` + strings.ToLower(marker) + `"]}}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}],"requirements":["` + marker + `"]}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}]}`, "text/plain; " + marker, ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}]}`, "application/json", marker},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}]}`, "application/json", `"` + marker + `"`},
		{`{"ability":"chat","input":[]}`, "application/json", ""},
		{`{"ability":"chat","input":[{"type":"text","text":"hi"}],"deadline_ms":0}`, "application/json", ""},
		{`{"ability":"chat","ability":"chat","input":[{"type":"text","text":"hi"}]}`, "application/json", ""},
		{`[` + marker + `]`, "application/json", ""},
		{``, "application/json", ""},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.contentType, s.key)
	}

	image := textModel("vision")
	image.Capabilities |= routing.CapsOf(protocol.CapInputImage, protocol.CapTools)
	e := newEnv(f, withDeployments(textModel("small"), image),
		withAPI(func(c *httpapi.Config) { c.MaxRequestBytes = 64 << 10 }))
	var accepted int64 // executions created so far, each of which ran its adapter once

	f.Fuzz(func(t *testing.T, body []byte, contentType, key string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/executions", strings.NewReader(string(body)))
		if contentType != "" {
			req.Header["Content-Type"] = []string{contentType}
		}
		if key != "" {
			req.Header["Idempotency-Key"] = []string{key}
		}
		rec := httptest.NewRecorder()
		e.handler.ServeHTTP(rec, req)

		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		for name, vals := range rec.Header() {
			for _, v := range vals {
				if strings.Contains(strings.ToLower(name+v), strings.ToLower(marker)) {
					t.Fatalf("header %s: %s holds the caller's marker", name, v)
				}
			}
		}
		if strings.Contains(strings.ToLower(rec.Body.String()), strings.ToLower(marker)) {
			t.Fatalf("response %d holds the caller's marker: %s", rec.Code, rec.Body)
		}

		if rec.Code != http.StatusAccepted {
			var pe protocol.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &pe); err != nil || pe.Error == nil || !pe.Error.Code.Known() {
				t.Fatalf("status %d without a portable JSON error: %s", rec.Code, rec.Body)
			}
			if st := pe.Error.Code.HTTPStatus(); st != rec.Code && rec.Code != http.StatusUnsupportedMediaType {
				t.Fatalf("status %d for code %s (its status is %d)", rec.Code, pe.Error.Code, st)
			}
			if n := e.calls.Load(); n != accepted {
				t.Fatalf("a refused request reached the adapter: %d calls for %d executions", n, accepted)
			}
			return
		}
		var acc struct{ ID string }
		if err := json.Unmarshal(rec.Body.Bytes(), &acc); err != nil || acc.ID == "" {
			t.Fatalf("202 without an id: %s", rec.Body)
		}
		if rec.Header().Get("Idempotent-Replayed") == "" {
			accepted++
		}
		waitEnded(t, e, acc.ID)
		if n := e.calls.Load(); n != accepted {
			t.Fatalf("%d adapter calls for %d executions", n, accepted)
		}
	})
}

// waitEnded waits for the terminal event of id, straight from the store.
func waitEnded(t *testing.T, e *env, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		st, err := e.store.Get(ctx, id)
		if err != nil {
			t.Fatalf("Get %s: %v", id, err)
		}
		if st.Terminal {
			return
		}
		if err := e.store.Wait(ctx, id, st.LastSequence); err != nil && !errors.Is(err, eventstore.ErrTerminated) {
			t.Fatalf("Wait %s: %v", id, err)
		}
	}
}
