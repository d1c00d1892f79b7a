package main

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// TestStats: GET /stats counts, without a key, the chat requests whatever their answer,
// the predictions created and those a cancel actually canceled, and the prediction
// requests.
func TestStats(t *testing.T) {
	const key = "k"
	clock := newFakeClock()
	ts := startServer(t, config{APIKey: key, JobDuration: time.Second, Now: clock.Now})
	bearer := []string{"Authorization", "Bearer " + key}
	stats := func() string {
		t.Helper()
		resp := ts.do(t, "GET", "/stats", nil)
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("stats: status %d, type %q, body %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		return string(b)
	}
	if got, want := stats(), `{"replicate_predictions_created":0,"replicate_predictions_canceled":0,"replicate_polls":0,"replicate_cancel_requests":0,"openai_requests":0,"anthropic_requests":0,"gemini_requests":0,"vertex_requests":0,"bedrock_requests":0}`; got != want {
		t.Fatalf("fresh stats = %s, want %s", got, want)
	}

	// Chat requests count whatever the answer: a stream, a refusal, a scripted error.
	drain := func(resp *http.Response) { _, _ = io.ReadAll(resp.Body) }
	drain(ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("demo", true, nil), bearer...))
	drain(ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("demo", false, nil)))
	drain(ts.do(t, "POST", "/openai/v1/chat/completions", openAIBody("demo-error-503", false, nil), bearer...))
	drain(ts.do(t, "POST", "/anthropic/v1/messages", anthropicBody("claude-demo", false, nil), append([]string{"x-api-key", key}, anthropicVersion...)...))
	drain(ts.do(t, "POST", geminiPath("gemini-demo", "streamGenerateContent")+"?alt=sse", geminiBody(nil), "x-goog-api-key", key))
	drain(ts.do(t, "POST", geminiPath("gemini-demo", "generateContent"), geminiBody(nil)))
	drain(ts.do(t, "POST", vertexPath("gemini-demo", "generateContent"), geminiBody(nil), bearer...))
	drain(ts.do(t, "POST", "/model/demo/converse-stream", bedrockBody(nil), bearer...))
	drain(ts.do(t, "POST", "/model/demo-error-429/converse", bedrockBody(nil), bearer...))
	drain(ts.do(t, "POST", "/model/demo/converse", bedrockBody(nil)))

	// Two predictions created (a scripted error creates none); one canceled while
	// running, then canceled again (no change), and a cancel of an unknown id.
	var p, q predictionJSON
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/models/acme/demo/predictions", replicateInput, bearer...), http.StatusCreated, &p)
	decodeJSON(t, ts.do(t, "POST", "/replicate/v1/models/acme/demo/predictions", replicateInput, bearer...), http.StatusCreated, &q)
	drain(ts.do(t, "POST", "/replicate/v1/models/acme/demo-error-429/predictions", replicateInput, bearer...))
	drain(ts.do(t, "GET", "/replicate/v1/predictions/"+p.ID, nil)) // no key: 401, still a poll
	drain(ts.do(t, "GET", "/replicate/v1/predictions/"+p.ID, nil, bearer...))
	drain(ts.do(t, "POST", "/replicate/v1/predictions/"+p.ID+"/cancel", nil, bearer...))
	drain(ts.do(t, "POST", "/replicate/v1/predictions/"+p.ID+"/cancel", nil, bearer...))
	drain(ts.do(t, "POST", "/replicate/v1/predictions/nope/cancel", nil, bearer...))
	// q finishes; canceling it afterwards changes nothing.
	clock.Advance(time.Second)
	drain(ts.do(t, "POST", "/replicate/v1/predictions/"+q.ID+"/cancel", nil, bearer...))

	want := `{"replicate_predictions_created":2,"replicate_predictions_canceled":1,"replicate_polls":2,"replicate_cancel_requests":4,"openai_requests":3,"anthropic_requests":1,"gemini_requests":2,"vertex_requests":1,"bedrock_requests":3}`
	if got := stats(); got != want {
		t.Errorf("stats = %s\nwant    %s", got, want)
	}
}
