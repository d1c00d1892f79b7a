package replicate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestConformance runs the shared adapter suite against a fake of Replicate's
// predictions API (https://replicate.com/docs/reference/http): create, then poll
// urls.get until the prediction is terminal. A language model's output is an array of
// strings, which the adapter reports whole as one output.result.
func TestConformance(t *testing.T) { providertest.RunConformance(t, wire) }

var wire = providertest.Wire{
	Subject: providertest.Subject{
		New: func(d *routing.Deployment, c *http.Client) (engine.Adapter, error) {
			return New(d, WithHTTPClient(c), WithPollBackoff(5*time.Millisecond, 20*time.Millisecond))
		},
		CanEncode: CanEncode,
		Deployment: func(endpoint string) *routing.Deployment {
			return deployment(endpoint, withModel("meta/meta-llama-3-8b-instruct"),
				withCaps(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText))
		},
	},
	Provider: Provider,
	Authenticated: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer "+canary {
			return errors.New("no bearer token")
		}
		return nil
	},
	Secrets:          []string{canary},
	CredentialHeader: "Authorization",
	Respond:          respondReplicate,
	EchoFields:       echoFields,
	EchoAnswer:       echoAnswer,
	Usage:            map[string]float64{UnitPredictTime: 1.5},
	Errors: []providertest.ErrorCase{
		{Name: "401 unauthenticated", Status: 401, Body: `{"title":"Unauthenticated","detail":"You did not pass a valid authentication token","status":401}`, Code: protocol.CodeProviderRejected},
		{Name: "402 insufficient credit", Status: 402, Body: `{"title":"Insufficient credit","detail":"You have insufficient credit to run this model.","status":402}`, Code: protocol.CodeQuotaExhausted},
		{Name: "404 model not found", Status: 404, Body: `{"title":"Not found","detail":"The requested resource could not be found.","status":404}`, Code: protocol.CodeProviderRejected},
		{Name: "422 invalid input", Status: 422, Body: `{"title":"Input validation failed","detail":"- input.prompt: Invalid type.","status":422}`, Code: protocol.CodeInvalidRequest},
		{Name: "429 throttled", Status: 429, Header: http.Header{"Retry-After": {"3"}}, Body: `{"title":"Request was throttled.","detail":"Request was throttled. Expected available in 3 seconds.","status":429}`,
			Code: protocol.CodeRateLimited, Retryable: true, RetryAfterMs: 3000},
		{Name: "500", Status: 500, Body: `{"title":"Internal server error","status":500}`, Code: protocol.CodeProviderUnavailable, Retryable: true},
		{Name: "503", Status: 503, Body: `{"title":"Service unavailable","status":503}`, Code: protocol.CodeProviderUnavailable, Retryable: true},
	},
	NotApplicable: map[providertest.Scenario]string{
		providertest.ToolCall:       "Replicate predictions have no tool calling (the CRD refuses tools for provider replicate)",
		providertest.InStreamError:  "a prediction reports output only once it has succeeded, so no output precedes a failure; failed, canceled and aborted statuses are mapped in replicate_test.go",
		providertest.CutAfterOutput: "the output arrives whole in one prediction document; there is no stream to cut after it",
		providertest.HugeLine:       "a prediction is one JSON document bounded at 16 MiB, since outputs may be inline data URIs of generated media",
	},
}

// predictionJSON is a prediction object in status with output (JSON, "" for none).
func predictionJSON(server, status, output string) string {
	s := `{"id":"ufawqhfynnddngldkgtslldrkq","model":"meta/meta-llama-3-8b-instruct","version":"dp-4d9b8a","input":{"prompt":"Say hello"},` +
		`"logs":"","error":null,"status":"` + status + `","created_at":"2024-05-01T12:00:00.000Z",` +
		`"urls":{"get":"` + server + `/v1/predictions/ufawqhfynnddngldkgtslldrkq","cancel":"` + server + `/v1/predictions/ufawqhfynnddngldkgtslldrkq/cancel"}`
	if output != "" {
		s += `,"output":` + output + `,"completed_at":"2024-05-01T12:00:02.000Z","metrics":{"predict_time":1.5}`
	}
	return s + "}"
}

func respondReplicate(s providertest.Scenario, w http.ResponseWriter, r *http.Request) {
	server := "http://" + r.Host
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel") {
		_, _ = fmt.Fprint(w, predictionJSON(server, "canceled", ""))
		return
	}
	if r.Method == http.MethodPost {
		switch s {
		case providertest.Stall:
			w.WriteHeader(http.StatusCreated)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case providertest.CutBeforeOutput:
			// A body shorter than its Content-Length: the connection ends mid-document.
			w.Header().Set("Content-Length", "4096")
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprint(w, `{"id":"ufawqhfynnddngldkgtslldrkq","status":"star`)
		case providertest.Echo:
			w.Header().Set("X-Request-Id", canary)
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, `{"title":"Unauthenticated","detail":"invalid token %s (%s)","status":401}`, canary, r.Header.Get("Authorization"))
		default:
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprint(w, predictionJSON(server, "starting", ""))
		}
		return
	}
	output := map[providertest.Scenario]string{
		providertest.Text:        `["Hello", ", world"]`,
		providertest.Usage:       `["ok"]`,
		providertest.InvalidUTF8: `["` + providertest.InvalidUTF8Text + `"]`,
	}[s]
	_, _ = fmt.Fprint(w, predictionJSON(server, "succeeded", output))
}

// echoFields are what a prediction object holds that the adapter may surface: its id,
// model and version, its logs (progress) and its output. Its urls are followed on the
// endpoint's origin whatever they hold, but never recorded when they hold the
// credential (TestRemoteJobRecorded).
var echoFields = []string{"id", "model", "version", "logs", "output"}

// echoAnswer creates a prediction and answers its polls with it succeeded, with echo in
// field (see providertest.Wire.EchoAnswer).
func echoAnswer(field, echo string, w http.ResponseWriter, r *http.Request) {
	v := map[string]string{"id": "ufawqhfynnddngldkgtslldrkq", "model": "meta/meta-llama-3-8b-instruct", "version": "dp-4d9b8a",
		"logs": "loading weights", "output": "Hello"}
	if field != "" {
		v[field] = echo
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	status, output := "starting", ""
	if r.Method == http.MethodGet {
		status, output = "succeeded", `,"output":[`+q(v["output"])+`],"completed_at":"2024-05-01T12:00:02.000Z","metrics":{"predict_time":1.5}`
	}
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel") {
		status = "canceled"
	}
	get := "http://" + r.Host + "/v1/predictions/ufawqhfynnddngldkgtslldrkq"
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodPost {
		w.WriteHeader(http.StatusCreated)
	}
	_, _ = fmt.Fprint(w, `{"id":`+q(v["id"])+`,"model":`+q(v["model"])+`,"version":`+q(v["version"])+`,"input":{"prompt":"Say hello"},`+
		`"logs":`+q(v["logs"])+`,"error":null,"status":"`+status+`","created_at":"2024-05-01T12:00:00.000Z",`+
		`"urls":{"get":`+q(get)+`,"cancel":`+q(get+"/cancel")+`}`+output+`}`)
}
