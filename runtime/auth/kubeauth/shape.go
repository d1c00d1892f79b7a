package kubeauth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// The shape check refuses, without a TokenReview, a token the API server is certain to
// refuse for the runtime's audiences (spec/authentication.md, "Floods of bad tokens").
const (
	// maxTokenBytes is the longest token worth decoding. ServiceAccount tokens are about
	// a kilobyte; OIDC tokens with many groups a few.
	maxTokenBytes = 32 << 10
	// expiryLeeway is how long after its exp a token still passes: the leeway of the
	// API server's own ServiceAccount token validator (a minute), so that a clock that
	// runs a little ahead of the API server's refuses nothing the review would accept.
	expiryLeeway = time.Minute
)

// plausible reports whether token is shaped like a token the API server could accept
// for one of audiences: a JWT (three base64url segments, a JSON object header with an
// algorithm and a JSON object payload) whose aud claim, a string or a list, names one of
// audiences, and whose exp claim has not passed more than expiryLeeway before now.
//
// It reads the claims without verifying anything: not the signature, not the issuer,
// not whether the claims are true. That stays the TokenReview's job; a forged token of
// the right shape is reviewed and refused there. The check only spares the API server
// the reviews whose answer is certain, those of garbage and of tokens minted for
// another audience or expired.
func plausible(token string, audiences []string, now time.Time) bool {
	if len(token) > maxTokenBytes {
		return false
	}
	header, rest, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	payload, signature, ok := strings.Cut(rest, ".")
	if !ok || signature == "" || strings.Contains(signature, ".") {
		return false
	}
	if _, err := base64.RawURLEncoding.DecodeString(signature); err != nil {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if !decodeSegment(header, &h) || h.Alg == "" || strings.EqualFold(h.Alg, "none") {
		return false
	}
	var claims struct {
		Aud audienceClaim `json:"aud"`
		Exp *float64      `json:"exp"`
	}
	if !decodeSegment(payload, &claims) || claims.Exp == nil {
		return false
	}
	// Seconds since the epoch, possibly fractional (RFC 7519 section 2, NumericDate).
	if *claims.Exp+expiryLeeway.Seconds() <= float64(now.Unix()) {
		return false
	}
	return slices.ContainsFunc(claims.Aud, func(a string) bool { return slices.Contains(audiences, a) })
}

// decodeSegment decodes a base64url JWT segment holding a JSON object into v.
func decodeSegment(segment string, v any) bool {
	raw, err := base64.RawURLEncoding.DecodeString(segment)
	if err != nil {
		return false
	}
	// Only an object: null or another value would decode into v without an error.
	if trimmed := bytes.TrimLeft(raw, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return false
	}
	return json.Unmarshal(raw, v) == nil
}

// audienceClaim is a JWT's aud: one string or a list of them (RFC 7519 section 4.1.3).
type audienceClaim []string

func (a *audienceClaim) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*a = audienceClaim{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return err
	}
	*a = list
	return nil
}
