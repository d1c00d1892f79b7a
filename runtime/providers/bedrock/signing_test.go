package bedrock_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// The documented get-vanilla example of the SigV4 test suite: GET / to
// example.amazonaws.com at 20150830T123600Z, signed for us-east-1 and service "service"
// with the documentation's example keys.
const (
	vanillaKeyID     = "AKIDEXAMPLE"
	vanillaSecret    = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	vanillaDate      = "20150830T123600Z"
	vanillaSignature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
	vanillaCanonical = "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

var vanillaExpect = sigv4Expect{accessKeyID: vanillaKeyID, secretAccessKey: vanillaSecret,
	region: "us-east-1", service: "service", signed: []string{"host", "x-amz-date"}}

// vanillaRequest is the example request as a server receives it, with its documented
// Authorization header.
func vanillaRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Host = "example.amazonaws.com"
	r.Header.Set("X-Amz-Date", vanillaDate)
	r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+vanillaKeyID+"/20150830/us-east-1/service/aws4_request, "+
		"SignedHeaders=host;x-amz-date, Signature="+vanillaSignature)
	return r
}

// TestSigV4VerifierDocumentedVector checks the test's own SigV4 implementation — which
// every fake upstream uses to verify the adapter's signatures — against the documented
// example, step by step, and that it refuses the example when anything is changed.
func TestSigV4VerifierDocumentedVector(t *testing.T) {
	canonical := canonicalRequest(http.MethodGet, "/", "",
		[]string{"host:example.amazonaws.com", "x-amz-date:" + vanillaDate}, "host;x-amz-date", hexSHA256(nil))
	if canonical != vanillaCanonical {
		t.Fatalf("canonical request:\n%s\nwant:\n%s", canonical, vanillaCanonical)
	}
	sig := sigv4Signature(vanillaSecret, "20150830", "us-east-1", "service",
		stringToSign(vanillaDate, "20150830/us-east-1/service/aws4_request", canonical))
	if sig != vanillaSignature {
		t.Fatalf("signature %s, want the documented %s", sig, vanillaSignature)
	}
	if err := verifySigV4(vanillaRequest(), nil, vanillaExpect); err != nil {
		t.Fatalf("verifier refuses the documented example: %v", err)
	}
	for name, mutate := range map[string]func(*http.Request){
		"another date":   func(r *http.Request) { r.Header.Set("X-Amz-Date", "20150830T123601Z") },
		"another host":   func(r *http.Request) { r.Host = "example2.amazonaws.com" },
		"another path":   func(r *http.Request) { r.RequestURI = "/x" },
		"a query":        func(r *http.Request) { r.RequestURI = "/?a=b" },
		"another method": func(r *http.Request) { r.Method = http.MethodPost },
		"a session token": func(r *http.Request) {
			r.Header.Set("X-Amz-Security-Token", "unexpected")
		},
	} {
		r := vanillaRequest()
		mutate(r)
		if err := verifySigV4(r, nil, vanillaExpect); err == nil {
			t.Errorf("verifier accepts the example with %s", name)
		}
	}
	if err := verifySigV4(vanillaRequest(), []byte("x"), vanillaExpect); err == nil {
		t.Error("verifier accepts the example with a body")
	}
	other := vanillaExpect
	other.secretAccessKey = "another"
	if err := verifySigV4(vanillaRequest(), nil, other); err == nil {
		t.Error("verifier accepts the example with another secret")
	}
}

// TestSDKSignerMatchesDocumentedVector: the signer the adapter uses produces the
// documented signature for the documented request, so verifier and signer agree on a
// known answer before they are set against each other.
func TestSDKSignerMatchesDocumentedVector(t *testing.T) {
	r, err := http.NewRequest(http.MethodGet, "https://example.amazonaws.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	at, _ := time.Parse("20060102T150405Z", vanillaDate)
	creds := aws.Credentials{AccessKeyID: vanillaKeyID, SecretAccessKey: vanillaSecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, r, hexSHA256(nil), "service", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Get("Authorization"); !strings.HasSuffix(got, "Signature="+vanillaSignature) ||
		!strings.Contains(got, "SignedHeaders=host;x-amz-date,") {
		t.Errorf("SDK Authorization = %s, want the documented signature", got)
	}
}

// TestSignedRequests: every request the adapter signs verifies against the independent
// implementation, for keys with and without a session token, streaming and not, with a
// model id that is an inference profile id or an ARN (both with characters the path
// label escapes, which the canonical URI then escapes once more), and behind an endpoint
// with a path prefix.
func TestSignedRequests(t *testing.T) {
	const arn = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-20241022-v2:0"
	const arnPath = "arn%3Aaws%3Abedrock%3Aus-west-2%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-5-sonnet-20241022-v2%3A0"
	for _, tc := range []struct {
		name     string
		opts     []func(*routing.Deployment)
		prefix   string
		wantPath string
		token    bool
	}{
		{name: "temporary keys, inference profile id, streaming", opts: []func(*routing.Deployment){streaming}, token: true,
			wantPath: "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse-stream"},
		{name: "long-term keys, non-streaming", opts: []func(*routing.Deployment){withCredential(keysJSON(false))},
			wantPath: "/model/us.anthropic.claude-3-5-sonnet-20241022-v2%3A0/converse"},
		{name: "ARN model id", opts: []func(*routing.Deployment){withModel(arn)}, token: true,
			wantPath: "/model/" + arnPath + "/converse"},
		{name: "endpoint with a path prefix", opts: []func(*routing.Deployment){withModel(arn), streaming}, prefix: "/bedrock/proxy/", token: true,
			wantPath: "/bedrock/proxy/model/" + arnPath + "/converse-stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "converse-stream") {
					streamReply(script(t, "text.json"))(w, r)
					return
				}
				jsonReply(http.StatusOK, testdata(t, "converse_text.json"))(w, r)
			})
			res := run(t, deployment(up.URL+tc.prefix, tc.opts...), hello(t))
			if res.err != nil {
				t.Fatalf("Execute: %v", res.err)
			}
			c := up.only(t)
			checkPlacement(t, c)
			if c.RequestURI != tc.wantPath {
				t.Errorf("request target %s, want %s", c.RequestURI, tc.wantPath)
			}
			if got := c.Header.Get("X-Amz-Date"); got != "20260304T050607Z" {
				t.Errorf("X-Amz-Date = %q", got)
			}
			if got := c.Header.Get("X-Amz-Security-Token"); (tc.token && got != tokenCanary) || (!tc.token && got != "") {
				t.Errorf("X-Amz-Security-Token = %q, want the token: %v", got, tc.token)
			}
			auth, err := parseSigV4Auth(c.Header.Get("Authorization"))
			if err != nil {
				t.Fatal(err)
			}
			if want := accessKeyID + "/20260304/us-west-2/bedrock/aws4_request"; auth.credential != want {
				t.Errorf("credential scope %s, want %s", auth.credential, want)
			}
		})
	}
}

// TestBearerAPIKey: a Bedrock API key is sent as a bearer token, and nothing is signed.
func TestBearerAPIKey(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "text.json")))
	res := run(t, deployment(up.URL, streaming, withCredential(apiKeyCanary)), hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	c := up.only(t)
	checkPlacement(t, c)
	if got := c.Header.Get("Authorization"); got != "Bearer "+apiKeyCanary {
		t.Errorf("Authorization = %q, want the bearer API key", got)
	}
	for _, h := range []string{"X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
		if c.Header.Get(h) != "" {
			t.Errorf("%s sent with an API key", h)
		}
	}
}

// roundTripper adapts a function.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTamperedRequestFailsVerification: the fake upstream is not a rubber stamp — a
// request whose body, path or date changed after signing is refused (403), which the
// adapter maps to provider_rejected.
func TestTamperedRequestFailsVerification(t *testing.T) {
	const other = `{"messages":[]}`
	for name, f := range map[string]func(*http.Request){
		"body": func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(other))
			r.ContentLength = int64(len(other))
		},
		"path": func(r *http.Request) { r.URL.RawPath = strings.Replace(r.URL.RawPath, "%3A0", "%3A1", 1) },
		"date": func(r *http.Request) { r.Header.Set("X-Amz-Date", "20260304T050608Z") },
	} {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t, streamReply(script(t, "text.json")))
			client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
				f(r)
				return http.DefaultTransport.RoundTrip(r)
			})}
			res := runWith(t, deployment(up.URL, streaming), hello(t), client)
			if pe := asError(t, res.err); pe.Code != protocol.CodeProviderRejected {
				t.Errorf("error %v, want provider_rejected", pe)
			}
			if c := up.only(t); c.AuthErr == nil {
				t.Error("the tampered request verified")
			}
		})
	}
}

// TestTraceparentIsSigned: with tracing on, the attempt's traceparent is added before
// signing, so it is one of the signed headers and the signature still verifies (a header
// added after signing would either break the signature or travel unsigned).
func TestTraceparentIsSigned(t *testing.T) {
	up := newUpstream(t, streamReply(script(t, "text.json")))
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(context.Background(), sc), testTimeout)
	defer cancel()
	res := runCtx(t, ctx, deployment(up.URL, streaming), hello(t))
	if res.err != nil {
		t.Fatalf("Execute: %v", res.err)
	}
	c := up.only(t)
	checkPlacement(t, c)
	if got := c.Header.Get("Traceparent"); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("traceparent = %q", got)
	}
	auth, err := parseSigV4Auth(c.Header.Get("Authorization"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(";"+auth.signedHeaders+";", ";traceparent;") {
		t.Errorf("signed headers %s lack traceparent", auth.signedHeaders)
	}
}
