package auth

import (
	"net/http"
	"strings"
)

// BearerToken returns the credential of r's "Authorization: Bearer <token>" header
// (RFC 6750 section 2.1; the scheme is case-insensitive), and false when r has no such
// header, more than one Authorization header, another scheme, or a token that is empty or
// holds a character other than visible ASCII. Every mode reads credentials through it,
// so they all accept the same headers.
func BearerToken(r *http.Request) (string, bool) {
	values := r.Header.Values("Authorization")
	if len(values) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	if !visibleASCII(token) {
		return "", false
	}
	return token, true
}

// visibleASCII reports whether s is non-empty and holds only the characters 0x21–0x7E,
// those a bearer token may be made of.
func visibleASCII(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
