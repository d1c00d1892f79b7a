package bedrock_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// An implementation of SigV4 verification written from the documented algorithm (IAM
// User Guide, "Create a signed AWS API request"), independent of the SDK's signer: the
// fake upstreams recompute the signature of every request they receive from the bytes
// on the wire. TestSigV4VerifierDocumentedVector checks this implementation against the
// documented get-vanilla example before anything relies on it.

// sigv4Expect is what a verified request must be signed for.
type sigv4Expect struct {
	accessKeyID, secretAccessKey string
	sessionToken                 string // "" when no X-Amz-Security-Token may be sent
	region, service              string
	at                           time.Time // the signing time; zero skips the check
	// signed are the headers that must be among the signed ones (besides
	// x-amz-security-token whenever a session token is expected).
	signed []string
}

// sigv4Auth is a parsed Authorization header.
type sigv4Auth struct {
	credential, signedHeaders, signature string
}

const sigv4Algorithm = "AWS4-HMAC-SHA256"

func parseSigV4Auth(h string) (sigv4Auth, error) {
	rest, ok := strings.CutPrefix(h, sigv4Algorithm+" ")
	if !ok {
		return sigv4Auth{}, errors.New("authorization is not AWS4-HMAC-SHA256")
	}
	var a sigv4Auth
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return sigv4Auth{}, fmt.Errorf("authorization component %q", part)
		}
		switch k {
		case "Credential":
			a.credential = v
		case "SignedHeaders":
			a.signedHeaders = v
		case "Signature":
			a.signature = v
		}
	}
	if a.credential == "" || a.signedHeaders == "" || a.signature == "" {
		return sigv4Auth{}, errors.New("authorization lacks Credential, SignedHeaders or Signature")
	}
	return a, nil
}

// verifySigV4 recomputes the signature of r (as a server received it, with body) and
// checks it against the Authorization header, the credential scope against want, the
// headers that must be signed, and the session token.
func verifySigV4(r *http.Request, body []byte, want sigv4Expect) error {
	auth, err := parseSigV4Auth(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	amzDate := r.Header.Get("X-Amz-Date")
	t, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return fmt.Errorf("x-amz-date %q", amzDate)
	}
	if !want.at.IsZero() && !t.Equal(want.at.UTC().Truncate(time.Second)) {
		return fmt.Errorf("x-amz-date %s, want %s", t, want.at.UTC())
	}
	date := t.Format("20060102")
	scope := date + "/" + want.region + "/" + want.service + "/aws4_request"
	if auth.credential != want.accessKeyID+"/"+scope {
		return fmt.Errorf("credential %q, want %q", auth.credential, want.accessKeyID+"/"+scope)
	}
	if got := r.Header.Get("X-Amz-Security-Token"); got != want.sessionToken {
		return errors.New("x-amz-security-token is not the session token")
	}

	signed := strings.Split(auth.signedHeaders, ";")
	if !sort.StringsAreSorted(signed) {
		return errors.New("signed headers are not sorted")
	}
	required := want.signed
	if want.sessionToken != "" {
		required = append(required, "x-amz-security-token")
	}
	for _, h := range required {
		if !slices.Contains(signed, h) {
			return fmt.Errorf("header %s is not signed", h)
		}
	}
	var headers []string
	for _, name := range signed {
		var value string
		if name == "host" {
			value = r.Host
		} else {
			vals := r.Header.Values(name)
			if len(vals) == 0 {
				return fmt.Errorf("signed header %s is absent", name)
			}
			for i, v := range vals {
				vals[i] = collapseSpaces(v)
			}
			value = strings.Join(vals, ",")
		}
		headers = append(headers, name+":"+value)
	}
	path, query, _ := strings.Cut(r.RequestURI, "?")
	canonical := canonicalRequest(r.Method, path, query, headers, auth.signedHeaders, hexSHA256(body))
	sig := sigv4Signature(want.secretAccessKey, date, want.region, want.service, stringToSign(amzDate, scope, canonical))
	if !hmac.Equal([]byte(sig), []byte(auth.signature)) {
		return errors.New("signature does not match")
	}
	return nil
}

// canonicalRequest is the documented canonical request. wirePath is the path exactly as
// sent (already URI-encoded once); services other than S3 encode it once more, so each
// segment is URI-encoded twice in total. headers are "name:value" in signed order.
func canonicalRequest(method, wirePath, rawQuery string, headers []string, signedHeaders, payloadHash string) string {
	if wirePath == "" {
		wirePath = "/"
	}
	return strings.Join([]string{
		method,
		uriEncode(wirePath, false),
		canonicalQuery(rawQuery),
		strings.Join(headers, "\n") + "\n",
		signedHeaders,
		payloadHash,
	}, "\n")
}

// canonicalQuery encodes each name and value, then sorts by name and value.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	var pairs []string
	for _, kv := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(kv, "=")
		k, _ = url.QueryUnescape(k)
		v, _ = url.QueryUnescape(v)
		pairs = append(pairs, uriEncode(k, true)+"="+uriEncode(v, true))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// uriEncode encodes every byte except the unreserved characters (and '/' unless
// encodeSlash), with upper-case hex, as the documentation defines URI encoding.
func uriEncode(s string, encodeSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') ||
			c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && !encodeSlash) {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// collapseSpaces trims a header value and replaces runs of spaces with one.
func collapseSpaces(v string) string { return strings.Join(strings.Fields(v), " ") }

func stringToSign(amzDate, scope, canonical string) string {
	return strings.Join([]string{sigv4Algorithm, amzDate, scope, hexSHA256([]byte(canonical))}, "\n")
}

// sigv4Signature derives the signing key (date, region, service, "aws4_request") and
// signs the string to sign with it.
func sigv4Signature(secret, date, region, service, toSign string) string {
	key := hmacSHA256([]byte("AWS4"+secret), date)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, service)
	key = hmacSHA256(key, "aws4_request")
	return hex.EncodeToString(hmacSHA256(key, toSign))
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
