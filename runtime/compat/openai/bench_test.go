package openai_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkChatVersusNative measures one call through the door against the native path it
// replaces — POST /v1/executions, then its event stream read to the end — in alternating
// rounds of the same run, over loopback HTTP with an adapter that answers at once. It
// reports each path's time per call and the door's as a ratio of the native path's:
// a door call is one exchange where the native path is two.
func BenchmarkChatVersusNative(b *testing.B) {
	e := newEnv(b)
	e.setScript(reply("Hel", "lo"))
	hc := e.srv.Client()
	native := func() {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v1/executions",
			strings.NewReader(`{"ability":"chat","input":[{"type":"text","text":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var acc struct{ ID string }
		if err := json.NewDecoder(resp.Body).Decode(&acc); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		resp, err = hc.Get(e.srv.URL + "/v1/executions/" + acc.ID + "/events")
		if err != nil {
			b.Fatal(err)
		}
		drain(b, resp)
	}
	door := func(stream bool) func() {
		body := `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		return func() { drain(b, e.post(b, context.Background(), body)) }
	}
	paths := []struct {
		name string
		call func()
		took time.Duration
	}{{"native", native, 0}, {"door-stream", door(true), 0}, {"door-whole", door(false), 0}}
	for i := range paths { // warm up connections and pools
		paths[i].call()
	}
	b.ResetTimer()
	for b.Loop() {
		for i := range paths {
			start := time.Now()
			paths[i].call()
			paths[i].took += time.Since(start)
		}
	}
	n := float64(b.N)
	for _, p := range paths {
		b.ReportMetric(float64(p.took.Microseconds())/n, p.name+"-µs/call")
	}
	b.ReportMetric(float64(paths[1].took)/float64(paths[0].took), "stream/native")
	b.ReportMetric(float64(paths[2].took)/float64(paths[0].took), "whole/native")
}

// drain reads a response to its end and closes it, failing on a status other than 200.
func drain(tb testing.TB, resp *http.Response) {
	tb.Helper()
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("status %d", resp.StatusCode)
	}
}
