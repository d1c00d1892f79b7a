package openai

import (
	"context"
	"net/http"
	"strings"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Provider names served by this package (ModelDeployment spec.provider).
const (
	// ProviderOpenAI is the OpenAI API; a credential is required.
	ProviderOpenAI = "openai"
	// ProviderCompatible is any server speaking the Chat Completions wire format; the
	// endpoint is required, the credential optional (local servers often need none).
	ProviderCompatible = "openai-compatible"
	// ProviderAzure is the Azure OpenAI v1 API of one Azure resource: the endpoint (the
	// resource's URL, https://{resource}.openai.azure.com) and the resource's API key,
	// sent in the api-key header, are required; the model is the Azure deployment name.
	ProviderAzure = "azure-openai"
)

// azurePath is the v1 API's base path on an Azure OpenAI resource, appended to the
// endpoint unless the endpoint already ends with it.
const azurePath = "/openai/v1"

// DefaultEndpoint is the base URL of ProviderOpenAI when the deployment sets none.
const DefaultEndpoint = "https://api.openai.com/v1"

// Option configures adapters built by New, NewFactory or Register.
type Option func(*config)

type config struct {
	client *http.Client
	log    logr.Logger
}

// WithHTTPClient makes adapters send requests with c instead of the shared provider
// client (providerhttp.Client). The attempt's context still governs every request; c
// should have no overall Timeout, or long generations are cut. Redirects are refused
// whatever c's policy says, so the Authorization header never follows one.
// The endpoint fence is the client's dialer's: the binary passes providerhttp.NewClient
// (loopback per --allow-loopback-endpoints); the shared client refuses loopback; a client
// built otherwise (a test's) dials as its transport does.
func WithHTTPClient(c *http.Client) Option {
	return func(cfg *config) {
		if c != nil {
			cfg.client = c
		}
	}
}

// WithLogger sets the logger for provider failures (status, error type and code,
// request id — never a message, body or credential) of attempts whose context carries
// none; the engine's attempts carry their own (logr.NewContext). The zero Logger
// discards.
func WithLogger(l logr.Logger) Option {
	return func(cfg *config) { cfg.log = l }
}

// Factory builds the adapter for a deployment of either provider with the default HTTP
// client; it is what Register installs when given no options.
func Factory(d *routing.Deployment) (engine.Adapter, error) { return New(d) }

var _ engine.Factory = Factory

// NewFactory returns an engine.Factory building adapters with opts (a logger, or a test
// client).
func NewFactory(opts ...Option) engine.Factory { return providerhttp.Factory(New, opts...) }

// Counting is how OpenAI, Azure OpenAI and the compatible servers count the tokens the
// adapter reports (README.md, "Usage"): prompt_tokens includes the cached tokens of
// prompt_tokens_details.cached_tokens, and completion_tokens the reasoning tokens of
// completion_tokens_details.reasoning_tokens; the adapter reports both totals as given.
var Counting = pricing.Counting{InputIncludesCache: true, OutputIncludesReasoning: true}

// Register adds the adapter for ProviderOpenAI, ProviderCompatible and ProviderAzure,
// built with opts, to m (engine.Config.Providers), with CanEncode as its routing-time
// check and Counting.
func Register(m map[string]engine.Provider, opts ...Option) {
	providerhttp.Register(m, engine.Provider{New: NewFactory(opts...), CanEncode: CanEncode, Operation: "chat", Counting: Counting},
		ProviderOpenAI, ProviderCompatible, ProviderAzure)
}

var _ engine.Adapter = (*adapter)(nil)

// adapter is the engine.Adapter of one deployment. It is built per attempt (so a rotated
// credential takes effect at the next attempt) and keeps only what the call needs.
type adapter struct {
	provider string
	model    string
	url      string // {endpoint}/chat/completions, query kept
	// cred is revealed only for the credential header and to scrub echoes.
	cred routing.Credential
	// d is the deployment the adapter was built for: its capabilities and output cap
	// decide what a request may send.
	d      *routing.Deployment
	stream bool
	client *http.Client
	log    logr.Logger
}

// String and GoString describe the adapter by provider and model (the credential is a
// routing.Credential, which never prints its value).
func (a *adapter) String() string   { return "openai adapter (" + a.provider + " " + a.model + ")" }
func (a *adapter) GoString() string { return a.String() }

// New returns the adapter for d. It fails with provider_rejected (the deployment's
// configuration is unusable, an operator problem) when the provider is not one this
// package serves, the endpoint is missing or not an http(s) URL, or ProviderOpenAI has
// no credential. Error messages never contain the endpoint or the credential.
func New(d *routing.Deployment, opts ...Option) (engine.Adapter, error) {
	cfg := config{log: logr.Discard()}
	for _, o := range opts {
		o(&cfg)
	}
	if d == nil || (d.Provider != ProviderOpenAI && d.Provider != ProviderCompatible && d.Provider != ProviderAzure) {
		return nil, protocol.NewError(protocol.CodeProviderRejected, "the deployment's provider is not served by the openai adapter")
	}
	endpoint := d.Endpoint
	if endpoint == "" {
		if d.Provider != ProviderOpenAI {
			return nil, protocol.NewError(protocol.CodeProviderRejected, "the "+d.Provider+" deployment has no endpoint")
		}
		endpoint = DefaultEndpoint
	}
	u, ok := completionsURL(endpoint, d.Provider == ProviderAzure)
	if !ok {
		return nil, protocol.NewError(protocol.CodeProviderRejected, "the deployment's endpoint is not a valid http or https URL")
	}
	if d.Model == "" {
		return nil, protocol.NewError(protocol.CodeProviderRejected, "the deployment has no model")
	}
	a := &adapter{
		provider: d.Provider,
		model:    d.Model,
		url:      u,
		d:        d,
		stream:   d.Capabilities.Has(routing.CapsOf(protocol.CapStreaming)),
		client:   providerhttp.Client(cfg.client),
		log:      cfg.log.WithValues("provider", d.Provider, "deployment", d.RefString()),
	}
	if !d.Credential.IsSet() && d.Provider != ProviderCompatible {
		return nil, protocol.NewError(protocol.CodeProviderRejected, "the "+d.Provider+" deployment has no credential")
	}
	if !providerhttp.HeaderSafe(d.Credential.Reveal()) {
		// Caught here rather than by net/http at send time, where it would look like a
		// provider outage and be retried.
		return nil, protocol.NewError(protocol.CodeProviderRejected, "the deployment's credential is not a valid header value")
	}
	a.cred = d.Credential
	return a, nil
}

// completionsURL appends /chat/completions to the endpoint's path, keeping its query (as
// gateways in front of Azure's older API carry an api-version there). On Azure the v1
// API's base path comes first, unless the endpoint names it already.
func completionsURL(endpoint string, azure bool) (string, bool) {
	u, ok := providerhttp.BaseURL(endpoint, "")
	if !ok {
		return "", false
	}
	if azure && !strings.HasSuffix(u.Path, azurePath) {
		u = u.JoinPath(azurePath)
	}
	return u.JoinPath("chat", "completions").String(), true
}

// Execute implements engine.Adapter: one Chat Completions call, streamed when the
// deployment declares streaming. A request it refuses (CanEncode's refusals) is
// returned as an engine.NotSent error before anything is sent.
func (a *adapter) Execute(ctx context.Context, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	if at.Request == nil {
		return engine.Outcome{}, engine.NotSent(errMissing.Clone())
	}
	// The adapter is built per attempt, so it takes the attempt's logger.
	a.log = providerhttp.Logger(ctx, a.log)
	body, perr := buildRequest(at.Request, a.d, a.stream)
	if perr != nil {
		return engine.Outcome{}, engine.NotSent(perr)
	}
	payload, err := providerhttp.Marshal(body)
	if err != nil {
		return engine.Outcome{}, err
	}
	header := http.Header{}
	if a.stream {
		header.Set("Accept", "text/event-stream")
	} else {
		header.Set("Accept", "application/json")
	}
	switch {
	case !a.cred.IsSet():
	case a.provider == ProviderAzure:
		header.Set("api-key", a.cred.Reveal())
	default:
		header.Set("Authorization", "Bearer "+a.cred.Reveal())
	}
	r := &reader{Events: providerhttp.NewEvents(emit), a: a, ctx: ctx}
	return providerhttp.Do(ctx, providerhttp.Call{
		Provider: a.provider, Client: a.client, Log: a.log,
		URL: a.url, Body: payload, Header: header, Failure: r.httpFailure,
	}, r.read)
}

// read reads a successful response: an event stream when streaming, else — or when a
// compatible server ignored stream:true and answered with one JSON completion, the same
// data — a whole completion.
func (r *reader) read(resp *http.Response) (engine.Outcome, error) {
	r.answered(resp.Header)
	if r.a.stream && !providerhttp.IsJSON(resp.Header) {
		return r.readStream(resp.Body)
	}
	return r.readCompletion(resp.Body)
}

// fail logs a provider failure by its identifiers only and returns it.
func (a *adapter) fail(e *protocol.Error) *protocol.Error {
	kv := []any{"code", e.Code, "retryable", e.Retryable}
	if pe := e.ProviderError; pe != nil {
		kv = append(kv, "httpStatus", pe.HTTPStatus, "providerType", pe.Type, "providerCode", pe.Code, "requestID", pe.RequestID)
	}
	a.log.V(1).Info("Provider call failed", kv...)
	return e
}

// safeID keeps a provider-supplied identifier (request id, error type or code, finish
// reason, model) only when it is short, made of identifier characters, and does not
// contain the credential — a provider or proxy that echoes the credential back must not
// get it into provider_error, an event or a log line.
func (a *adapter) safeID(s string) string {
	return providerhttp.Identifier(s, a.cred.Reveal())
}

// toolCall screens a tool call's id and function name alike (providerhttp.Identifier,
// providerhttp.ToolName): ok is false when either is not one or holds the credential,
// and the answer is then unreadable — a call reported under another id could not be
// answered.
func (a *adapter) toolCall(id, name string) (string, string, bool) {
	id, name = a.safeID(id), providerhttp.ToolName(name, a.cred.Reveal())
	return id, name, id != "" && name != ""
}
