package providerhttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine/enginetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
)

// loopback is a client that reaches the tests' servers.
var loopback = providerhttp.NewClient(providerhttp.Fence{AllowLoopback: true})

// readAll is a decode that returns the body.
func readAll(resp *http.Response) (string, error) {
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Do sends the body as JSON with the call's headers, signs last, and hands a 2xx answer
// to decode.
func TestDoSends(t *testing.T) {
	var got *http.Request
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r, must(io.ReadAll(r.Body))
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "answer")
	}))
	defer srv.Close()
	var signed http.Header
	c := providerhttp.Call{
		Provider: "p", Client: loopback, URL: srv.URL + "/v1/x", Body: []byte(`{"a":1}`),
		Header: http.Header{"Accept": {"text/event-stream"}, "X-Api-Key": {"k"}},
		Sign: func(r *http.Request) error {
			signed = r.Header.Clone()
			r.Header.Set("Authorization", "signed")
			return nil
		},
	}
	out, err := providerhttp.Do(context.Background(), c, readAll)
	if err != nil || out != "answer" {
		t.Fatalf("Do = %q, %v", out, err)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/v1/x" || string(body) != `{"a":1}` {
		t.Errorf("sent %s %s %s", got.Method, got.URL.Path, body)
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream", "X-Api-Key": "k", "Authorization": "signed"} {
		if got.Header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, got.Header.Get(k), v)
		}
	}
	if signed.Get("Content-Type") != "application/json" || signed.Get("Accept") != "text/event-stream" {
		t.Errorf("signed before every header was set: %v", signed)
	}
}

// A status other than 2xx is the call's Failure, given at most MaxErrorBody bytes of the
// body; without a Failure the status and retry headers decide. decode is not called.
func TestDoFailure(t *testing.T) {
	big := strings.Repeat("e", providerhttp.MaxErrorBody+100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, big)
	}))
	defer srv.Close()
	decode := func(*http.Response) (string, error) {
		t.Error("decode called on a failure")
		return "", nil
	}
	var seen int
	c := providerhttp.Call{Provider: "p", Client: loopback, URL: srv.URL, Failure: func(resp *http.Response, body []byte) *protocol.Error {
		seen = len(body)
		return providerhttp.Failure{Provider: "p", Status: resp.StatusCode, QuotaExhausted: true}.Error()
	}}
	_, err := providerhttp.Do(context.Background(), c, decode)
	if pe := asError(t, err); pe.Code != protocol.CodeQuotaExhausted || seen != providerhttp.MaxErrorBody {
		t.Errorf("Do: %v after %d bytes of body, want quota_exhausted after %d", err, seen, providerhttp.MaxErrorBody)
	}

	c.Failure = nil
	_, err = providerhttp.Do(context.Background(), c, decode)
	if pe := asError(t, err); pe.Code != protocol.CodeRateLimited || pe.RetryAfterMs != 3000 || pe.ProviderError.HTTPStatus != 429 {
		t.Errorf("Do without Failure: %+v, want rate_limited after 3 s", pe)
	}
}

// A failure to send is TransportError, logged by its cause; a request that cannot be built
// is a plain error that does not name the URL.
func TestDoErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/secret-path?key=secret"
	srv.Close()
	var logs enginetest.LogSink
	c := providerhttp.Call{Provider: "p", Client: loopback, URL: url, Log: logs.Logger()}
	_, err := providerhttp.Do(context.Background(), c, readAll)
	if pe := asError(t, err); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("Do to a closed server: %+v, want provider_unavailable, retryable", pe)
	}
	if !strings.Contains(logs.Text(), "Provider request failed") || strings.Contains(logs.Text(), "secret") {
		t.Errorf("transport failure logged as %q", logs.Text())
	}

	c.URL = "http://[::1]:namedport/secret"
	_, err = providerhttp.Do(context.Background(), c, readAll)
	var pe *protocol.Error
	if err == nil || errors.As(err, &pe) || strings.Contains(err.Error(), "secret") {
		t.Errorf("Do of an unusable URL: %v, want a plain error without the URL", err)
	}
}

// ReadBody refuses a body larger than its bound; ReadAnswer maps one that broke off.
func TestReadAnswer(t *testing.T) {
	if b, err := providerhttp.ReadBody(strings.NewReader("12345"), 5); err != nil || string(b) != "12345" {
		t.Errorf("ReadBody at the bound = %q, %v", b, err)
	}
	if _, err := providerhttp.ReadBody(strings.NewReader("123456"), 5); !errors.Is(err, providerhttp.ErrBodyTooLarge) {
		t.Errorf("ReadBody past the bound: %v, want ErrBodyTooLarge", err)
	}
	cut := io.MultiReader(bytes.NewReader([]byte("{")), errReader{})
	_, err := providerhttp.ReadAnswer(context.Background(), "p", logr.Discard(), cut, 100)
	if pe := asError(t, err); pe.Code != protocol.CodeProviderUnavailable || !pe.Retryable {
		t.Errorf("ReadAnswer of a cut body: %+v, want provider_unavailable, retryable", pe)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func asError(t *testing.T, err error) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *protocol.Error", err)
	}
	return pe
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
