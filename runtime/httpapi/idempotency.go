package httpapi

import (
	"net/http"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// maxKeyLength bounds an idempotency key (spec/http-api.md, "Idempotency").
const maxKeyLength = 255

// idempotency returns the idempotency of a submission by p with body: none without an
// Idempotency-Key; otherwise the key, in the caller's scope — the principal's when
// authentication is on, else the runtime's — with body's fingerprint.
func (s *server) idempotency(h http.Header, p *auth.Principal, body []byte) (engine.Idempotency, error) {
	key, ok, err := idempotencyKey(h)
	if err != nil || !ok {
		return engine.Idempotency{}, err
	}
	fingerprint, err := protocol.Fingerprint(body)
	if err != nil {
		return engine.Idempotency{}, err
	}
	scope := engine.RuntimeScope
	if s.auth != nil {
		scope = engine.Principal{Name: p.Name, UID: p.UID}.IdempotencyScope()
	}
	return engine.Idempotency{Scope: scope, Key: key, Fingerprint: fingerprint}, nil
}

// idempotencyKey returns the request's Idempotency-Key and whether there is one. The
// header is either the raw key (abc) or an RFC 8941 sf-string ("abc", with \" and \\ as
// the only escapes); both denote the same key. The key is 1 to 255 visible ASCII
// characters (0x21–0x7E). More than one header, an sf-string with parameters or anything
// after its closing quote, and any other value are rejected.
func idempotencyKey(h http.Header) (key string, ok bool, err error) {
	values := h.Values("Idempotency-Key")
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, errKeyInvalid
	}
	// RFC 8941 parsing discards surrounding spaces; net/http already trims most.
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		if v, ok = parseSFString(v); !ok {
			return "", false, errKeyInvalid
		}
	}
	if len(v) < 1 || len(v) > maxKeyLength {
		return "", false, errKeyInvalid
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", false, errKeyInvalid
		}
	}
	return v, true, nil
}

// parseSFString parses an RFC 8941 string that must make up all of v (v starts with a
// quote). Only \" and \\ are escapes; characters must be printable ASCII.
func parseSFString(v string) (string, bool) {
	// Fast path: no escapes, so the key is a substring and costs no allocation.
	if end := strings.IndexAny(v[1:], `"\`); end >= 0 && v[1+end] == '"' {
		if 1+end != len(v)-1 {
			return "", false
		}
		s := v[1 : 1+end]
		for i := 0; i < len(s); i++ {
			if s[i] < 0x20 || s[i] > 0x7e {
				return "", false
			}
		}
		return s, true
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", false
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), i == len(v)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}
