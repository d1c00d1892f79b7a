package gemini

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Provider names served by this package (ModelDeployment spec.provider).
const (
	// ProviderGemini is the Gemini API; the credential is an API key.
	ProviderGemini = "gemini"
	// ProviderVertex is Gemini on Vertex AI; the credential is a service account key
	// (JSON), and the deployment's region and project are required.
	ProviderVertex = "vertex"
)

// Default endpoints, used when the deployment sets none.
const (
	// DefaultGeminiEndpoint is the Gemini API's base URL.
	DefaultGeminiEndpoint = "https://generativelanguage.googleapis.com"
	// DefaultVertexGlobalEndpoint is Vertex AI's base URL for the region "global";
	// other regions use DefaultVertexEndpoint(region).
	DefaultVertexGlobalEndpoint = "https://aiplatform.googleapis.com"
)

// DefaultVertexEndpoint is Vertex AI's base URL for region: https://{region}-aiplatform.googleapis.com,
// or DefaultVertexGlobalEndpoint for "global".
func DefaultVertexEndpoint(region string) string {
	if region == regionGlobal {
		return DefaultVertexGlobalEndpoint
	}
	return "https://" + region + "-aiplatform.googleapis.com"
}

const regionGlobal = "global"

// Methods of the model resource; streamGenerateContent is asked for server-sent events.
const (
	methodGenerate = "generateContent"
	methodStream   = "streamGenerateContent"
)

// Identifiers that go into the URL path. They are checked so that no deployment value
// can change the path (a slash, "..", a query); they are escaped anyway. Model ids are
// bare ids ("gemini-2.5-flash"): a "models/" or "publishers/…" prefix is refused, as
// are tuned models, which live under another path.
var (
	modelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	// regionRE is a Google Cloud location ("us-central1", "europe-west4", "global"), the
	// ModelDeployment's spec.region grammar; it also names the default endpoint's host,
	// so it is at most a DNS label's 63 bytes (checked in New).
	regionRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	// projectRE is a project id, a number, or a legacy domain-scoped id
	// ("example.com:proj"); spec.project admits only the first, this adapter all three.
	projectRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.:-]{0,127}$`)
)

// Option configures adapters built by New or Register.
type Option func(*options)

type options struct {
	client *http.Client
	log    logr.Logger
}

// WithHTTPClient makes adapters send their requests — and, for vertex, their token
// requests — with c instead of the shared provider client (providerhttp.Client). The
// attempt's context still governs every model request; c should have no overall
// Timeout, or long generations are cut. Redirects are refused whatever c's policy says,
// so the credential header never follows one.
// The endpoint fence is the client's dialer's: the binary passes providerhttp.NewClient
// (loopback per --allow-loopback-endpoints); the shared client refuses loopback; a client
// built otherwise (a test's) dials as its transport does.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.client = c }
}

// WithLogger sets the logger of attempts whose context carries none (the engine's
// attempts carry their own). The adapter logs identifiers only (status, error type and
// reason, response id): never a message, body, URL or credential. The zero Logger
// discards.
func WithLogger(l logr.Logger) Option {
	return func(o *options) { o.log = l }
}

// Counting is how the adapter counts the tokens it reports for both providers (README.md,
// "Usage"): input_tokens is promptTokenCount (plus toolUsePromptTokenCount), which
// includes the cached tokens of cachedContentTokenCount; output_tokens is
// candidatesTokenCount plus thoughtsTokenCount, which Google reports apart and the
// adapter adds up, so it includes the reasoning tokens it also reports.
var Counting = pricing.Counting{InputIncludesCache: true, OutputIncludesReasoning: true}

// Register adds the adapter for ProviderGemini and ProviderVertex, built with opts, to m
// (engine.Config.Providers), with CanEncode as their routing-time check and Counting.
func Register(m map[string]engine.Provider, opts ...Option) {
	providerhttp.Register(m, engine.Provider{New: providerhttp.Factory(New, opts...), CanEncode: CanEncode, Operation: "chat",
		Counting: Counting},
		ProviderGemini, ProviderVertex)
}

// adapter runs one attempt against one deployment. It is built per attempt (so a rotated
// credential takes effect at the next attempt) and keeps only what the call needs.
type adapter struct {
	provider string
	model    string
	url      string // the model method's URL, alt=sse included when streaming
	stream   bool
	// d is the deployment the adapter was built for: its provider, capabilities and
	// output cap decide what a request may send.
	d      *routing.Deployment
	client *http.Client
	log    logr.Logger

	// apiKey is the gemini credential, revealed only for x-goog-api-key and to scrub
	// echoes; unset for vertex.
	apiKey routing.Credential
	// tokens is the vertex deployment's cached token source; nil for gemini.
	tokens *tokenEntry
}

var (
	_ engine.Adapter = (*adapter)(nil)
	_ fmt.Formatter  = (*adapter)(nil)
)

// Format prints the provider and model only, whatever the verb (%v, %+v, %#v, %s, %d,
// %x, …); the API key is a routing.Credential, which never prints its value either.
func (a *adapter) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, a.String()) }

// String and GoString return the same redacted text as Format.
func (a *adapter) String() string   { return "gemini adapter (" + a.provider + " " + a.model + ")" }
func (a *adapter) GoString() string { return a.String() }

// New returns the adapter for d. It fails with provider_rejected (the deployment's
// configuration is unusable, an operator problem; spec/http-api.md, "Errors") when d is
// not a gemini or vertex deployment, has no valid model id or no credential, its
// endpoint is not an absolute http(s) URL without user information or query, a gemini
// credential is not a valid header value, or a vertex deployment lacks a valid region or
// project or its credential is not a service account key. Messages are fixed: they
// never name the endpoint, the project or the credential.
func New(d *routing.Deployment, opts ...Option) (engine.Adapter, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if d == nil || (d.Provider != ProviderGemini && d.Provider != ProviderVertex) {
		return nil, rejected(ProviderGemini, "the deployment's provider is not served by the gemini adapter")
	}
	a := &adapter{
		provider: d.Provider,
		model:    d.Model,
		stream:   d.Capabilities.Has(routing.CapsOf(protocol.CapStreaming)),
		d:        d,
		client:   providerhttp.Client(o.client),
		log:      o.log,
	}
	if !modelRE.MatchString(d.Model) {
		return nil, rejected(d.Provider, "the deployment has no model, or its model id is not a bare model id")
	}
	if !d.Credential.IsSet() {
		return nil, rejected(d.Provider, "the deployment has no credential")
	}
	var (
		fallback string
		path     []string
	)
	switch d.Provider {
	case ProviderGemini:
		if !providerhttp.HeaderSafe(d.Credential.Reveal()) {
			// Caught here rather than by net/http at send time, where it would look
			// like a provider outage and be retried.
			return nil, rejected(d.Provider, "the deployment's credential is not a valid header value")
		}
		a.apiKey = d.Credential
		fallback = DefaultGeminiEndpoint
		path = []string{"v1beta", "models"}
	case ProviderVertex:
		if len(d.Region) > 63 || !regionRE.MatchString(d.Region) {
			return nil, rejected(d.Provider, "the vertex deployment has no valid region")
		}
		if !projectRE.MatchString(d.Project) {
			return nil, rejected(d.Provider, "the vertex deployment has no valid project")
		}
		fallback = DefaultVertexEndpoint(d.Region)
		path = []string{"v1", "projects", url.PathEscape(d.Project), "locations", url.PathEscape(d.Region), "publishers", "google", "models"}
	}
	base, ok := providerhttp.BaseURL(d.Endpoint, fallback)
	if !ok || base.RawQuery != "" || base.ForceQuery {
		// Google documents no query on these endpoints, and an API key there would
		// travel in the URL.
		return nil, rejected(d.Provider, "the deployment's endpoint is not an absolute http(s) URL without query")
	}
	method := methodGenerate
	if a.stream {
		method = methodStream
	}
	u := base.JoinPath(append(path, url.PathEscape(d.Model)+":"+method)...)
	if a.stream {
		u.RawQuery = "alt=sse"
	}
	a.url = u.String()
	if d.Provider == ProviderVertex {
		// Last, so that only usable deployments enter the token cache.
		entry, ok := vertexTokens.entry(d.Credential.Reveal(), a.client)
		if !ok {
			return nil, rejected(d.Provider, "the vertex deployment's credential is not a service account key")
		}
		a.tokens = entry
	}
	return a, nil
}

// rejected is a configuration error: the engine records it as provider_rejected.
func rejected(provider, msg string) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderRejected, msg)
	e.ProviderError = &protocol.ProviderError{Provider: provider}
	return e
}

// Execute implements engine.Adapter: one generateContent call, or streamGenerateContent
// with alt=sse when the deployment declares streaming. A request it refuses (CanEncode's
// refusals) is returned as an engine.NotSent error before anything is sent.
func (a *adapter) Execute(ctx context.Context, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	log := providerhttp.Logger(ctx, a.log)
	if at.Request == nil {
		return engine.Outcome{}, engine.NotSent(invalid(msgMissing))
	}
	body, perr := buildRequest(at.Request, a.d)
	if perr != nil {
		return engine.Outcome{}, engine.NotSent(perr)
	}
	payload, err := providerhttp.Marshal(body)
	if err != nil {
		return engine.Outcome{}, err
	}

	r := &reader{Events: providerhttp.NewEvents(emit), provider: a.provider, log: log}
	header := http.Header{}
	if a.tokens != nil {
		token, terr := a.tokens.token(ctx, a.provider, log)
		if terr != nil {
			// Nothing reached the model: the engine may try the next candidate, which
			// may not need this key (spec/routing.md, "Attempts and fallback").
			return engine.Outcome{}, engine.NotSent(terr)
		}
		header.Set("Authorization", "Bearer "+token)
		r.secrets = []string{token, a.tokens.keyID}
	} else {
		header.Set("x-goog-api-key", a.apiKey.Reveal())
		r.secrets = []string{a.apiKey.Reveal()}
	}
	if a.stream {
		header.Set("Accept", "text/event-stream")
	} else {
		header.Set("Accept", "application/json")
	}
	return providerhttp.Do(ctx, providerhttp.Call{
		Provider: a.provider, Client: a.client, Log: log,
		URL: a.url, Body: payload, Header: header, Failure: a.failure(r),
	}, func(resp *http.Response) (engine.Outcome, error) {
		if a.stream && !providerhttp.IsJSON(resp.Header) {
			return r.readStream(ctx, resp.Body, func() { _ = resp.Body.Close() })
		}
		// Non-streaming, or a proxy that answered the streaming call with one JSON
		// document: the same response object, read whole.
		return r.readWhole(ctx, resp.Body)
	})
}

// failure maps a failed response with r, and after a 401 drops the vertex token the
// call carried: it was refused before it expired (revoked key, clock skew), so the next
// attempt mints a new one rather than reusing it.
func (a *adapter) failure(r *reader) func(*http.Response, []byte) *protocol.Error {
	return func(resp *http.Response, body []byte) *protocol.Error {
		if resp.StatusCode == http.StatusUnauthorized && a.tokens != nil {
			vertexTokens.forget(a.tokens)
		}
		return r.httpFailure(resp, body)
	}
}
