package bedrock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/smithy-go/encoding/httpbinding"
	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const (
	// Provider is the provider name this adapter serves (ModelDeployment spec.provider).
	Provider = "bedrock"
	// SigningName is the service name of the SigV4 credential scope of Bedrock Runtime
	// calls (the scope names "bedrock", not the "bedrock-runtime" host prefix).
	SigningName = "bedrock"
	// ContentTypeEventStream is the media type of a ConverseStream answer.
	ContentTypeEventStream = "application/vnd.amazon.eventstream"
)

// DefaultEndpoint is the base URL used when the deployment sets none: the regional
// Bedrock Runtime endpoint of the deployment's region.
func DefaultEndpoint(region string) string {
	return "https://bedrock-runtime." + region + ".amazonaws.com"
}

// Operation paths below {endpoint}/model/{modelId}/.
const (
	opConverse       = "converse"
	opConverseStream = "converse-stream"
)

// regionRE is the grammar ModelDeployment spec.region enforces; the region becomes part
// of the default host name and of the signature's credential scope, so New checks it
// again rather than trusting every caller went through the API server.
var regionRE = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// maxRegionLength is spec.region's bound.
const maxRegionLength = 64

// Option configures an adapter built by New.
type Option func(*options)

type options struct {
	client *http.Client
	log    logr.Logger
	clock  func() time.Time
}

// WithHTTPClient makes the adapter send its requests with c instead of the shared
// provider client (providerhttp.Client). The adapter never follows redirects, whatever
// c's CheckRedirect says: a redirect would carry the Authorization header (a bearer API
// key) to another location.
// The endpoint fence is the client's dialer's: the binary passes providerhttp.NewClient
// (loopback per --allow-loopback-endpoints); the shared client refuses loopback; a client
// built otherwise (a test's) dials as its transport does.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.client = c }
}

// WithLogger makes the adapter log to l when the attempt's context carries no logger
// (the engine's attempts carry their own). The zero Logger discards.
func WithLogger(l logr.Logger) Option {
	return func(o *options) { o.log = l }
}

// WithClock makes the adapter read the time from now: the SigV4 signing time and the
// instant an access key's Expiration is compared with. Tests use it to sign with a fixed
// time; the default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.clock = now }
}

// adapter runs attempts against one deployment. It holds only constructor inputs and is
// safe for concurrent use. Its credential's parts are routing.Credential values, which
// never print; Format (below) writes a short fixed text for every verb as well.
type adapter struct {
	base   *url.URL // the endpoint, path without trailing slash
	model  string
	region string
	cred   credential
	// d is the deployment the adapter was built for: its capabilities and output cap
	// decide what a request may send.
	d      *routing.Deployment
	client *http.Client
	log    logr.Logger
	clock  func() time.Time
}

var (
	_ engine.Adapter = (*adapter)(nil)
	_ fmt.Formatter  = (*adapter)(nil)
)

// Format prints the model and the credential's form only, whatever the verb (%v, %+v,
// %#v, %s, %d, …): the adapter holds a secret access key or an API key.
func (a *adapter) Format(f fmt.State, _ rune) {
	_, _ = io.WriteString(f, "bedrock.adapter{model: "+a.model+", credential: "+a.cred.kind()+"}")
}

// String implements fmt.Stringer with the same redacted text as Format.
func (a *adapter) String() string { return fmt.Sprint(a) }

// GoString implements fmt.GoStringer with the same redacted text as Format.
func (a *adapter) GoString() string { return fmt.Sprint(a) }

// Factory builds the adapter for a deployment with the default options; Register
// installs it.
func Factory(d *routing.Deployment) (engine.Adapter, error) { return New(d) }

var _ engine.Factory = Factory

// Counting is how Converse counts the tokens the adapter reports (README.md, "Usage"):
// inputTokens excludes the cached tokens, which cacheReadInputTokens and
// cacheWriteInputTokens report apart; outputTokens includes any reasoning tokens, which
// Converse does not report apart (so none are taken out).
var Counting = pricing.Counting{InputIncludesCache: false, OutputIncludesReasoning: true}

// Register adds the adapter for Provider, built with opts, to m
// (engine.Config.Providers), with CanEncode as its routing-time check and Counting.
func Register(m map[string]engine.Provider, opts ...Option) {
	providerhttp.Register(m, engine.Provider{New: providerhttp.Factory(New, opts...), CanEncode: CanEncode, Operation: "chat",
		Counting: Counting}, Provider)
}

// New returns the adapter for d. It fails with provider_rejected, a fixed message and
// nothing sent, when d cannot be served: another provider, no model, no or an invalid
// region, no credential, a credential that is neither a header-safe API key nor AWS
// access keys JSON with AccessKeyId and SecretAccessKey (or whose Expiration has
// passed), or an endpoint that is not an absolute http(s) URL.
func New(d *routing.Deployment, opts ...Option) (engine.Adapter, error) {
	o := options{clock: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if o.clock == nil {
		o.clock = time.Now
	}
	if d == nil || d.Provider != Provider {
		return nil, rejected("the deployment is not a bedrock deployment")
	}
	if d.Model == "" {
		return nil, rejected("the deployment has no model")
	}
	if d.Region == "" {
		return nil, rejected("the deployment has no region")
	}
	if len(d.Region) > maxRegionLength || !regionRE.MatchString(d.Region) {
		return nil, rejected("the deployment's region is not a region name")
	}
	if !d.Credential.IsSet() {
		return nil, rejected("the deployment has no credential")
	}
	base, ok := providerhttp.BaseURL(d.Endpoint, DefaultEndpoint(d.Region))
	if !ok {
		return nil, rejected("the deployment's endpoint is not an absolute http(s) URL")
	}
	cred, perr := parseCredential(d.Credential.Reveal(), o.clock())
	if perr != nil {
		return nil, perr
	}
	return &adapter{base: base, model: d.Model, region: d.Region, cred: cred, d: d,
		client: providerhttp.Client(o.client), log: o.log, clock: o.clock}, nil
}

// rejected is a configuration error: the engine records it as provider_rejected.
func rejected(msg string) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderRejected, msg)
	e.ProviderError = &protocol.ProviderError{Provider: Provider}
	return e
}

// target is the URL of op for the deployment's model. The model id is one path label,
// escaped as the AWS SDK escapes labels (every byte but the RFC 3986 unreserved ones, so
// the ':' and '/' of an ARN or inference profile id become %3A and %2F); RawPath keeps
// that escaping on the wire, and the signer signs the same escaped path.
func (a *adapter) target(op string) string {
	u := *a.base
	u.Path = a.base.Path + "/model/" + a.model + "/" + op
	u.RawPath = a.base.EscapedPath() + "/model/" + httpbinding.EscapePath(a.model, true) + "/" + op
	return u.String()
}

// Execute implements engine.Adapter: one Converse call, or one ConverseStream call when
// the deployment declares streaming. A request it refuses (CanEncode's refusals) is
// returned as an engine.NotSent error before anything is sent.
func (a *adapter) Execute(ctx context.Context, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	log := providerhttp.Logger(ctx, a.log)
	if at.Request == nil {
		return engine.Outcome{}, engine.NotSent(invalid(msgMissing))
	}
	stream := a.d.Capabilities.Has(routing.CapsOf(protocol.CapStreaming))
	body, perr := buildRequest(at.Request, a.d)
	if perr != nil {
		return engine.Outcome{}, engine.NotSent(perr)
	}
	payload, err := providerhttp.Marshal(body)
	if err != nil {
		return engine.Outcome{}, err
	}
	op, accept := opConverse, "application/json"
	if stream {
		op, accept = opConverseStream, ContentTypeEventStream
	}
	r := &reader{Events: providerhttp.NewEvents(emit), log: log, secrets: a.cred.parts()}
	return providerhttp.Do(ctx, providerhttp.Call{
		Provider: Provider, Client: a.client, Log: log,
		URL: a.target(op), Body: payload, Header: http.Header{"Accept": {accept}},
		// SigV4 signs every header present (traceparent included), so the credential
		// goes on last.
		Sign:    func(req *http.Request) error { return a.authenticate(ctx, req, payload) },
		Failure: r.httpFailure,
	}, func(resp *http.Response) (engine.Outcome, error) {
		r.requestID = r.clean(resp.Header.Get(headerRequestID))
		if stream {
			return r.readStream(ctx, resp.Body, func() { _ = resp.Body.Close() })
		}
		return r.readMessage(ctx, resp.Body)
	})
}

// authenticate puts the credential on req: a Bedrock API key as a bearer token, or a
// SigV4 signature of the request made with the access keys (the secret access key never
// leaves the process; a session token travels in X-Amz-Security-Token, as the signer
// places it). The payload hash is the hex SHA-256 of the exact body sent.
func (a *adapter) authenticate(ctx context.Context, req *http.Request, payload []byte) error {
	if a.cred.apiKey.IsSet() {
		req.Header.Set("Authorization", "Bearer "+a.cred.apiKey.Reveal())
		return nil
	}
	sum := sha256.Sum256(payload)
	creds := aws.Credentials{
		AccessKeyID:     a.cred.accessKeyID.Reveal(),
		SecretAccessKey: a.cred.secretAccessKey.Reveal(),
		SessionToken:    a.cred.sessionToken.Reveal(),
		Source:          Provider,
	}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigningName, a.region, a.clock()); err != nil {
		// The signer fails only on a request it cannot canonicalize, which New's checks
		// rule out; its text is not kept, as it could name the request's URL.
		return errors.New("sign provider request: the signer refused the request")
	}
	return nil
}
