package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// maxResponseBytes bounds a prediction response read into memory. Outputs are file URLs
// or model text, far below it; a larger body is treated as unreadable.
const maxResponseBytes = 16 << 20

// maxDrainBytes bounds how much of a body that is not decoded is read (and discarded) so
// the connection can be reused. Error bodies (which providerhttp.Do reads as far) are
// never parsed or surfaced: their text may echo the request or the credential, and the
// status says all the mapping needs.
const maxDrainBytes = 64 << 10

// send makes one request to target, which must be the configured endpoint's origin, with
// the credential in the Authorization header (providerhttp.Do), and decodes a 2xx JSON
// body into out (unless out is nil). A non-2xx status is mapped by providerhttp.Failure,
// with 402 (Replicate's "insufficient credit") as quota_exhausted; a transport failure by
// providerhttp.TransportError. The header is returned for retry hints.
func (a *adapter) send(ctx context.Context, method, target string, body []byte, out any) (http.Header, *protocol.Error) {
	header := http.Header{}
	header.Set("Authorization", "Bearer "+a.token.Reveal())
	header.Set("Accept", "application/json")
	h, err := providerhttp.Do(ctx, providerhttp.Call{
		Provider: Provider, Client: a.client, Method: method, URL: target, Body: body, Header: header,
		Failure: func(resp *http.Response, _ []byte) *protocol.Error {
			return providerhttp.Failure{
				Provider:       Provider,
				Status:         resp.StatusCode,
				Header:         resp.Header,
				QuotaExhausted: resp.StatusCode == http.StatusPaymentRequired,
			}.Error()
		},
	}, func(resp *http.Response) (http.Header, error) {
		if out == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrainBytes))
			return resp.Header, nil
		}
		data, err := providerhttp.ReadBody(resp.Body, maxResponseBytes)
		switch {
		case errors.Is(err, providerhttp.ErrBodyTooLarge):
			return nil, unreadable()
		case err != nil:
			return nil, providerhttp.TransportError(ctx, Provider, err)
		case json.Unmarshal(data, out) != nil:
			return nil, unreadable()
		}
		return resp.Header, nil
	})
	var pe *protocol.Error
	switch {
	case err == nil:
		return h, nil
	case errors.As(err, &pe):
		return nil, pe
	}
	return nil, rejected("the provider URL cannot be requested") // it did not parse
}

// sameOrigin returns raw if it is an absolute URL on the configured endpoint's origin
// (scheme, host and port; default ports made explicit), the only place the credential
// may be sent. URLs with user info are refused too: they would add credentials of their
// own.
func (a *adapter) sameOrigin(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.User != nil || u.Host == "" {
		return "", false
	}
	if !strings.EqualFold(u.Scheme, a.origin.Scheme) || hostPort(u) != hostPort(a.origin) {
		return "", false
	}
	return raw, true
}

// hostPort is u's lower-case host with its port, the scheme's default when absent.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
		if strings.EqualFold(u.Scheme, "http") {
			port = "80"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// redacted replaces the credential wherever provider text would surface it.
const redacted = "[redacted]"

// redact removes the credential from provider text (a log line) before it is emitted.
// Replicate has no reason to echo the token; a hostile or broken upstream might.
func (a *adapter) redact(s string) string {
	token := a.token.Reveal()
	if token == "" || !strings.Contains(s, token) {
		return s
	}
	return strings.ReplaceAll(s, token, redacted)
}

// redactJSON returns the output unchanged unless one of its strings (keys included, after
// unescaping) holds the credential. Then every string is redacted and the value
// re-encoded: a hostile upstream cannot smuggle the token into output.result, escaped
// or not.
//
// A document that is not valid UTF-8 is re-encoded too: decoding replaces each invalid
// byte with U+FFFD, and events are stored and served as UTF-8 JSON text.
func (a *adapter) redactJSON(raw json.RawMessage) json.RawMessage {
	if (!a.token.IsSet() || !a.holdsToken(raw)) && utf8.Valid(raw) {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers exactly as given
	var v any
	if err := dec.Decode(&v); err != nil {
		return json.RawMessage(`null`)
	}
	b, err := json.Marshal(a.redactValue(v))
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// holdsToken reports whether any string token of raw contains the credential. The
// literal check is enough unless the document uses escapes, which could spell it out.
func (a *adapter) holdsToken(raw []byte) bool {
	token := a.token.Reveal()
	if bytes.Contains(raw, []byte(token)) {
		return true
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.Contains(s, token) {
			return true
		}
	}
}

func (a *adapter) redactValue(v any) any {
	switch t := v.(type) {
	case string:
		return a.redact(t)
	case []any:
		for i := range t {
			t[i] = a.redactValue(t[i])
		}
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[a.redact(k)] = a.redactValue(e)
		}
		return m
	}
	return v
}

// safeID returns a provider id for logs and provider_error only if it looks like one
// (short, identifier characters) and is not the credential in disguise.
func (a *adapter) safeID(id string) string { return providerhttp.Identifier(id, a.token.Reveal()) }
