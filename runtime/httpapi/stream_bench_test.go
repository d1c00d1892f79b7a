package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// zeroDelayUpstream is an OpenAI Chat Completions server that streams ten deltas and
// usage at once.
func zeroDelayUpstream(tb testing.TB) *httptest.Server {
	var stream bytes.Buffer
	for i := range 10 {
		fmt.Fprintf(&stream, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}]}\n\n", i)
	}
	stream.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	stream.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":10,\"total_tokens\":15}}\n\ndata: [DONE]\n\n")
	body := stream.Bytes()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	tb.Cleanup(srv.Close)
	return srv
}

// BenchmarkStreamedExecution runs whole executions over real loopback HTTP, in process:
// POST /v1/executions, then the event stream until the terminal event, with the OpenAI
// adapter streaming ten deltas from a zero-delay upstream. Its CPU and allocation
// profiles show what the runtime spends per streamed execution.
func BenchmarkStreamedExecution(b *testing.B) {
	upstream := zeroDelayUpstream(b)
	store := memory.New()
	b.Cleanup(func() { _ = store.Close() })
	holder := &routing.Holder{}
	holder.Store(routing.NewTable([]routing.Deployment{{
		Ref: routing.Ref{Namespace: "team", Name: "gpt"}, Provider: openai.ProviderOpenAI, Model: "m",
		Endpoint: upstream.URL, Credential: routing.NewCredential("sk-bench"), Abilities: []string{"chat"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapOutputText, protocol.CapStreaming), Weight: 100,
	}}))
	providers := map[string]engine.Provider{}
	// The upstream listens on loopback, which only a fence allowing it reaches.
	openai.Register(providers, openai.WithHTTPClient(providerhttp.NewClient(providerhttp.Fence{AllowLoopback: true})))
	eng := engine.New(engine.Config{Store: store, Table: holder, Providers: providers, MaxConcurrent: 1 << 16})
	b.Cleanup(func() { _ = eng.Close() })
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Engine: eng, Store: store}))
	b.Cleanup(srv.Close)
	c, err := client.New(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	req := &protocol.Request{Ability: "chat", Input: []protocol.Part{{Type: protocol.PartText, Text: "hello"}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		acc, err := c.Submit(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		var text strings.Builder
		var last protocol.Event
		if err := c.Follow(ctx, acc.ID, 0, func(ev protocol.Event) error {
			if ev.Type == protocol.EventOutputDelta {
				var d protocol.OutputDeltaData
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					return err
				}
				text.WriteString(d.Text)
			}
			last = ev
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if last.Type != protocol.EventCompleted || !strings.HasPrefix(text.String(), "w0 w1") {
			b.Fatalf("ended with %s, text %q", last.Type, text.String())
		}
	}
}
