package bedrock

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// credential is the deployment's credential in one of its two forms: a Bedrock API key
// (apiKey set), or AWS access keys (accessKeyID and secretAccessKey set, sessionToken
// for temporary keys). Each part is a routing.Credential, so that printing the adapter
// never shows one.
type credential struct {
	apiKey routing.Credential

	accessKeyID     routing.Credential
	secretAccessKey routing.Credential
	sessionToken    routing.Credential
}

// kind names the form, for the adapter's redacted text.
func (c credential) kind() string {
	if c.apiKey.IsSet() {
		return "api key"
	}
	return "access keys"
}

// parts are the values no provider-supplied identifier may carry into an event, an error
// or a log line: the API key, or the access key id, the secret access key and the
// session token. The access key id travels in the clear, in every signature's credential
// scope, but an upstream echoing it into a finish reason or a tool call id would hand
// callers half of the deployment's keys.
func (c credential) parts() []string {
	var out []string
	for _, s := range []routing.Credential{c.apiKey, c.accessKeyID, c.secretAccessKey, c.sessionToken} {
		if s.IsSet() {
			out = append(out, s.Reveal())
		}
	}
	return out
}

// processCredentials is the JSON that `aws configure export-credentials --format process`
// prints (the credential_process format): Version 1, AccessKeyId, SecretAccessKey, and for
// temporary keys SessionToken and Expiration (RFC 3339). Other members (newer CLIs add
// AccountId) are ignored.
type processCredentials struct {
	Version         *int    `json:"Version"`
	AccessKeyID     string  `json:"AccessKeyId"`
	SecretAccessKey string  `json:"SecretAccessKey"`
	SessionToken    string  `json:"SessionToken"`
	Expiration      *string `json:"Expiration"`
}

// Fixed messages of credential refusals: they never repeat the value or the JSON
// decoder's text, which could quote it.
const (
	msgKeysJSON       = "the deployment's credential is not valid AWS access keys JSON"
	msgKeysMissing    = "the deployment's AWS access keys JSON lacks AccessKeyId or SecretAccessKey"
	msgKeysVersion    = "the deployment's AWS access keys JSON has an unsupported Version"
	msgKeysExpiration = "the deployment's AWS access keys JSON has an Expiration that is not an RFC 3339 time"
	msgKeysExpired    = "the deployment's AWS access keys have expired"
	msgNotHeaderSafe  = "the deployment's credential contains characters that cannot be sent in a header"
)

// parseCredential reads the deployment's credential. A value that is a JSON object
// (after surrounding white space, which a Secret written from a file often has) is AWS
// access keys; anything else is a Bedrock API key, used exactly as it is. Every value
// that goes into a header is checked here, so a stray newline is an operator problem
// found before any call (provider_rejected) rather than a send error that looks like an
// outage and is retried.
func parseCredential(v string, now time.Time) (credential, *protocol.Error) {
	trimmed := bytes.TrimSpace([]byte(v))
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if !providerhttp.HeaderSafe(v) {
			return credential{}, rejected(msgNotHeaderSafe)
		}
		return credential{apiKey: routing.NewCredential(v)}, nil
	}
	var pc processCredentials
	if err := json.Unmarshal(trimmed, &pc); err != nil {
		return credential{}, rejected(msgKeysJSON)
	}
	if pc.AccessKeyID == "" || pc.SecretAccessKey == "" {
		return credential{}, rejected(msgKeysMissing)
	}
	if pc.Version != nil && *pc.Version != 1 {
		return credential{}, rejected(msgKeysVersion)
	}
	// The access key id goes into the Authorization header and the session token into
	// X-Amz-Security-Token; the secret only into the HMAC key, where a stray byte would
	// give a signature AWS refuses — checked alike, for the same operator-facing error.
	if !providerhttp.HeaderSafe(pc.AccessKeyID) || !providerhttp.HeaderSafe(pc.SecretAccessKey) ||
		!providerhttp.HeaderSafe(pc.SessionToken) {
		return credential{}, rejected(msgNotHeaderSafe)
	}
	if pc.Expiration != nil && *pc.Expiration != "" {
		exp, err := time.Parse(time.RFC3339, *pc.Expiration)
		if err != nil {
			return credential{}, rejected(msgKeysExpiration)
		}
		// Expired temporary keys would be answered 403 ExpiredTokenException; refusing
		// them here says why without a call. The engine builds an adapter per attempt,
		// so keys refreshed in the Secret are picked up by the next attempt.
		if !now.Before(exp) {
			return credential{}, rejected(msgKeysExpired)
		}
	}
	return credential{
		accessKeyID:     routing.NewCredential(pc.AccessKeyID),
		secretAccessKey: routing.NewCredential(pc.SecretAccessKey),
		sessionToken:    routing.NewCredential(pc.SessionToken),
	}, nil
}
