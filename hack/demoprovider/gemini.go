package main

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Gemini generateContent, as the Gemini API and Vertex AI serve it
// (https://ai.google.dev/api/generate-content):
//
//	Gemini API (x-goog-api-key):
//	POST /v1beta/models/{model}:generateContent
//	POST /v1beta/models/{model}:streamGenerateContent?alt=sse
//	Vertex AI (Bearer access token):
//	POST /v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent
//	POST /v1/projects/{project}/locations/{location}/publishers/google/models/{model}:streamGenerateContent?alt=sse
//
// Both answer the same GenerateContentResponse; they differ in how they reject a
// credential. {model}:method is one path segment, so the mux hands over both and the
// handler splits them. Only the request fields the script needs are read.

// geminiRequest is the part of a GenerateContentRequest the demo reads.
type geminiRequest struct {
	Contents          []geminiInContent `json:"contents"`
	SystemInstruction *geminiInContent  `json:"systemInstruction"`
	Tools             []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
}

// geminiInContent is one turn of the conversation; role is "user", "model" or absent
// (a single-turn request may omit it).
type geminiInContent struct {
	Role  string         `json:"role"`
	Parts []geminiInPart `json:"parts"`
}

// geminiInPart is the part of a request Part the demo reads.
type geminiInPart struct {
	Text             string `json:"text"`
	FunctionResponse *struct {
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
}

// text concatenates the text parts of c.
func (c geminiInContent) text() string {
	var s string
	for _, p := range c.Parts {
		s += p.Text
	}
	return s
}

// geminiFunctionOutput is the text of a functionResponse's response object. Google
// documents "output" (or "error") as the function's result and the whole object as the
// result when neither is present (https://ai.google.dev/api/caching#FunctionResponse);
// a string member is echoed as is, anything else as compact JSON.
func geminiFunctionOutput(response json.RawMessage) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(response, &fields) != nil {
		return string(response)
	}
	for _, key := range []string{"output", "error"} {
		v, ok := fields[key]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
		return string(v)
	}
	return string(response)
}

// geminiResponse is a GenerateContentResponse: one streamed chunk or the whole answer.
type geminiResponse struct {
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata geminiUsage       `json:"usageMetadata"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

// geminiCandidate is the one candidate the demo answers.
type geminiCandidate struct {
	Content      geminiContent `json:"content"`
	FinishReason string        `json:"finishReason,omitempty"`
	Index        int           `json:"index"`
}

// geminiContent is the model's turn.
type geminiContent struct {
	Parts []geminiPart `json:"parts"`
	Role  string       `json:"role"`
}

// geminiPart is a text or a whole function call; Gemini never streams a call in pieces.
type geminiPart struct {
	Text         *string             `json:"text,omitempty"`
	FunctionCall *geminiFunctionCall `json:"functionCall,omitempty"`
}

// geminiFunctionCall is a call of a declared function with its JSON arguments.
type geminiFunctionCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// geminiUsage is usageMetadata. Streamed chunks before the last carry only the prompt
// count, as Gemini's do, so a client must take the usage of the final chunk.
type geminiUsage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

// geminiAPI serves the Gemini API's models/{model}:method paths.
func (s *server) geminiAPI(w http.ResponseWriter, r *http.Request) {
	s.stats.geminiRequests.Add(1)
	if !s.authorized(r, "X-Goog-Api-Key") {
		geminiRejectKey(w, r.Header.Get("X-Goog-Api-Key") == "")
		return
	}
	s.generateContent(w, r, false)
}

// vertexAI serves Vertex AI's publishers/google/models/{model}:method paths. Vertex
// takes a short-lived OAuth access token, which the demo cannot check, so any non-empty
// Bearer token passes when --api-key is set.
func (s *server) vertexAI(w http.ResponseWriter, r *http.Request) {
	s.stats.vertexRequests.Add(1)
	if s.cfg.APIKey != "" && !hasBearerToken(r) {
		vertexRejectToken(w)
		return
	}
	s.generateContent(w, r, true)
}

// hasBearerToken reports whether r carries "Authorization: Bearer <something>".
func hasBearerToken(r *http.Request) bool {
	const scheme = "Bearer "
	v := r.Header.Get("Authorization")
	return len(v) > len(scheme) && strings.EqualFold(v[:len(scheme)], scheme) &&
		strings.TrimSpace(v[len(scheme):]) != ""
}

// geminiRejectKey answers the Gemini API's credential errors: a request without a key
// is an unregistered caller (403); a key that is not valid is, oddly, a 400 whose
// ErrorInfo reason API_KEY_INVALID is the only sign of an authentication failure.
func geminiRejectKey(w http.ResponseWriter, missing bool) {
	if missing {
		googleError(w, http.StatusForbidden, "Method doesn't allow unregistered callers "+
			"(callers without established identity). Please use API Key or other form of "+
			"API consumer identity to call this API.")
		return
	}
	googleError(w, http.StatusBadRequest, "API key not valid. Please pass a valid API key.", map[string]any{
		"@type":    "type.googleapis.com/google.rpc.ErrorInfo",
		"reason":   "API_KEY_INVALID",
		"domain":   "googleapis.com",
		"metadata": map[string]string{"service": "generativelanguage.googleapis.com"},
	})
}

// vertexRejectToken answers Vertex AI's error for a missing or rejected access token.
func vertexRejectToken(w http.ResponseWriter) {
	googleError(w, http.StatusUnauthorized, "Request had invalid authentication credentials. "+
		"Expected OAuth 2 access token, login cookie or other valid authentication credential.")
}

// generateContent answers generateContent and streamGenerateContent once the credential
// has passed; vertex selects how the scripted 401 is answered.
func (s *server) generateContent(w http.ResponseWriter, r *http.Request, vertex bool) {
	model, method, _ := strings.Cut(r.PathValue("modelMethod"), ":")
	stream := method == "streamGenerateContent"
	switch {
	case model == "" || (method != "generateContent" && !stream):
		googleError(w, http.StatusNotFound, "Method not found.")
		return
	case stream && r.URL.Query().Get("alt") != "sse":
		// Without alt=sse Google streams one JSON array instead; the demo fakes only the
		// SSE form, and says so rather than answering a format the client did not expect.
		googleError(w, http.StatusBadRequest, "demoprovider: streamGenerateContent is faked only with alt=sse")
		return
	}
	var req geminiRequest
	if err := decodeBody(w, r, &req); err != nil {
		googleError(w, http.StatusBadRequest, "Invalid JSON payload received.")
		return
	}
	if len(req.Contents) == 0 {
		googleError(w, http.StatusBadRequest, "* GenerateContentRequest.contents: contents is not specified")
		return
	}
	sn := scenarioFor(model)
	switch {
	case sn.status == http.StatusUnauthorized && vertex:
		vertexRejectToken(w)
		return
	case sn.status == http.StatusUnauthorized:
		geminiRejectKey(w, false)
		return
	case sn.status != 0:
		googleError(w, sn.status, "")
		return
	}

	a := s.geminiAnswer(req)
	id := s.nextID("demo-resp-")
	usage := geminiUsage{
		PromptTokenCount:     a.promptTokens,
		CandidatesTokenCount: a.completionTokens(),
		TotalTokenCount:      a.promptTokens + a.completionTokens(),
	}
	promptOnly := geminiUsage{PromptTokenCount: a.promptTokens, TotalTokenCount: a.promptTokens}
	response := func(part geminiPart, finish string, u geminiUsage) geminiResponse {
		return geminiResponse{
			Candidates: []geminiCandidate{{
				Content:      geminiContent{Parts: []geminiPart{part}, Role: "model"},
				FinishReason: finish,
			}},
			UsageMetadata: u, ModelVersion: model, ResponseID: id,
		}
	}
	var call geminiPart
	if a.tool != "" {
		call.FunctionCall = &geminiFunctionCall{Name: a.tool, Args: json.RawMessage(toolArguments)}
	}

	if !stream {
		part := call
		if a.tool == "" {
			part = geminiPart{Text: ptr(a.text())}
		}
		respondJSON(w, r, response(part, "STOP", usage), sn, s.pacing(sn), len(a.pieces))
		return
	}

	var sc script
	if a.tool != "" {
		// A function call arrives whole, in one chunk that also ends the answer.
		sc.pieces = []frame{{data: response(call, "STOP", usage)}}
	} else {
		for _, p := range a.pieces {
			sc.pieces = append(sc.pieces, frame{data: response(geminiPart{Text: ptr(p)}, "", promptOnly)})
		}
		sc.epilogue = []frame{{data: response(geminiPart{Text: ptr("")}, "STOP", usage)}}
	}
	play(w, r, sseCRLF, sc, sn, s.pacing(sn))
}

// geminiAnswer scripts the answer to req: a conversation whose last turn carries
// functionResponse parts has their output echoed; otherwise the last user text is
// echoed, or the first declared function is called.
func (s *server) geminiAnswer(req geminiRequest) answer {
	var prompt []string
	if req.SystemInstruction != nil {
		prompt = append(prompt, req.SystemInstruction.text())
	}
	var last string
	for _, c := range req.Contents {
		t := c.text()
		prompt = append(prompt, t)
		if c.Role == "user" || c.Role == "" {
			last = t
		}
	}
	var results []string
	for _, p := range req.Contents[len(req.Contents)-1].Parts {
		if p.FunctionResponse != nil {
			results = append(results, geminiFunctionOutput(p.FunctionResponse.Response))
		}
	}
	endsWithToolResult := len(results) > 0
	if endsWithToolResult {
		last = strings.Join(results, "")
	}
	var firstTool string
	for _, t := range req.Tools {
		if len(t.FunctionDeclarations) > 0 {
			firstTool = t.FunctionDeclarations[0].Name
			break
		}
	}
	return s.newAnswer(prompt, last, endsWithToolResult, firstTool)
}
