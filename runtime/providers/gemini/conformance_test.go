package gemini_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/gemini"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// The conformance suite (runtime/providers/providertest) runs once per provider: the
// wire bytes are the same GenerateContentResponse stream, only the credential differs.

func TestConformanceGemini(t *testing.T) {
	w := providertest.Wire{
		Subject:  subject(func(endpoint string) *routing.Deployment { return geminiDeployment(endpoint) }),
		Provider: gemini.ProviderGemini,
		Respond:  responder(canaryKey),
		Authenticated: func(r *http.Request) error {
			if r.Header.Get("x-goog-api-key") != canaryKey {
				return errors.New("x-goog-api-key is not the API key")
			}
			if r.URL.Query().Has("key") {
				return errors.New("the URL has a key parameter")
			}
			return nil
		},
		Secrets:          []string{canaryKey},
		CredentialHeader: "x-goog-api-key",
		EchoFields:       echoFields,
		EchoAnswer:       echoAnswer,
		Usage:            conformanceUsage,
		Errors:           errorCases(),
	}
	providertest.RunConformance(t, w)
}

func TestConformanceVertex(t *testing.T) {
	ts := newTokenServer(t)
	sa, token := ts.account(0, "sbkey0conformance")
	w := providertest.Wire{
		Subject:  subject(func(endpoint string) *routing.Deployment { return vertexDeployment(endpoint, sa) }),
		Provider: gemini.ProviderVertex,
		Respond:  responder(sa.pem, sa.keyID, token),
		Authenticated: func(r *http.Request) error {
			if r.Header.Get("Authorization") != "Bearer "+token {
				return errors.New("Authorization is not the minted access token")
			}
			return nil
		},
		// The private key signs the token request, which goes to the token server only;
		// the upstream sees the access token, in Authorization.
		Secrets:          []string{sa.pem, sa.keyID, token},
		CredentialHeader: "Authorization",
		EchoFields:       echoFields,
		EchoAnswer:       echoAnswer,
		Usage:            conformanceUsage,
		Errors: append(errorCases(), providertest.ErrorCase{
			Name: "401 UNAUTHENTICATED", Status: http.StatusUnauthorized,
			Body: `{"error":{"code":401,"message":"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.","status":"UNAUTHENTICATED"}}`,
			Code: protocol.CodeProviderRejected,
		}),
	}
	providertest.RunConformance(t, w)
	n := ts.count()
	t.Logf("%d token requests for the whole run", n)
	if n < 1 || n > 4 {
		// One token for the whole run, and one more after each 401 (documented errors,
		// Echo), which drops the cached token.
		t.Errorf("the token endpoint was asked %d times, want one token reused across attempts", n)
	}
}

// subject is the providertest.Subject of a deployment builder: streaming and tools, as
// the suite expects.
func subject(deployment func(endpoint string) *routing.Deployment) providertest.Subject {
	return providertest.Subject{
		New: func(d *routing.Deployment, c *http.Client) (engine.Adapter, error) {
			return gemini.New(d, gemini.WithHTTPClient(c))
		},
		CanEncode: gemini.CanEncode,
		Deployment: func(endpoint string) *routing.Deployment {
			d := deployment(endpoint)
			d.Capabilities |= routing.CapsOf(protocol.CapStreaming, protocol.CapTools)
			return d
		},
	}
}

// conformanceUsage is what the Usage scenario's usageMetadata amounts to: prompt 12
// (4 of them cached), candidates 3 plus thoughts 5.
var conformanceUsage = map[string]float64{
	protocol.UnitInputTokens:     12,
	protocol.UnitOutputTokens:    8,
	protocol.UnitCacheReadTokens: 4,
	protocol.UnitReasoningTokens: 5,
}

// responder answers each scenario as streamGenerateContent?alt=sse does: one
// GenerateContentResponse per data frame, CRLF line ends, no terminal marker — the last
// chunk carries the finish reason. Echo repeats secrets.
func responder(secrets ...string) func(providertest.Scenario, http.ResponseWriter, *http.Request) {
	return func(s providertest.Scenario, w http.ResponseWriter, r *http.Request) { respond(s, w, r, secrets) }
}

func respond(s providertest.Scenario, w http.ResponseWriter, r *http.Request, secrets []string) {
	flusher, _ := w.(http.Flusher)
	frame := func(data string) {
		_, _ = io.WriteString(w, "data: "+data+"\r\n\r\n")
		if flusher != nil {
			flusher.Flush()
		}
	}
	chunk := func(text, finish, usage string) string {
		c := `{"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"}`
		if finish != "" {
			c += `,"finishReason":"` + finish + `"`
		}
		c += `,"index":0}]`
		if usage != "" {
			c += `,"usageMetadata":` + usage
		}
		return c + `,"modelVersion":"gemini-2.5-flash","responseId":"sbConformance0001"}`
	}
	if s == providertest.Echo {
		bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		id := bearer + r.Header.Get("x-goog-api-key") // one of the two is set
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.Header().Set("x-request-id", id)
		w.Header().Set("x-goog-request-id", id)
		w.WriteHeader(http.StatusUnauthorized)
		// Every secret stands where free text is (message) and where identifiers are
		// read (status, ErrorInfo reasons).
		echo := append([]string{r.Header.Get("Authorization"), id}, secrets...)
		msg, _ := json.Marshal("API key not valid: " + strings.Join(echo, " "))
		var details []string
		for _, v := range echo {
			reason, _ := json.Marshal(v)
			details = append(details, `{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":`+string(reason)+`,"domain":"googleapis.com"}`)
		}
		_, _ = io.WriteString(w, `{"error":{"code":401,"message":`+string(msg)+`,"status":"`+id+`","details":[`+strings.Join(details, ",")+`]}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	switch s {
	case providertest.Text:
		frame(chunk("Hello", "", `{"promptTokenCount":3,"totalTokenCount":3}`))
		frame(chunk(", world", "STOP", `{"promptTokenCount":3,"candidatesTokenCount":3,"totalTokenCount":6}`))
	case providertest.ToolCall:
		frame(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"` + providertest.ScriptTool + `","args":` + providertest.ScriptArguments + `}}],"role":"model"},` +
			`"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":5,"totalTokenCount":25},"modelVersion":"gemini-2.5-flash"}`)
	case providertest.Usage:
		frame(chunk("ok", "", `{"promptTokenCount":12,"cachedContentTokenCount":4,"totalTokenCount":12}`))
		frame(`{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP","index":0}],` +
			`"usageMetadata":{"promptTokenCount":12,"cachedContentTokenCount":4,"candidatesTokenCount":3,"thoughtsTokenCount":5,"totalTokenCount":20},"modelVersion":"gemini-2.5-flash"}`)
	case providertest.InStreamError:
		frame(chunk(providertest.ScriptPartial, "", ""))
		frame(`{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}`)
	case providertest.CutBeforeOutput:
		// The headers went out; the connection closes before any chunk.
	case providertest.CutAfterOutput:
		frame(chunk(providertest.ScriptPartial, "", ""))
	case providertest.Stall:
		<-r.Context().Done()
	case providertest.HugeLine:
		providertest.WriteHuge(w, "data: ")
	case providertest.InvalidUTF8:
		// Written by hand: a JSON encoder would replace the invalid bytes.
		frame(chunk(providertest.InvalidUTF8Text, "STOP", ""))
	}
}

// errorCases are the documented error bodies (testdata/errors) with their mapping.
func errorCases() []providertest.ErrorCase {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "errors", name))
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	jsonType := http.Header{"Content-Type": {"application/json; charset=UTF-8"}}
	return []providertest.ErrorCase{
		{Name: "400 INVALID_ARGUMENT", Status: 400, Header: jsonType, Body: read("400_invalid_argument.json"), Code: protocol.CodeInvalidRequest},
		{Name: "400 API_KEY_INVALID", Status: 400, Header: jsonType, Body: read("400_api_key_invalid.json"), Code: protocol.CodeProviderRejected},
		{Name: "400 FAILED_PRECONDITION", Status: 400, Header: jsonType, Body: read("400_failed_precondition.json"), Code: protocol.CodeProviderRejected},
		{Name: "403 PERMISSION_DENIED", Status: 403, Header: jsonType, Body: read("403_permission_denied.json"), Code: protocol.CodeProviderRejected},
		{Name: "404 NOT_FOUND", Status: 404, Header: jsonType, Body: read("404_not_found.json"), Code: protocol.CodeProviderRejected},
		{Name: "429 RESOURCE_EXHAUSTED with RetryInfo", Status: 429, Header: jsonType, Body: read("429_resource_exhausted.json"),
			Code: protocol.CodeRateLimited, Retryable: true, RetryAfterMs: 37000},
		{Name: "429 RESOURCE_EXHAUSTED with retry-after", Status: 429,
			Header: http.Header{"Content-Type": {"application/json"}, "Retry-After": {"2"}},
			Body:   `{"error":{"code":429,"message":"Resource exhausted. Please try again later.","status":"RESOURCE_EXHAUSTED"}}`,
			Code:   protocol.CodeRateLimited, Retryable: true, RetryAfterMs: 2000},
		{Name: "500 INTERNAL", Status: 500, Header: jsonType, Body: read("500_internal.json"), Code: protocol.CodeProviderUnavailable, Retryable: true},
		{Name: "503 UNAVAILABLE", Status: 503, Header: jsonType, Body: read("503_unavailable.json"), Code: protocol.CodeProviderUnavailable, Retryable: true},
		{Name: "504 DEADLINE_EXCEEDED", Status: 504, Header: jsonType, Body: read("504_deadline_exceeded.json"), Code: protocol.CodeProviderUnavailable, Retryable: true},
		{Name: "502 from a proxy, not JSON", Status: 502, Header: http.Header{"Content-Type": {"text/html"}},
			Body: "<html><body>Bad Gateway</body></html>", Code: protocol.CodeProviderUnavailable, Retryable: true},
	}
}

// echoFields are the identifiers of a GenerateContentResponse: responseId, modelVersion,
// the functionCall's id and name, finishReason, promptFeedback.blockReason.
var echoFields = []string{"responseId", "modelVersion", "functionCall.id", "functionCall.name", "finishReason", "blockReason"}

// echoAnswer answers with one functionCall of the script's tool — as server-sent events
// for streamGenerateContent, one JSON document for generateContent — with echo in field
// (see providertest.Wire.EchoAnswer).
func echoAnswer(field, echo string, w http.ResponseWriter, r *http.Request) {
	v := map[string]string{"responseId": "sbEcho0001", "modelVersion": "gemini-2.5-flash", "functionCall.id": "fc_echo01",
		"functionCall.name": providertest.ScriptTool, "finishReason": "STOP", "blockReason": ""}
	if field != "" {
		v[field] = echo
	}
	q := func(name string) string { return strconv.Quote(v[name]) }
	feedback := ""
	if v["blockReason"] != "" {
		feedback = `"promptFeedback":{"blockReason":` + q("blockReason") + `},`
	}
	doc := `{"candidates":[{"content":{"parts":[{"functionCall":{"id":` + q("functionCall.id") + `,"name":` + q("functionCall.name") +
		`,"args":` + providertest.ScriptArguments + `}}],"role":"model"},"finishReason":` + q("finishReason") + `,"index":0}],` + feedback +
		`"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":5,"totalTokenCount":25},"modelVersion":` + q("modelVersion") +
		`,"responseId":` + q("responseId") + `}`
	if !strings.HasSuffix(r.URL.Path, ":streamGenerateContent") {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		_, _ = io.WriteString(w, doc)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: "+doc+"\r\n\r\n")
}
