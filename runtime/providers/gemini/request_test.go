package gemini_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/gemini"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// sent runs req on d against a replay upstream and returns the body it received.
func sent(t *testing.T, req *protocol.Request, opts ...func(*routing.Deployment)) []byte {
	t.Helper()
	up := newUpstream(t, http.StatusOK, "generate_text.json")
	res := run(t, geminiDeployment(up.URL, opts...), req)
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	c := up.only(t)
	checkCredentialPlacement(t, c, "x-goog-api-key", canaryKey)
	return c.Body
}

func TestRequestMapping(t *testing.T) {
	all := withCaps(protocol.CapInputImage, protocol.CapInputAudio, protocol.CapInputVideo, protocol.CapInputFile, protocol.CapTools)
	for _, tc := range []struct {
		name string
		body string
		ext  map[string]json.RawMessage // set past the decoder, which knows only registered keys
		want string
	}{
		{
			name: "text",
			body: `[{"type":"text","text":"Hello"}]`,
			want: `{"contents":[{"role":"user","parts":[{"text":"Hello"}]}]}`,
		},
		{
			name: "system parts become the system instruction, json as compact text",
			body: `[{"type":"text","role":"system","text":"Be brief."},{"type":"json","role":"system","json":{ "lang" : "en" }},{"type":"text","text":"Hi"}]`,
			want: `{"contents":[{"role":"user","parts":[{"text":"Hi"}]}],"systemInstruction":{"parts":[{"text":"Be brief."},{"text":"{\"lang\":\"en\"}"}]}}`,
		},
		{
			name: "roles: assistant is model, tool is user, same roles merge, empty texts drop",
			body: `[{"type":"text","text":"Hi"},{"type":"text","text":""},{"type":"json","json":[1, 2]},{"type":"text","role":"assistant","text":"Hello!"},` +
				`{"type":"text","role":"assistant","text":"How can I help?"},{"type":"text","role":"tool","text":"42"}]`,
			want: `{"contents":[{"role":"user","parts":[{"text":"Hi"},{"text":"[1,2]"}]},` +
				`{"role":"model","parts":[{"text":"Hello!"},{"text":"How can I help?"}]},{"role":"user","parts":[{"text":"42"}]}]}`,
		},
		{
			name: "media: inline data and https uris, media type parameters dropped",
			body: `[{"type":"text","text":"Describe"},{"type":"image","media_type":"image/png","data":"iVBORw0KGgo="},` +
				`{"type":"audio","media_type":"audio/wav; rate=16000","data":"UklGRg=="},{"type":"video","media_type":"video/mp4","uri":"https://www.youtube.com/watch?v=9hE5-98ZeCg"},` +
				`{"type":"file","media_type":"application/pdf","uri":"https://generativelanguage.googleapis.com/v1beta/files/sb-abc123"}]`,
			want: `{"contents":[{"role":"user","parts":[{"text":"Describe"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},` +
				`{"inlineData":{"mimeType":"audio/wav","data":"UklGRg=="}},{"fileData":{"mimeType":"video/mp4","fileUri":"https://www.youtube.com/watch?v=9hE5-98ZeCg"}},` +
				`{"fileData":{"mimeType":"application/pdf","fileUri":"https://generativelanguage.googleapis.com/v1beta/files/sb-abc123"}}]}]}`,
		},
		{
			name: "tools, a call and its result: name from the call, results first in their turn",
			body: `[{"type":"text","text":"Weather in Paris?"},` +
				`{"type":"tool","name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"additionalProperties":false}},` +
				`{"type":"tool_call","role":"assistant","call_id":"c1","name":"get_weather","arguments":"{ \"city\": \"Paris\" }"},` +
				`{"type":"tool_call","role":"assistant","call_id":"c2","name":"get_time","arguments":""},` +
				`{"type":"text","text":"Also the time."},` +
				`{"type":"tool_result","call_id":"c1","content":"18C"},` +
				`{"type":"tool_result","role":"tool","call_id":"c2","content":[{"type":"text","text":"noon"},{"type":"json","json":{"tz":"CET"}}]}]`,
			want: `{"contents":[{"role":"user","parts":[{"text":"Weather in Paris?"}]},` +
				`{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_time","args":{}}}]},` +
				`{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"output":"18C"}}},` +
				`{"functionResponse":{"name":"get_time","response":{"output":["noon","{\"tz\":\"CET\"}"]}}},{"text":"Also the time."}]}],` +
				`"tools":[{"functionDeclarations":[{"name":"get_weather","description":"Current weather",` +
				`"parametersJsonSchema":{"type":"object","properties":{"city":{"type":"string"}},"additionalProperties":false}}]}]}`,
		},
		{
			name: "a repeated call id answers the nearest call",
			body: `[{"type":"tool_call","role":"assistant","call_id":"call_0","name":"first","arguments":"{}"},{"type":"tool_result","call_id":"call_0","content":"a"},` +
				`{"type":"tool_call","role":"assistant","call_id":"call_0","name":"second","arguments":"{}"},{"type":"tool_result","call_id":"call_0","content":"b"}]`,
			want: `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"first","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"first","response":{"output":"a"}}}]},` +
				`{"role":"model","parts":[{"functionCall":{"name":"second","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"second","response":{"output":"b"}}}]}]}`,
		},
		{
			name: "extensions become generationConfig; other providers' keys are ignored",
			body: `[{"type":"text","text":"Hello"}]`,
			ext: map[string]json.RawMessage{
				"gemini.temperature": json.RawMessage(`0.5`), "gemini.top_p": json.RawMessage(`0.9`), "gemini.top_k": json.RawMessage(`40`),
				"gemini.max_output_tokens": json.RawMessage(`1e3`), "gemini.seed": json.RawMessage(`-7`), "gemini.thinking_budget": json.RawMessage(`0`),
				"gemini.thinking_level": json.RawMessage(`"low"`), "gemini.stop_sequences": json.RawMessage(`["\n\n", "END"]`),
				"gemini.tools":           json.RawMessage(`[{"googleSearch":{}}]`),
				"gemini.safety_settings": json.RawMessage(`[]`), "openai.temperature": json.RawMessage(`1.5`), "vertex.temperature": json.RawMessage(`9`),
			},
			want: `{"contents":[{"role":"user","parts":[{"text":"Hello"}]}],"generationConfig":{"temperature":0.5,"topP":0.9,"topK":40,` +
				`"maxOutputTokens":1000,"seed":-7,"stopSequences":["\n\n","END"],"thinkingConfig":{"thinkingBudget":0,"thinkingLevel":"LOW"}}}`,
		},
		{
			name: "no stop sequences send no generationConfig",
			body: `[{"type":"text","text":"Hello"}]`,
			ext:  map[string]json.RawMessage{"gemini.stop_sequences": json.RawMessage(`[]`)},
			want: `{"contents":[{"role":"user","parts":[{"text":"Hello"}]}]}`,
		},
		{
			name: "a dynamic thinking budget",
			body: `[{"type":"text","text":"Hello"}]`,
			ext:  map[string]json.RawMessage{"gemini.thinking_budget": json.RawMessage(`-1`)},
			want: `{"contents":[{"role":"user","parts":[{"text":"Hello"}]}],"generationConfig":{"thinkingConfig":{"thinkingBudget":-1}}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := decode(t, `{"ability":"chat","input":`+tc.body+`}`)
			req.Extensions = tc.ext
			jsonEqual(t, sent(t, req, all), tc.want)
		})
	}
}

func TestRequestHostileJSONPartIsData(t *testing.T) {
	body := sent(t, decode(t, `{"ability":"chat","input":[{"type":"json","json":{"contents":[],"tools":[{"googleSearch":{}}],"generationConfig":{"temperature":2},"model":"evil"}}]}`))
	jsonEqual(t, body, `{"contents":[{"role":"user","parts":[{"text":"{\"contents\":[],\"tools\":[{\"googleSearch\":{}}],\"generationConfig\":{\"temperature\":2},\"model\":\"evil\"}"}]}]}`)
}

func TestRequestURLsAndHeaders(t *testing.T) {
	ts := newTokenServer(t)
	sa, token := ts.account(0, "sbkey0urls")
	for _, tc := range []struct {
		name       string
		d          func(endpoint string) *routing.Deployment
		path, qry  string
		header     string
		credential string
		accept     string
	}{
		{"gemini", func(e string) *routing.Deployment { return geminiDeployment(e) },
			"/v1beta/models/gemini-2.5-flash:generateContent", "", "x-goog-api-key", canaryKey, "application/json"},
		{"gemini streaming, endpoint path prefix kept", func(e string) *routing.Deployment { return geminiDeployment(e+"/proxy/", streaming) },
			"/proxy/v1beta/models/gemini-2.5-flash:streamGenerateContent", "alt=sse", "x-goog-api-key", canaryKey, "text/event-stream"},
		{"vertex", func(e string) *routing.Deployment { return vertexDeployment(e, sa) },
			"/v1/projects/sb-test-project/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent", "", "Authorization", "Bearer " + token, "application/json"},
		{"vertex streaming, global, domain-scoped project", func(e string) *routing.Deployment {
			return vertexDeployment(e, sa, streaming, func(d *routing.Deployment) { d.Region, d.Project = "global", "example.com:sb-proj" })
		}, "/v1/projects/example.com:sb-proj/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent", "alt=sse", "Authorization", "Bearer " + token, "text/event-stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := "generate_text.json"
			if strings.Contains(tc.accept, "event-stream") {
				file = "stream_text.sse"
			}
			up := newUpstream(t, http.StatusOK, file)
			res := run(t, tc.d(up.URL), hello(t))
			if res.err != nil {
				t.Fatalf("Execute: %v", res.err)
			}
			c := up.only(t)
			if c.Method != http.MethodPost || c.Path != tc.path || c.RawQuery != tc.qry {
				t.Errorf("request %s %s?%s, want POST %s?%s", c.Method, c.Path, c.RawQuery, tc.path, tc.qry)
			}
			checkCredentialPlacement(t, c, tc.header, tc.credential)
			if got := c.Header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type %q", got)
			}
			if got := c.Header.Get("Accept"); got != tc.accept {
				t.Errorf("Accept %q, want %q", got, tc.accept)
			}
			if tc.header == "Authorization" && c.Header.Get("x-goog-api-key") != "" {
				t.Error("a vertex request carries x-goog-api-key")
			}
			if tc.header == "x-goog-api-key" && c.Header.Get("Authorization") != "" {
				t.Error("a gemini request carries Authorization")
			}
		})
	}
}

func TestDefaultVertexEndpoint(t *testing.T) {
	if got := gemini.DefaultVertexEndpoint("europe-west4"); got != "https://europe-west4-aiplatform.googleapis.com" {
		t.Errorf("regional endpoint %q", got)
	}
	if got := gemini.DefaultVertexEndpoint("global"); got != gemini.DefaultVertexGlobalEndpoint {
		t.Errorf("global endpoint %q", got)
	}
}

func TestNewRejects(t *testing.T) {
	ts := newTokenServer(t)
	sa, _ := ts.account(0, "sbkey0new")
	vertex := func(f func(*routing.Deployment)) *routing.Deployment { return vertexDeployment("", sa, f) }
	gem := func(f func(*routing.Deployment)) *routing.Deployment { return geminiDeployment("", f) }
	saWith := func(field string, value any) string {
		var m map[string]any
		_ = json.Unmarshal([]byte(sa.json), &m)
		m[field] = value
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tc := range []struct {
		name string
		d    *routing.Deployment
	}{
		{"nil", nil},
		{"another provider", gem(func(d *routing.Deployment) { d.Provider = "openai" })},
		{"no model", gem(func(d *routing.Deployment) { d.Model = "" })},
		{"a model path", gem(func(d *routing.Deployment) { d.Model = "models/gemini-2.5-flash" })},
		{"a model escaping its segment", gem(func(d *routing.Deployment) { d.Model = "..%2F..%2Fx" })},
		{"a model with a query", gem(func(d *routing.Deployment) { d.Model = "gemini?key=x" })},
		{"no credential", gem(func(d *routing.Deployment) { d.Credential = routing.Credential{} })},
		{"an API key with a newline", gem(func(d *routing.Deployment) { d.Credential = routing.NewCredential(canaryKey + "\n") })},
		{"a relative endpoint", gem(func(d *routing.Deployment) { d.Endpoint = "/v1beta" })},
		{"an ftp endpoint", gem(func(d *routing.Deployment) { d.Endpoint = "ftp://example.com" })},
		{"an endpoint with user information", gem(func(d *routing.Deployment) { d.Endpoint = "https://u:" + canaryKey + "@example.com" })},
		{"an endpoint with a query", gem(func(d *routing.Deployment) { d.Endpoint = "https://example.com/?key=" + canaryKey })},
		{"vertex without region", vertex(func(d *routing.Deployment) { d.Region = "" })},
		{"vertex with a region that is not a location", vertex(func(d *routing.Deployment) { d.Region = "us-central1.evil.example/x" })},
		{"vertex with a region too long for a host name", vertex(func(d *routing.Deployment) { d.Region = strings.Repeat("a", 64) })},
		{"vertex without project", vertex(func(d *routing.Deployment) { d.Project = "" })},
		{"vertex with a project path", vertex(func(d *routing.Deployment) { d.Project = "p/locations/x" })},
		{"vertex with an API key", vertex(func(d *routing.Deployment) { d.Credential = routing.NewCredential(canaryKey) })},
		{"vertex with an authorized user", vertex(func(d *routing.Deployment) {
			d.Credential = routing.NewCredential(`{"type":"authorized_user","client_id":"x","client_secret":"` + canaryKey + `","refresh_token":"y"}`)
		})},
		{"vertex with an external account", vertex(func(d *routing.Deployment) { d.Credential = routing.NewCredential(saWith("type", "external_account")) })},
		{"vertex key without a private key", vertex(func(d *routing.Deployment) { d.Credential = routing.NewCredential(saWith("private_key", "")) })},
		{"vertex key with a broken private key", vertex(func(d *routing.Deployment) {
			d.Credential = routing.NewCredential(saWith("private_key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
		})},
		{"vertex key with a plain-http token uri", vertex(func(d *routing.Deployment) {
			d.Credential = routing.NewCredential(saWith("token_uri", "http://oauth2.example.com/token"))
		})},
		{"vertex key with a token uri holding user information", vertex(func(d *routing.Deployment) {
			d.Credential = routing.NewCredential(saWith("token_uri", "https://u:p@oauth2.example.com/token"))
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := gemini.New(tc.d)
			if err == nil {
				t.Fatalf("New accepted the deployment: %v", a)
			}
			pe := asError(t, err)
			if pe.Code != protocol.CodeProviderRejected || pe.Retryable {
				t.Errorf("New failed with %+v, want provider_rejected", pe)
			}
			for _, secret := range []string{canaryKey, sa.pem, sa.keyID, "sb-test-project", "evil", "example.com"} {
				if strings.Contains(pe.Message, secret) {
					t.Errorf("message %q names a deployment value", pe.Message)
				}
			}
		})
	}
}

func TestAdapterDoesNotPrintItsCredential(t *testing.T) {
	ts := newTokenServer(t)
	sa, _ := ts.account(0, "sbkey0print")
	for _, d := range []*routing.Deployment{geminiDeployment(""), vertexDeployment("", sa)} {
		a, err := gemini.New(d)
		if err != nil {
			t.Fatal(err)
		}
		// Every verb prints the same fixed text: %d, %x, %t, … would otherwise print the
		// unexported fields, the API key among them (as bytes for %x, %d).
		want := "gemini adapter (" + d.Provider + " " + d.Model + ")"
		for _, format := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%X", "%q", "%t"} {
			if s := fmt.Sprintf(format, a); s != want {
				t.Errorf("%s prints %q, want %q", format, s, want)
			}
		}
	}
}

// TestRefusals checks each refusal: CanEncode returns it, and Execute returns the same
// error as a NotSent refusal without sending anything.
func TestRefusals(t *testing.T) {
	tools := withCaps(protocol.CapTools)
	media := withCaps(protocol.CapInputImage, protocol.CapInputAudio, protocol.CapInputVideo, protocol.CapInputFile)
	vertexMedia := func(d *routing.Deployment) { d.Provider = gemini.ProviderVertex }
	for _, tc := range []struct {
		name  string
		body  string
		ext   map[string]json.RawMessage
		opts  []func(*routing.Deployment)
		code  protocol.Code
		admit bool // on vertex, for the uri cases
	}{
		{name: "a tool without tools declared", body: `[{"type":"text","text":"Hi"},{"type":"tool","name":"f","parameters":{}}]`, code: protocol.CodeUnsupportedCapability},
		{name: "a tool_call without tools declared", body: `[{"type":"tool_call","role":"assistant","call_id":"c","name":"f","arguments":"{}"},{"type":"text","text":"Hi"}]`, code: protocol.CodeUnsupportedCapability},
		{name: "a tool_result without tools declared", body: `[{"type":"tool_call","role":"assistant","call_id":"c","name":"f","arguments":"{}"},{"type":"tool_result","call_id":"c","content":"x"}]`, code: protocol.CodeUnsupportedCapability},
		{name: "array arguments", body: `[{"type":"text","text":"Go"},{"type":"tool_call","role":"assistant","call_id":"c","name":"f","arguments":"[1]"}]`, opts: []func(*routing.Deployment){tools}, code: protocol.CodeInvalidRequest},
		{name: "broken arguments", body: `[{"type":"text","text":"Go"},{"type":"tool_call","role":"assistant","call_id":"c","name":"f","arguments":"{"}]`, opts: []func(*routing.Deployment){tools}, code: protocol.CodeInvalidRequest},
		{name: "a result without its call", body: `[{"type":"text","text":"Go"},{"type":"tool_result","call_id":"c","content":"x"}]`, opts: []func(*routing.Deployment){tools}, code: protocol.CodeInvalidRequest},
		{name: "a result before its call", body: `[{"type":"tool_result","call_id":"c","content":"x"},{"type":"tool_call","role":"assistant","call_id":"c","name":"f","arguments":"{}"}]`, opts: []func(*routing.Deployment){tools}, code: protocol.CodeInvalidRequest},
		{name: "media in a result", body: `[{"type":"tool_call","role":"assistant","call_id":"c","name":"f","arguments":"{}"},{"type":"tool_result","call_id":"c","content":[{"type":"image","media_type":"image/png","data":"iVBORw0KGgo="}]}]`, opts: []func(*routing.Deployment){tools, media}, code: protocol.CodeUnsupportedCapability},
		{name: "an image without input.image", body: `[{"type":"image","media_type":"image/png","data":"iVBORw0KGgo="}]`, code: protocol.CodeUnsupportedCapability},
		{name: "a system image", body: `[{"type":"image","role":"system","media_type":"image/png","data":"iVBORw0KGgo="},{"type":"text","text":"Hi"}]`, opts: []func(*routing.Deployment){media}, code: protocol.CodeUnsupportedCapability},
		{name: "only system text", body: `[{"type":"text","role":"system","text":"Be brief."}]`, code: protocol.CodeUnsupportedCapability},
		{name: "only an empty text", body: `[{"type":"text","text":""}]`, code: protocol.CodeUnsupportedCapability},
		{name: "an http uri", body: `[{"type":"image","media_type":"image/jpeg","uri":"http://example.com/cat.jpg"}]`, opts: []func(*routing.Deployment){media}, code: protocol.CodeUnsupportedCapability},
		{name: "a gs uri on the Gemini API", body: `[{"type":"video","media_type":"video/mp4","uri":"gs://sb-bucket/v.mp4"}]`, opts: []func(*routing.Deployment){media}, code: protocol.CodeUnsupportedCapability},
		{name: "a gs uri on Vertex AI", body: `[{"type":"video","media_type":"video/mp4","uri":"gs://sb-bucket/v.mp4"}]`, opts: []func(*routing.Deployment){media, vertexMedia}, admit: true},
		{name: "a data uri", body: `[{"type":"file","media_type":"application/pdf","uri":"data:application/pdf;base64,JVBERg=="}]`, opts: []func(*routing.Deployment){media, vertexMedia}, code: protocol.CodeUnsupportedCapability},
		{name: "a temperature out of range", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.temperature": json.RawMessage(`2.5`)}, code: protocol.CodeInvalidRequest},
		{name: "a top_k of zero", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.top_k": json.RawMessage(`0`)}, code: protocol.CodeInvalidRequest},
		{name: "a fractional max_output_tokens", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.max_output_tokens": json.RawMessage(`1.5`)}, code: protocol.CodeInvalidRequest},
		{name: "a seed beyond int32", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.seed": json.RawMessage(`4294967296`)}, code: protocol.CodeInvalidRequest},
		{name: "a thinking budget below -1", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.thinking_budget": json.RawMessage(`-2`)}, code: protocol.CodeInvalidRequest},
		{name: "a thinking level that is not a word", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.thinking_level": json.RawMessage(`"HIGH; drop"`)}, code: protocol.CodeInvalidRequest},
		{name: "six stop sequences", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.stop_sequences": json.RawMessage(`["a","b","c","d","e","f"]`)}, code: protocol.CodeInvalidRequest},
		{name: "an empty stop sequence", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.stop_sequences": json.RawMessage(`[""]`)}, code: protocol.CodeInvalidRequest},
		{name: "stop sequences given as a string", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.stop_sequences": json.RawMessage(`"END"`)}, code: protocol.CodeInvalidRequest},
		{name: "null stop sequences", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.stop_sequences": json.RawMessage(`null`)}, code: protocol.CodeInvalidRequest},
		{name: "a temperature given as a string", body: `[{"type":"text","text":"Hi"}]`, ext: map[string]json.RawMessage{"gemini.temperature": json.RawMessage(`"0.5"`)}, code: protocol.CodeInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := decode(t, `{"ability":"chat","input":`+tc.body+`}`)
			req.Extensions = tc.ext
			up := newUpstream(t, http.StatusOK, "generate_text.json")
			d := geminiDeployment(up.URL, tc.opts...)
			refusal := gemini.CanEncode(req, d)
			if tc.admit {
				if refusal != nil {
					t.Fatalf("CanEncode refused: %v", refusal)
				}
				return
			}
			if refusal == nil || refusal.Code != tc.code || refusal.Retryable {
				t.Fatalf("CanEncode = %+v, want %s", refusal, tc.code)
			}
			if d.Provider == gemini.ProviderVertex {
				return // the deployment has no service account; CanEncode alone decides
			}
			res := run(t, d, req)
			if !errors.Is(res.err, engine.ErrNotSent) {
				t.Fatalf("Execute returned %v, want a NotSent refusal", res.err)
			}
			if pe := asError(t, res.err); pe.Code != refusal.Code || pe.Message != refusal.Message {
				t.Errorf("Execute refused with %+v, CanEncode with %+v", pe, refusal)
			}
			if n := len(up.requests()); n != 0 {
				t.Errorf("%d requests sent", n)
			}
		})
	}
	if err := gemini.CanEncode(nil, geminiDeployment("")); err == nil || err.Code != protocol.CodeInvalidRequest {
		t.Errorf("CanEncode(nil) = %v", err)
	}
}

func TestRegister(t *testing.T) {
	m := map[string]engine.Provider{}
	gemini.Register(m)
	for _, name := range []string{gemini.ProviderGemini, gemini.ProviderVertex} {
		p, ok := m[name]
		if !ok || p.New == nil || p.CanEncode == nil || p.Operation != "chat" {
			t.Errorf("Register installed %s as %+v", name, p)
		}
	}
	if len(m) != 2 {
		t.Errorf("Register installed %d providers, want 2", len(m))
	}
}
