package bedrock_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
	"github.com/switchboard-dev/switchboard/runtime/providers/providertest"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// subjectWith is this adapter in the shared provider suite, with the credential value
// cred on a streaming deployment that declares tools.
func subjectWith(cred string) providertest.Subject {
	return providertest.Subject{
		New: func(d *routing.Deployment, c *http.Client) (engine.Adapter, error) {
			return bedrock.New(d, bedrock.WithHTTPClient(c), bedrock.WithClock(func() time.Time { return signingTime }))
		},
		CanEncode: bedrock.CanEncode,
		Deployment: func(endpoint string) *routing.Deployment {
			return deployment(endpoint, streaming, withCaps(protocol.CapTools), withCredential(cred))
		},
	}
}

// subject is the adapter with temporary access keys.
var subject = subjectWith(keysJSON(true))

// conformanceUsage is what the Usage scenario reports: every TokenUsage field Bedrock
// documents that maps to a unit (totalTokens is their sum and is not reported).
var conformanceUsage = map[string]float64{
	protocol.UnitInputTokens:      11,
	protocol.UnitOutputTokens:     7,
	protocol.UnitCacheReadTokens:  5,
	protocol.UnitCacheWriteTokens: 3,
}

// wire is the Bedrock side of the suite: ConverseStream answers encoded with the SDK's
// event-stream Encoder, and an authentication check that verifies SigV4 signatures
// independently (verifySigV4) or the bearer API key.
func wire(subject providertest.Subject, secrets, public []string, credentialHeader string) providertest.Wire {
	return providertest.Wire{
		Subject:          subject,
		Provider:         bedrock.Provider,
		Respond:          respond,
		Secrets:          secrets,
		PublicParts:      public,
		CredentialHeader: credentialHeader,
		EchoFields:       echoFields,
		EchoAnswer:       echoAnswer,
		Usage:            conformanceUsage,
		Errors:           documentedErrors(),
		Authenticated: func(r *http.Request) error {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return err
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if err := authenticate(r, body); err != nil {
				return err
			}
			if !strings.HasSuffix(r.URL.Path, "/converse-stream") && !strings.HasSuffix(r.URL.Path, "/converse") {
				return errors.New("not a Converse or ConverseStream call")
			}
			return nil
		},
	}
}

// TestConformance runs the shared suite three times, once per credential form:
//
//   - temporary access keys: Secrets are the secret access key and the session token.
//     The session token must travel, in X-Amz-Security-Token (CredentialHeader), so the
//     suite checks it goes nowhere else and never comes back in an error, event or log.
//     The access key id travels in every Authorization header's credential scope (a
//     public part), and must not come back either.
//   - long-term access keys: the secret access key alone, which never travels at all —
//     only the signature made with it — so there is no CredentialHeader; the access key
//     id as above.
//   - a Bedrock API key: the key, in Authorization as a bearer token.
func TestConformance(t *testing.T) {
	t.Run("temporary access keys", func(t *testing.T) {
		providertest.RunConformance(t, wire(subject, []string{secretCanary, tokenCanary}, []string{accessKeyID}, "X-Amz-Security-Token"))
	})
	t.Run("long-term access keys", func(t *testing.T) {
		providertest.RunConformance(t, wire(subjectWith(keysJSON(false)), []string{secretCanary}, []string{accessKeyID}, ""))
	})
	t.Run("API key", func(t *testing.T) {
		providertest.RunConformance(t, wire(subjectWith(apiKeyCanary), []string{apiKeyCanary}, nil, "Authorization"))
	})
}

// TestCanEncodeAgreesWithExecute: over the shared corpus (every part type, role and
// media form on six capability sets), CanEncode admits a request exactly when Execute
// sends it, and refuses it with the error Execute returns as NotSent, sending nothing.
func TestCanEncodeAgreesWithExecute(t *testing.T) {
	providertest.CheckEncodeAgreement(t, subject, providertest.Cases())
}

// TestJSONPartsAreText: every request with json parts is sent exactly as it would be
// with text parts holding the same compact JSON — tool results included, where a json
// part is a text block, never a toolResult json block.
func TestJSONPartsAreText(t *testing.T) {
	providertest.CheckJSONPartsAreText(t, subject)
}

// TestJSONPartsNeverBecomeFields: a json part naming image, tools, model, system,
// messages or stream reaches the provider as one text block: no media, no tools, no
// system, no inferenceConfig.
func TestJSONPartsNeverBecomeFields(t *testing.T) {
	body := `{"ability":"chat","input":[{"type":"text","text":"Describe this record."},{"type":"json","json":` + providertest.Hostile + `}]}`
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(providertest.Hostile)); err != nil {
		t.Fatal(err)
	}
	want := `{"messages":[{"role":"user","content":[{"text":"Describe this record."},{"text":` + mustJSON(compact.String()) + `}]}]}`
	for name, caps := range map[string]routing.CapSet{
		"text-only":              providertest.TextJSON,
		"images, tools disabled": providertest.TextJSON | routing.CapsOf(protocol.CapInputImage),
	} {
		t.Run(name, func(t *testing.T) { jsonEqual(t, subject.Sent(t, body, caps), want) })
	}
}

// TestDeclarableInputsAreEncodable: every input modality a ModelDeployment may declare
// for this provider (text, json, image, video, file — not audio) has a form CanEncode
// admits; audio is refused in every form.
func TestDeclarableInputsAreEncodable(t *testing.T) {
	d := deployment("http://127.0.0.1:1", withCaps(protocol.CapInputImage, protocol.CapInputVideo, protocol.CapInputFile, protocol.CapInputAudio))
	for _, part := range []string{
		`{"type":"text","text":"t"}`,
		`{"type":"json","json":{}}`,
		`{"type":"image","media_type":"image/png","data":"iVBORw0KGgo="}`,
		`{"type":"image","media_type":"image/jpeg","uri":"s3://bucket/a.jpg"}`,
		`{"type":"video","media_type":"video/mp4","data":"AAAA"}`,
		`{"type":"video","media_type":"video/webm","uri":"s3://bucket/v.webm"}`,
		`{"type":"file","media_type":"application/pdf","data":"JVBERg=="}`,
		`{"type":"file","media_type":"text/csv","uri":"s3://bucket/d.csv"}`,
	} {
		body := `{"ability":"chat","input":[{"type":"text","text":"t"},` + part + `]}`
		if pe := bedrock.CanEncode(decode(t, body), d); pe != nil {
			t.Errorf("CanEncode(%s) = %v, want admitted", part, pe)
		}
	}
	for _, part := range []string{
		`{"type":"audio","media_type":"audio/wav","data":"UklGRg=="}`,
		`{"type":"audio","media_type":"audio/mpeg","uri":"s3://bucket/a.mp3"}`,
	} {
		body := `{"ability":"chat","input":[{"type":"text","text":"t"},` + part + `]}`
		if pe := bedrock.CanEncode(decode(t, body), d); pe == nil || pe.Code != protocol.CodeUnsupportedCapability {
			t.Errorf("CanEncode(%s) = %v, want unsupported_capability", part, pe)
		}
	}
}

// respond answers scenario s the way ConverseStream does.
func respond(s providertest.Scenario, w http.ResponseWriter, r *http.Request) {
	start := bedrock.Event("messageStart", `{"role":"assistant"}`)
	text := func(s string) bedrock.Frame {
		return bedrock.Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":`+mustJSON(s)+`},"p":"abcdefgh"}`)
	}
	stop := func(reason string) bedrock.Frame {
		return bedrock.Event("messageStop", `{"stopReason":"`+reason+`"}`)
	}
	metadata := bedrock.Event("metadata", `{"usage":{"inputTokens":11,"outputTokens":7,"totalTokens":26,"cacheReadInputTokens":5,"cacheWriteInputTokens":3},"metrics":{"latencyMs":120}}`)
	w.Header().Set("x-amzn-RequestId", "b1a5e7c0-1f2e-4d3c-8b9a-0a1b2c3d4e5f")

	var fs []bedrock.Frame
	switch s {
	case providertest.Text:
		fs = []bedrock.Frame{start, text("Hello"), text(", world"), bedrock.Event("contentBlockStop", `{"contentBlockIndex":0}`), stop("end_turn"), metadata}
	case providertest.ToolCall:
		fs = []bedrock.Frame{start,
			bedrock.Event("contentBlockStart", `{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"tooluse_Conformance0001","name":"`+providertest.ScriptTool+`"}}}`),
			bedrock.Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{\"city\":"}}}`),
			bedrock.Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":"\"Paris\"}"}}}`),
			bedrock.Event("contentBlockStop", `{"contentBlockIndex":0}`), stop("tool_use"), metadata}
	case providertest.Usage:
		fs = []bedrock.Frame{start, text("ok"), stop("end_turn"), metadata}
	case providertest.InStreamError:
		fs = []bedrock.Frame{start, text(providertest.ScriptPartial),
			bedrock.Exception("internalServerException", `{"message":"An internal server error occurred. Retry your request."}`)}
	case providertest.CutBeforeOutput:
		fs = []bedrock.Frame{start}
	case providertest.CutAfterOutput:
		fs = []bedrock.Frame{start, text(providertest.ScriptPartial)}
	case providertest.Stall:
		w.Header().Set("Content-Type", bedrock.ContentTypeEventStream)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	case providertest.HugeLine:
		// A frame whose prelude (with a valid CRC) declares 10 MB, then the bytes.
		var prelude [12]byte
		binary.BigEndian.PutUint32(prelude[0:4], providertest.HugeLineBytes)
		binary.BigEndian.PutUint32(prelude[8:12], crc32.ChecksumIEEE(prelude[:8]))
		first, _ := bedrock.EncodeFrames(start)
		w.Header().Set("Content-Type", bedrock.ContentTypeEventStream)
		providertest.WriteHuge(w, string(first)+string(prelude[:]))
		return
	case providertest.InvalidUTF8:
		fs = []bedrock.Frame{start,
			bedrock.Event("contentBlockDelta", "{\"contentBlockIndex\":0,\"delta\":{\"text\":\""+providertest.InvalidUTF8Text+"\"}}"),
			stop("end_turn"), metadata}
	case providertest.Echo:
		echo := strings.Join(append(append([]string{}, allSecrets...), r.Header.Get("Authorization"), r.Header.Get("X-Amz-Security-Token")), " ")
		w.Header().Set("x-amzn-RequestId", echo)
		w.Header().Set("x-amzn-ErrorType", "UnrecognizedClientException:"+echo)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"message":`+mustJSON("The security token included in the request is invalid: "+echo)+`}`)
		return
	}
	body, err := bedrock.EncodeFrames(fs...)
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", bedrock.ContentTypeEventStream)
	_, _ = w.Write(body)
}

// documentedErrors are the Converse and ConverseStream errors Bedrock documents, as it
// answers them: the type in x-amzn-ErrorType, the request id, a {"message"} body.
func documentedErrors() []providertest.ErrorCase {
	c := func(status int, typ string, code protocol.Code, retryable bool) providertest.ErrorCase {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("x-amzn-ErrorType", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
		h.Set("x-amzn-RequestId", "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a")
		return providertest.ErrorCase{Name: itoa(status) + " " + typ, Status: status, Header: h,
			Body: `{"message":"a message the adapter never reads"}`, Code: code, Retryable: retryable}
	}
	return []providertest.ErrorCase{
		c(400, "ValidationException", protocol.CodeInvalidRequest, false),
		c(400, "ServiceQuotaExceededException", protocol.CodeRateLimited, true),
		c(403, "AccessDeniedException", protocol.CodeProviderRejected, false),
		c(403, "UnrecognizedClientException", protocol.CodeProviderRejected, false),
		c(404, "ResourceNotFoundException", protocol.CodeProviderRejected, false),
		c(408, "ModelTimeoutException", protocol.CodeProviderTimeout, true),
		c(424, "ModelErrorException", protocol.CodeProviderUnavailable, true),
		c(429, "ThrottlingException", protocol.CodeRateLimited, true),
		c(429, "ModelNotReadyException", protocol.CodeProviderUnavailable, true),
		c(500, "InternalServerException", protocol.CodeProviderUnavailable, true),
		c(503, "ServiceUnavailableException", protocol.CodeProviderUnavailable, true),
	}
}

// echoFields are the identifiers of a Converse or ConverseStream answer: the request id
// header, the toolUse block's toolUseId and name, the stop reason.
var echoFields = []string{"x-amzn-RequestId", "toolUseId", "name", "stopReason"}

// echoAnswer answers with one toolUse block calling the script's tool — an event stream
// for converse-stream, one JSON document for converse — with echo in field (see
// providertest.Wire.EchoAnswer).
func echoAnswer(field, echo string, w http.ResponseWriter, r *http.Request) {
	v := map[string]string{"x-amzn-RequestId": "b1a5e7c0-1f2e-4d3c-8b9a-0a1b2c3d4e5f", "toolUseId": "tooluse_Echo0001",
		"name": providertest.ScriptTool, "stopReason": "tool_use"}
	if field != "" {
		v[field] = echo
	}
	q := func(name string) string { return mustJSON(v[name]) }
	w.Header().Set("x-amzn-RequestId", v["x-amzn-RequestId"])
	usage := `{"inputTokens":11,"outputTokens":7,"totalTokens":18}`
	if !strings.HasSuffix(r.URL.Path, "/converse-stream") {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":`+q("toolUseId")+
			`,"name":`+q("name")+`,"input":`+providertest.ScriptArguments+`}}]}},"stopReason":`+q("stopReason")+
			`,"usage":`+usage+`,"metrics":{"latencyMs":120}}`)
		return
	}
	body, err := bedrock.EncodeFrames(bedrock.Event("messageStart", `{"role":"assistant"}`),
		bedrock.Event("contentBlockStart", `{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":`+q("toolUseId")+`,"name":`+q("name")+`}}}`),
		bedrock.Event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"toolUse":{"input":`+mustJSON(providertest.ScriptArguments)+`}}}`),
		bedrock.Event("contentBlockStop", `{"contentBlockIndex":0}`),
		bedrock.Event("messageStop", `{"stopReason":`+q("stopReason")+`}`),
		bedrock.Event("metadata", `{"usage":`+usage+`,"metrics":{"latencyMs":120}}`))
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", bedrock.ContentTypeEventStream)
	_, _ = w.Write(body)
}
