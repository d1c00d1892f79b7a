package providertest

import (
	"net/http"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Scenario is one situation of a provider call that every adapter must handle alike.
// The adapter's Wire answers it with the provider's documented wire bytes; the suite
// (RunConformance) checks what the adapter made of them. "Output text" is what a caller
// reads: the output.delta texts joined or, from an adapter that reports a whole result
// (Replicate), an output.result holding a JSON string or an array of strings. Every
// emitted event must be valid UTF-8 JSON.
type Scenario string

// The scenarios. Each says what the Wire sends and what the suite expects.
const (
	// Text: a successful answer whose text is ScriptText ("Hello, world"), in two or
	// more deltas where the provider streams, ending normally. Expected: output.delta
	// events whose texts join to ScriptText, no error.
	Text Scenario = "text"
	// ToolCall: a successful answer that is one call of tool ScriptTool ("get_weather")
	// with arguments ScriptArguments ({"city":"Paris"}), in two or more fragments where
	// the provider fragments arguments, ending with the provider's tool-use stop.
	// Expected: one tool.call.started naming the tool with a non-empty call id, and
	// argument deltas of that call id that join to JSON equal to ScriptArguments.
	ToolCall Scenario = "tool_call"
	// Usage: a successful answer "ok" that reports the Wire's Usage figures as the
	// provider documents them. Expected: usage.reported entries whose per-unit totals
	// equal Wire.Usage exactly, every one with source "provider".
	Usage Scenario = "usage"
	// InStreamError: the text "partial", then an error the provider documents inside a
	// successful response (an error event or frame) that means the provider failed.
	// Expected: "partial" recorded, then provider_unavailable, retryable false (output
	// was emitted).
	InStreamError Scenario = "in_stream_error"
	// CutBeforeOutput: a successful response that ends (connection closed) before any
	// output and before its terminal marker. Expected: provider_unavailable,
	// retryable true, nothing emitted.
	CutBeforeOutput Scenario = "cut_before_output"
	// CutAfterOutput: the text "partial", then the response ends without its terminal
	// marker. Expected: "partial" recorded, then provider_unavailable, retryable false.
	CutAfterOutput Scenario = "cut_after_output"
	// Stall: a successful response's status and headers, then nothing until the request
	// is cancelled. The suite runs it with a short attempt context. Expected: Execute
	// returns, with an error, within the cleanup grace of the context's end.
	Stall Scenario = "stall"
	// HugeLine: a successful streamed response whose next unit (SSE line, event-stream
	// frame, JSON document) is 10 MB with no end. Expected: Execute fails with
	// provider_unavailable without reading all of it into memory; nothing emitted.
	HugeLine Scenario = "huge_line"
	// InvalidUTF8: a successful answer whose text is "ok" + "\xff\xfe" + "!" (invalid
	// UTF-8 inside the provider's JSON string). Expected: no error, output text that is
	// valid UTF-8 and starts with "ok" and ends with "!".
	InvalidUTF8 Scenario = "invalid_utf8"
	// Echo: a 401 whose body (and a request-id header) repeat every value of
	// Wire.Secrets and the Authorization header. Expected: provider_rejected, and no
	// secret in the returned error, any emitted event or the adapter's log.
	Echo Scenario = "echo"
)

// Script values the Wire must use.
const (
	ScriptText      = "Hello, world"
	ScriptPartial   = "partial"
	ScriptTool      = "get_weather"
	ScriptArguments = `{"city":"Paris"}`
	// HugeLineBytes is the size of the HugeLine unit.
	HugeLineBytes = 10 << 20
)

// InvalidUTF8Text is the text of the InvalidUTF8 scenario.
const InvalidUTF8Text = "ok\xff\xfe!"

// Wire is one provider's side of the suite: how to build its adapter, and a fake
// upstream that answers every scenario with the provider's documented wire bytes.
type Wire struct {
	// Subject builds the adapter (New, CanEncode, Deployment). Deployment must return a
	// deployment with streaming where the provider supports it, tools, and the
	// credential whose parts are Secrets.
	Subject Subject

	// Provider is the provider name the adapter reports in provider_error.provider.
	Provider string

	// Respond writes the upstream's answer to r in scenario s. It is called for every
	// request of the attempt (an asynchronous API makes several), each on its own
	// upstream server per scenario run. The request has passed Authenticated.
	Respond func(s Scenario, w http.ResponseWriter, r *http.Request)

	// Authenticated returns nil when r carries the credential as the provider documents
	// (bearer token, api-key header, SigV4 signature, OAuth access token), else an error
	// saying what is wrong. The suite checks it on every request.
	Authenticated func(r *http.Request) error

	// Secrets are the credential's secret values (an API key; a private key and the
	// access token minted from it; an AWS secret access key). None may appear in a
	// request's URL, body or any header other than CredentialHeader, nor in anything the
	// adapter returns, emits or logs.
	Secrets []string
	// CredentialHeader is the one request header that may carry a secret ("" when no
	// secret goes on the wire at all, as with a SigV4 signature).
	CredentialHeader string
	// PublicParts are the credential's other parts, which travel in the clear where the
	// provider documents them (an AWS access key id, in the credential scope of every
	// SigV4 Authorization header): they may be on the wire, but like Secrets they never
	// come back in an error, an event, the outcome or the log, nor show when the adapter
	// is printed.
	PublicParts []string

	// EchoFields names every identifier of the provider's successful answer that the
	// adapter copies into an event, the outcome, an error or a log line: response and
	// request ids (in the body and in headers), the model or model version, the tool
	// call's id and name, the finish or stop reason, a remote job's id and URLs.
	EchoFields []string
	// EchoAnswer writes a successful answer calling ScriptTool with ScriptArguments
	// (where the provider has tool calls; else any successful answer) — streamed when
	// the request asks for a stream, one document otherwise — in which
	// the identifier named field (one of EchoFields) holds echo and every other one an
	// ordinary value; field "" is the ordinary answer. The suite runs it with every part
	// of the credential in every field, on the Wire's deployment and on it without
	// streaming (a hostile or broken upstream echoing the credential it was sent).
	// Expected: no part of the credential in an event, the outcome, the error or the
	// log; the attempt succeeds or fails with a portable error (provider_unavailable
	// for an answer the adapter cannot use).
	EchoAnswer func(field, echo string, w http.ResponseWriter, r *http.Request)

	// Usage are the figures the Usage scenario reports, by unit: exactly what the
	// provider documents reporting (cache and reasoning tokens where it has them).
	Usage map[string]float64

	// Errors are the provider's documented error responses, each with its expected
	// portable error.
	Errors []ErrorCase

	// NotApplicable names the scenarios this provider cannot produce, each with the
	// reason (for example: Replicate predictions do not stream, so there is no stream to
	// cut). The suite logs them; every other scenario runs.
	NotApplicable map[Scenario]string
}

// ErrorCase is one documented error response and the error it must map to.
type ErrorCase struct {
	// Name describes the case, for example "429 ThrottlingException".
	Name string
	// Status is the HTTP status; Header and Body are sent with it.
	Status int
	Header http.Header
	Body   string
	// Code and Retryable are the expected portable error; RetryAfterMs, when non-zero,
	// the expected retry_after_ms.
	Code         protocol.Code
	Retryable    bool
	RetryAfterMs int64
}
