// Package replicate is the adapter for Replicate's asynchronous predictions API
// (provider "replicate"). An attempt creates one prediction, polls it until it reaches a
// terminal status, reports its queue and run stages as execution.progress, and ends with
// one output.result holding the model's output as Replicate gave it plus every file URL
// in it as an artifact. When the attempt's context ends first, the prediction is
// cancelled remotely within Attempt.CleanupGrace — unless this replica is letting the
// execution go (engine.Detached): then the prediction is left running for the replica
// that takes the execution over.
//
// The adapter is an engine.Resumer: as soon as a prediction is created its handle (id,
// urls.get, urls.cancel) is recorded with Emitter.RemoteJob, and Resume follows the
// prediction from that handle on another replica (spec/events.md, "Ownership and
// orphans").
//
// The credential is sent only in the Authorization header, and only to the configured
// endpoint's origin: the absolute URLs a prediction names (urls.get, urls.cancel) are
// used only when they share the endpoint's scheme, host and port, so a hostile or
// misrouted response cannot make the adapter send the token elsewhere. See README.md for
// the input mapping, the extension keys read and the status and error mapping.
package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

const (
	// Provider is the provider name this adapter serves (ModelDeployment spec.provider).
	Provider = "replicate"
	// DefaultEndpoint is used when the deployment names no endpoint.
	DefaultEndpoint = "https://api.replicate.com"
	// DefaultPollInitial is the first wait between polls of a prediction.
	DefaultPollInitial = 250 * time.Millisecond
	// DefaultPollMax caps the wait between polls; each wait is 1.5 times the previous.
	DefaultPollMax = 5 * time.Second
	// UnitPredictTime is the usage unit reporting metrics.predict_time: the seconds of
	// compute Replicate bills the prediction for (queueing not included).
	UnitPredictTime = "replicate.predict_time_seconds"
)

// Factory builds the adapter for a deployment with the default options; Register
// installs it.
func Factory(d *routing.Deployment) (engine.Adapter, error) { return New(d) }

var (
	_ engine.Factory = Factory
	_ engine.Resumer = (*adapter)(nil) // what Factory and Register's New build
)

// Counting is how the adapter counts tokens (README.md, "Usage"): it reports none, only
// the prediction's seconds (UnitPredictTime), so neither count includes the other.
var Counting = pricing.Counting{}

// Register adds the adapter for Provider, built with opts, to m
// (engine.Config.Providers), with CanEncode as its routing-time check and Counting.
func Register(m map[string]engine.Provider, opts ...Option) {
	// A prediction runs a model on inputs of any kind: GenAI's generic operation.
	providerhttp.Register(m, engine.Provider{New: providerhttp.Factory(New, opts...), CanEncode: CanEncode, Operation: "generate_content",
		Counting: Counting}, Provider)
}

// Option configures an adapter built by New.
type Option func(*options)

type options struct {
	client      *http.Client
	pollInitial time.Duration
	pollMax     time.Duration
}

// WithHTTPClient sets the client used for every request (default: the shared provider
// client, providerhttp.Client). The adapter uses a copy that does not follow redirects,
// so a redirect can never carry the credential to another origin; the client's
// Transport and Timeout are kept.
// The endpoint fence is the client's dialer's: the binary passes providerhttp.NewClient
// (loopback per --allow-loopback-endpoints); the shared client refuses loopback; a client
// built otherwise (a test's) dials as its transport does.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) {
		if c != nil {
			o.client = c
		}
	}
}

// WithPollBackoff sets the first and the largest wait between polls (defaults
// DefaultPollInitial and DefaultPollMax). Non-positive values keep the default; maxWait
// is raised to initial when smaller.
func WithPollBackoff(initial, maxWait time.Duration) Option {
	return func(o *options) {
		if initial > 0 {
			o.pollInitial = initial
		}
		if maxWait > 0 {
			o.pollMax = maxWait
		}
	}
}

// adapter runs attempts against one Replicate deployment. It is immutable after New.
type adapter struct {
	origin  *url.URL // the endpoint's scheme and host; the only place the token goes
	base    string   // endpoint without a trailing slash
	owner   string
	name    string
	version string // pinned by the model id ("owner/name:version"), else empty
	token   routing.Credential
	// d is the deployment the adapter was built for: its capabilities, allowed
	// parameters (spec.allowedParameters) and output cap decide what a request may send.
	d        *routing.Deployment
	client   *http.Client
	pollInit time.Duration
	pollMax  time.Duration
}

// modelPart is the grammar of Replicate owner, model name and version segments. It is
// stricter than Replicate's own rules need, so the segments go into URL paths as they are.
var modelPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// New returns the adapter for d. d.Model is "owner/name" (an official model, run through
// POST /v1/models/{owner}/{name}/predictions) or "owner/name:version" (a pinned version,
// run through POST /v1/predictions). A deployment that cannot work — no credential, a
// malformed model id or endpoint — gives a provider_rejected *protocol.Error.
func New(d *routing.Deployment, opts ...Option) (engine.Adapter, error) {
	o := options{pollInitial: DefaultPollInitial, pollMax: DefaultPollMax}
	for _, opt := range opts {
		opt(&o)
	}
	o.pollMax = max(o.pollMax, o.pollInitial)
	if d == nil {
		return nil, rejected("the replicate deployment is missing")
	}
	if !d.Credential.IsSet() {
		return nil, rejected("the replicate deployment has no credential")
	}
	a := &adapter{
		token:    d.Credential,
		d:        d,
		pollInit: o.pollInitial,
		pollMax:  o.pollMax,
	}
	var err error
	if a.origin, a.base, err = parseEndpoint(d.Endpoint); err != nil {
		return nil, rejected("the replicate deployment's endpoint must be an absolute http(s) URL without query or credentials")
	}
	if a.owner, a.name, a.version, err = parseModel(d.Model); err != nil {
		return nil, rejected("the replicate deployment's model must be owner/name or owner/name:version")
	}
	a.client = providerhttp.Client(o.client)
	return a, nil
}

// parseEndpoint validates the endpoint (empty means DefaultEndpoint) and returns its
// origin and its text without a trailing slash, to which API paths are appended.
func parseEndpoint(endpoint string) (*url.URL, string, error) {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Opaque != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, "", errors.New("unsupported endpoint")
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host}, strings.TrimRight(u.String(), "/"), nil
}

// parseModel splits "owner/name" or "owner/name:version".
func parseModel(model string) (owner, name, version string, err error) {
	ref, version, pinned := strings.Cut(model, ":")
	owner, name, ok := strings.Cut(ref, "/")
	if !ok || !modelPart.MatchString(owner) || !modelPart.MatchString(name) ||
		(pinned && !modelPart.MatchString(version)) {
		return "", "", "", errors.New("malformed model id")
	}
	return owner, name, version, nil
}

// Execute implements engine.Adapter: it creates the prediction, then follows it to its
// end (see run). A request it refuses (CanEncode's refusals) is returned as an
// engine.NotSent error before anything is sent.
func (a *adapter) Execute(ctx context.Context, at engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
	target, body, perr := a.createRequest(at.Request)
	if perr != nil {
		return engine.Outcome{}, engine.NotSent(perr)
	}
	r := newRun(ctx, a, at, emit)
	return r.execute(ctx, target, body)
}

// Resume implements engine.Resumer: it follows the prediction named by handle (recorded
// by an Execute, possibly on another replica) exactly as Execute follows one it created.
// The first poll is made at once, and progress is emitted only from what it answers.
// When ctx has already ended the prediction is cancelled (see run.abandon). A handle
// this adapter did not record is refused with an internal error, nothing sent.
func (a *adapter) Resume(ctx context.Context, at engine.Attempt, handle json.RawMessage, emit engine.Emitter) (engine.Outcome, error) {
	r := newRun(ctx, a, at, emit)
	p, ok := a.parseHandle(handle)
	if !ok {
		r.log.Info("Cannot resume Replicate prediction: its recorded handle is malformed")
		return engine.Outcome{}, badHandle()
	}
	// The handle is recorded already: it is what this attempt resumes from.
	r.recorded = true
	if ctx.Err() != nil {
		return r.abandon(ctx, p, ended(ctx))
	}
	r.log.V(1).Info("Resuming Replicate prediction", "prediction", p.ID)
	return r.follow(ctx, p, 0)
}

// rejected is the error for a deployment this adapter cannot use.
func rejected(msg string) *protocol.Error {
	e := protocol.NewError(protocol.CodeProviderRejected, msg)
	e.ProviderError = &protocol.ProviderError{Provider: Provider}
	return e
}
