package main

import (
	"net/http"
	"sync/atomic"
)

// stats counts what the demo provider served, so that an end-to-end test can check what
// a runtime did upstream: that an adopted prediction was not created twice, that a
// handed-over one was not canceled. GET /stats answers the counters as one JSON object
// whose names are stable (README.md, "Stats").
type stats struct {
	// openAIRequests, anthropicRequests, geminiRequests, vertexRequests and
	// bedrockRequests count requests to the chat endpoints, as they arrive, whatever
	// the answer.
	openAIRequests, anthropicRequests               atomic.Int64
	geminiRequests, vertexRequests, bedrockRequests atomic.Int64
	// predictionsCreated counts Replicate predictions created (201).
	predictionsCreated atomic.Int64
	// predictionsCanceled counts unfinished predictions a cancel request canceled; a
	// cancel of a finished or unknown prediction changes nothing and is not counted.
	predictionsCanceled atomic.Int64
	// replicatePolls and replicateCancelRequests count GET and cancel requests of
	// predictions, as they arrive, whatever the answer.
	replicatePolls, replicateCancelRequests atomic.Int64
}

// statsView is the body of GET /stats.
type statsView struct {
	ReplicatePredictionsCreated  int64 `json:"replicate_predictions_created"`
	ReplicatePredictionsCanceled int64 `json:"replicate_predictions_canceled"`
	ReplicatePolls               int64 `json:"replicate_polls"`
	ReplicateCancelRequests      int64 `json:"replicate_cancel_requests"`
	OpenAIRequests               int64 `json:"openai_requests"`
	AnthropicRequests            int64 `json:"anthropic_requests"`
	GeminiRequests               int64 `json:"gemini_requests"`
	VertexRequests               int64 `json:"vertex_requests"`
	BedrockRequests              int64 `json:"bedrock_requests"`
}

// serveStats serves GET /stats. Like /healthz it needs no key: the counters say nothing
// about any request's content.
func (s *server) serveStats(w http.ResponseWriter, _ *http.Request) {
	st := &s.stats
	writeJSON(w, http.StatusOK, "application/json", statsView{
		ReplicatePredictionsCreated:  st.predictionsCreated.Load(),
		ReplicatePredictionsCanceled: st.predictionsCanceled.Load(),
		ReplicatePolls:               st.replicatePolls.Load(),
		ReplicateCancelRequests:      st.replicateCancelRequests.Load(),
		OpenAIRequests:               st.openAIRequests.Load(),
		AnthropicRequests:            st.anthropicRequests.Load(),
		GeminiRequests:               st.geminiRequests.Load(),
		VertexRequests:               st.vertexRequests.Load(),
		BedrockRequests:              st.bedrockRequests.Load(),
	})
}
