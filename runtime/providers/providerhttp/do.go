package providerhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// MaxErrorBody bounds what Do reads of a failed response's body: providers' error
// bodies are small JSON objects, and anything longer is not one.
const MaxErrorBody = 64 << 10

// Call is one request to a provider, as Do sends it.
type Call struct {
	// Provider names the provider in errors (provider_error.provider).
	Provider string
	// Client sends the request; nil is the shared client (see Client).
	Client *http.Client
	// Log receives a transport failure, by its network cause only.
	Log logr.Logger
	// Method is the request's method; empty is POST.
	Method string
	// URL is the request's URL, built from the deployment's checked endpoint.
	URL string
	// Body is the request's JSON body, sent with Content-Type application/json; nil
	// sends none.
	Body []byte
	// Header holds the request's other headers (Accept, the credential's), with keys as
	// http.Header.Set makes them.
	Header http.Header
	// Sign, when set, authenticates the request once every other header is set: SigV4
	// signs every header present, traceparent included. Its error ends the call.
	Sign func(*http.Request) error
	// Failure maps a response whose status is not 2xx to its portable error, from its
	// status, header and body (at most MaxErrorBody bytes of it, read as far as it
	// could be). Nil maps by the status and the retry headers alone.
	Failure func(resp *http.Response, body []byte) *protocol.Error
}

// Do sends c and hands a 2xx response to decode, whose result it returns; it closes the
// response's body once decode has returned. Every 2xx status is success, as HTTP has it
// (RFC 9110, section 15.3): each provider documents 200 for its calls, and Replicate
// 201 for a prediction it created. Any other status — a 3xx included, since redirects
// are never followed (Client) — is c.Failure's error.
//
// A request that cannot be built is a plain error, its cause kept without the URL: the
// adapter built the URL from an endpoint it checked, so it is a bug, which the engine
// records as internal and logs. A failure to send is TransportError, logged by its
// network cause — at V(1) once ctx has ended, since the engine then decides the outcome
// and a cancelled attempt's cut request is expected.
func Do[T any](ctx context.Context, c Call, decode func(*http.Response) (T, error)) (T, error) {
	var zero T
	method := c.Method
	if method == "" {
		method = http.MethodPost
	}
	var body io.Reader
	if c.Body != nil {
		body = bytes.NewReader(c.Body)
	}
	req, err := NewRequest(ctx, method, c.URL, body)
	if err != nil {
		return zero, fmt.Errorf("build provider request: %w", Cause(err))
	}
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	if c.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Sign != nil {
		if err := c.Sign(req); err != nil {
			return zero, err
		}
	}
	client := c.Client
	if client == nil {
		client = Client(nil)
	}
	resp, err := client.Do(req)
	if err != nil {
		log := c.Log
		if ctx.Err() != nil {
			log = log.V(1)
		}
		log.Info("Provider request failed", "error", Cause(err).Error())
		return zero, TransportError(ctx, c.Provider, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
		var pe *protocol.Error
		if c.Failure != nil {
			pe = c.Failure(resp, raw)
		}
		if pe == nil {
			pe = Failure{Provider: c.Provider, Status: resp.StatusCode, Header: resp.Header}.Error()
		}
		return zero, pe
	}
	return decode(resp)
}

// ErrBodyTooLarge is ReadBody's error for a body larger than its bound.
var ErrBodyTooLarge = errors.New("providerhttp: response body larger than its bound")

// ReadBody reads a whole response body of at most limit bytes: ErrBodyTooLarge for a
// larger one, so that a misbehaving endpoint cannot make an adapter buffer without
// limit, and the read error for one that broke off.
func ReadBody(body io.Reader, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, limit+1))
	switch {
	case err != nil:
		return nil, err
	case int64(len(raw)) > limit:
		return nil, ErrBodyTooLarge
	}
	return raw, nil
}

// ReadAnswer reads a whole (not streamed) answer of at most limit bytes, as ReadBody.
// An answer that broke off is TransportError once ctx has ended (the engine then decides
// the outcome), else a truncated answer (Truncated: nothing was emitted yet), logged to
// log by its cause; a larger one gives ErrBodyTooLarge, for the adapter to report as
// unreadable.
func ReadAnswer(ctx context.Context, provider string, log logr.Logger, body io.Reader, limit int64) ([]byte, error) {
	raw, err := ReadBody(body, limit)
	switch {
	case err == nil || errors.Is(err, ErrBodyTooLarge):
		return raw, err
	case ctx.Err() != nil:
		return nil, TransportError(ctx, provider, err)
	}
	log.Info("Provider response broke off", "error", Cause(err).Error())
	return nil, Truncated(provider, false)
}
