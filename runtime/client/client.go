package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// maxErrorBody bounds how much of an error response is read: error bodies are small, and
// a misbehaving proxy must not make the client buffer an arbitrary page.
const maxErrorBody = 64 << 10

// Client calls one Switchboard runtime. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[/prefix], without a trailing slash
	hc        *http.Client
	userAgent string
	backoff   Backoff
	token     tokenSource // nil: no Authorization header
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client used for every call (default http.DefaultClient).
// Do not give it a Timeout when reading event streams: a timeout covers the whole
// response body, so it would cut long streams; bound calls with their context instead.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// WithBackoff sets how Follow and FollowResult wait before reconnecting (default
// DefaultBackoff).
func WithBackoff(b Backoff) Option {
	return func(c *Client) { c.backoff = b }
}

// New returns a client for the runtime at baseURL, an absolute http or https URL such as
// "http://switchboard.ai.svc:8080". A path in baseURL is kept as a prefix of the API paths,
// for runtimes served behind a path-routing proxy.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: parse base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("client: base URL must be an absolute http or https URL")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("client: base URL must not have a query or fragment")
	}
	c := &Client{base: strings.TrimSuffix(u.String(), "/"), hc: http.DefaultClient, userAgent: "switchboard-go-client", backoff: DefaultBackoff}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// Links are the paths of an execution's resources, relative to the runtime's root. When
// the runtime authenticates its callers, Events and Result carry a signed read token
// (?token=…) for clients that cannot send an Authorization header, such as a browser's
// EventSource (spec/authentication.md): treat them as credentials, and do not log them.
type Links struct {
	Self   string `json:"self"`
	Events string `json:"events"`
	Result string `json:"result"`
	Cancel string `json:"cancel"`
}

// Accepted is the answer to a submitted execution (202 Accepted).
type Accepted struct {
	// ID is the execution id (exe_…).
	ID string `json:"id"`
	// Status is "accepted" as of creation; read the current one with Get.
	Status protocol.Status `json:"status"`
	// CreatedAt is when the execution was accepted.
	CreatedAt time.Time `json:"created_at"`
	// Links are the execution's resources.
	Links Links `json:"links"`
	// Replayed reports that the server answered an earlier request with the same
	// idempotency key and body: the execution is the one that request created.
	Replayed bool `json:"-"`
}

// SubmitOption configures one Submit call.
type SubmitOption func(*submitConfig)

type submitConfig struct {
	idempotencyKey string
}

// WithIdempotencyKey sends key as the Idempotency-Key header: 1 to 255 visible ASCII
// characters. Submitting the same body with the same key again (for example after a
// timeout) answers with the execution the first submission created instead of creating
// another; a different body with the same key fails with idempotency_key_reused.
func WithIdempotencyKey(key string) SubmitOption {
	return func(c *submitConfig) { c.idempotencyKey = key }
}

// Submit creates an execution of req.
func (c *Client) Submit(ctx context.Context, req *protocol.Request, opts ...SubmitOption) (*Accepted, error) {
	var sc submitConfig
	for _, opt := range opts {
		opt(&sc)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: encode request: %w", err)
	}
	hreq, err := c.newRequest(ctx, http.MethodPost, "/v1/executions", body)
	if err != nil {
		return nil, err
	}
	if sc.idempotencyKey != "" {
		hreq.Header.Set("Idempotency-Key", sfString(sc.idempotencyKey))
	}
	var acc Accepted
	resp, err := c.doJSON(hreq, &acc, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	acc.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return &acc, nil
}

// sfString writes key as an RFC 8941 string ("…" with \" and \\ escaped). The server
// accepts the raw form too, but a raw key starting with a quote would be read as the
// quoted form, so the quoted form is the one that always round-trips.
func sfString(key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// Get returns the execution's status.
func (c *Client) Get(ctx context.Context, id string) (*protocol.ExecutionStatus, error) {
	hreq, err := c.newRequest(ctx, http.MethodGet, executionPath(id), nil)
	if err != nil {
		return nil, err
	}
	var st protocol.ExecutionStatus
	if _, err := c.doJSON(hreq, &st, http.StatusOK); err != nil {
		return nil, err
	}
	return &st, nil
}

// Result returns the server's materialized snapshot of the execution: partial while it
// runs (its Sequence says how far), final once it is terminal.
func (c *Client) Result(ctx context.Context, id string) (*protocol.Snapshot, error) {
	hreq, err := c.newRequest(ctx, http.MethodGet, executionPath(id)+"/result", nil)
	if err != nil {
		return nil, err
	}
	var s protocol.Snapshot
	if _, err := c.doJSON(hreq, &s, http.StatusOK); err != nil {
		return nil, err
	}
	return &s, nil
}

// Cancel asks the runtime to cancel the execution and returns its status. Cancelling a
// terminal execution is a no-op that returns its final status. Cancellation is
// asynchronous: the execution ends with execution.failed (code cancelled) shortly after.
func (c *Client) Cancel(ctx context.Context, id string) (*protocol.ExecutionStatus, error) {
	hreq, err := c.newRequest(ctx, http.MethodPost, executionPath(id)+"/cancel", nil)
	if err != nil {
		return nil, err
	}
	var st protocol.ExecutionStatus
	if _, err := c.doJSON(hreq, &st, http.StatusOK, http.StatusAccepted); err != nil {
		return nil, err
	}
	return &st, nil
}

// executionPath escapes id so that an id with a slash cannot address another resource.
func executionPath(id string) string {
	return "/v1/executions/" + url.PathEscape(id)
}

// newRequest builds a request for path, already escaped, under the base URL.
func (c *Client) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("client: build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if c.token != nil {
		tok, err := c.token.token()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}

// doJSON sends req and decodes a JSON body with one of the ok statuses into out. Any
// other status becomes an *Error.
func (c *Client) doJSON(req *http.Request, out any, ok ...int) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	for _, code := range ok {
		if resp.StatusCode == code {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				return nil, fmt.Errorf("client: decode %s response: %w", req.URL.Path, err)
			}
			return resp, nil
		}
	}
	return nil, readError(resp)
}
