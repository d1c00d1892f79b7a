package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// DefaultStreamTokenTTL is how long a stream token is valid unless NewStreamTokens is given
// another lifetime (spec/authentication.md).
const DefaultStreamTokenTTL = 15 * time.Minute

// MinStreamTokenKeySize is the smallest key NewStreamTokens accepts, in bytes: the size of
// the HMAC-SHA256 output, and what GenerateKey returns.
const MinStreamTokenKeySize = 32

// A stream token, before base64url encoding (no padding), is
//
//	version (1 byte) | expiry (8 bytes, Unix seconds, big-endian) | principal | MAC (32 bytes)
//
// where MAC is HMAC-SHA256, under the key, of streamTokenDomain, the execution id (its
// length as 4 bytes big-endian, then its bytes) and every byte before the MAC. The
// execution id is not in the token: it is the one in the URL the token comes with, so a
// token for one execution does not verify for another. The domain string keeps these
// MACs apart from any other use of the same key.
const (
	streamTokenDomain  = "switchboard.dev/stream-token\x00"
	streamTokenVersion = 1
	streamTokenHeader  = 1 + 8
	streamTokenMinSize = streamTokenHeader + sha256.Size
	// maxStreamTokenLen bounds the encoded token Verify looks at; a principal name is at
	// most a few hundred bytes.
	maxStreamTokenLen = 2048
)

// The errors of Verify; their text is fixed and never holds the token.
var (
	errStreamTokenMalformed = fmt.Errorf("%w: malformed stream token", ErrUnauthenticated)
	errStreamTokenInvalid   = fmt.Errorf("%w: stream token not valid for this execution", ErrUnauthenticated)
	errStreamTokenExpired   = fmt.Errorf("%w: stream token expired", ErrUnauthenticated)
)

// streamTokenEncoding is strict: a token whose last character differs only in the bits
// that the encoding ignores would otherwise decode to the same bytes and verify.
var streamTokenEncoding = base64.RawURLEncoding.Strict()

// StreamTokens signs and verifies stream tokens (spec/authentication.md): short-lived
// credentials that let the bearer read one execution (its events and result) as the
// principal that created it, from a URL's ?token= parameter, since a browser's
// EventSource cannot send an Authorization header. A token is URL-safe (base64url without
// padding) and carries the principal and its expiry, authenticated by HMAC-SHA256 over
// them and the execution id. Every replica given the same key accepts the tokens of the
// others. A StreamTokens is safe for concurrent use.
type StreamTokens struct {
	key []byte
	ttl time.Duration
}

// NewStreamTokens returns a signer of stream tokens valid for ttl (DefaultStreamTokenTTL
// when ttl <= 0). key must hold at least MinStreamTokenKeySize bytes, for instance from
// GenerateKey; a shorter key is an error, whose text does not hold the key.
func NewStreamTokens(key []byte, ttl time.Duration) (*StreamTokens, error) {
	if len(key) < MinStreamTokenKeySize {
		return nil, fmt.Errorf("stream token key has %d bytes, want at least %d", len(key), MinStreamTokenKeySize)
	}
	if ttl <= 0 {
		ttl = DefaultStreamTokenTTL
	}
	return &StreamTokens{key: append([]byte(nil), key...), ttl: ttl}, nil
}

// GenerateKey returns a new random key for NewStreamTokens (MinStreamTokenKeySize bytes
// from crypto/rand).
func GenerateKey() []byte {
	key := make([]byte, MinStreamTokenKeySize)
	if _, err := rand.Read(key); err != nil {
		// crypto/rand.Read does not fail on supported platforms (it crashes the
		// program itself when the system's generator is unusable).
		panic(fmt.Sprintf("auth: read random key: %v", err))
	}
	return key
}

// Sign returns a token that lets its bearer read the execution executionID as principal,
// until now plus the lifetime (to the second).
func (s *StreamTokens) Sign(executionID, principal string, now time.Time) string {
	raw := make([]byte, streamTokenHeader, streamTokenMinSize+len(principal))
	raw[0] = streamTokenVersion
	binary.BigEndian.PutUint64(raw[1:], uint64(now.Add(s.ttl).Unix()))
	raw = append(raw, principal...)
	raw = append(raw, s.mac(executionID, raw)...)
	return streamTokenEncoding.EncodeToString(raw)
}

// Verify returns the principal of token if it is a token Sign returned for executionID
// (with the same key) and it has not expired at now. Otherwise it returns an error that
// wraps ErrUnauthenticated: malformed, not valid for this execution (signed for another,
// or altered), or expired. The MAC is compared in constant time and checked before the
// expiry is trusted.
func (s *StreamTokens) Verify(token, executionID string, now time.Time) (string, error) {
	if len(token) > maxStreamTokenLen || !base64URL(token) {
		return "", errStreamTokenMalformed
	}
	raw, err := streamTokenEncoding.DecodeString(token)
	if err != nil || len(raw) < streamTokenMinSize || raw[0] != streamTokenVersion {
		return "", errStreamTokenMalformed
	}
	body, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if !hmac.Equal(sum, s.mac(executionID, body)) {
		return "", errStreamTokenInvalid
	}
	if now.Unix() >= int64(binary.BigEndian.Uint64(body[1:streamTokenHeader])) {
		return "", errStreamTokenExpired
	}
	return string(body[streamTokenHeader:]), nil
}

// mac returns the MAC of body for executionID.
func (s *StreamTokens) mac(executionID string, body []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(streamTokenDomain))
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(executionID)))
	h.Write(n[:])
	h.Write([]byte(executionID))
	h.Write(body)
	return h.Sum(nil)
}

// base64URL reports whether s holds only characters of the base64url alphabet. The
// decoder alone would also skip line breaks, which a token never contains.
func base64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
