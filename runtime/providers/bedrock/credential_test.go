package bedrock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// TestNew: New accepts both credential forms and refuses an unusable deployment with
// provider_rejected and a fixed message that repeats nothing of the credential.
func TestNew(t *testing.T) {
	at := func() time.Time { return signingTime }
	for _, tc := range []struct {
		name string
		opts []func(*routing.Deployment)
		msg  string // "" when accepted
	}{
		{name: "temporary keys"},
		{name: "long-term keys", opts: opts(withCredential(keysJSON(false)))},
		{name: "keys without Version, surrounded by white space", opts: opts(withCredential(
			"\n  {\"AccessKeyId\":\"" + accessKeyID + "\",\"SecretAccessKey\":\"" + secretCanary + "\",\"AccountId\":\"123456789012\"}\n"))},
		{name: "API key", opts: opts(withCredential(apiKeyCanary))},
		{name: "default endpoint", opts: opts(func(d *routing.Deployment) { d.Endpoint = "" })},
		{name: "another provider", opts: opts(func(d *routing.Deployment) { d.Provider = "anthropic" }),
			msg: "the deployment is not a bedrock deployment"},
		{name: "no model", opts: opts(withModel("")), msg: "the deployment has no model"},
		{name: "no region", opts: opts(func(d *routing.Deployment) { d.Region = "" }), msg: "the deployment has no region"},
		{name: "a region that is not one", opts: opts(func(d *routing.Deployment) { d.Region = "us-west-2.evil.example/x" }),
			msg: "the deployment's region is not a region name"},
		{name: "no credential", opts: opts(withCredential("")), msg: "the deployment has no credential"},
		{name: "bad endpoint", opts: opts(func(d *routing.Deployment) { d.Endpoint = "ftp://bedrock.example" }),
			msg: "the deployment's endpoint is not an absolute http(s) URL"},
		{name: "endpoint with user info", opts: opts(func(d *routing.Deployment) { d.Endpoint = "https://user:" + secretCanary + "@bedrock.example" }),
			msg: "the deployment's endpoint is not an absolute http(s) URL"},
		{name: "API key with a newline", opts: opts(withCredential(apiKeyCanary + "\n")),
			msg: "the deployment's credential contains characters that cannot be sent in a header"},
		{name: "broken JSON", opts: opts(withCredential(`{"AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` + secretCanary)),
			msg: "the deployment's credential is not valid AWS access keys JSON"},
		{name: "JSON that is not an object of strings", opts: opts(withCredential(`{"AccessKeyId":1,"SecretAccessKey":"` + secretCanary + `"}`)),
			msg: "the deployment's credential is not valid AWS access keys JSON"},
		{name: "no SecretAccessKey", opts: opts(withCredential(`{"Version":1,"AccessKeyId":"` + accessKeyID + `"}`)),
			msg: "the deployment's AWS access keys JSON lacks AccessKeyId or SecretAccessKey"},
		{name: "no AccessKeyId", opts: opts(withCredential(`{"Version":1,"SecretAccessKey":"` + secretCanary + `"}`)),
			msg: "the deployment's AWS access keys JSON lacks AccessKeyId or SecretAccessKey"},
		{name: "Version 2", opts: opts(withCredential(`{"Version":2,"AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` + secretCanary + `"}`)),
			msg: "the deployment's AWS access keys JSON has an unsupported Version"},
		{name: "session token with a newline", opts: opts(withCredential(`{"AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` + secretCanary + `","SessionToken":"` + tokenCanary + `\n"}`)),
			msg: "the deployment's credential contains characters that cannot be sent in a header"},
		{name: "Expiration not a time", opts: opts(withCredential(`{"AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` + secretCanary + `","Expiration":"soon"}`)),
			msg: "the deployment's AWS access keys JSON has an Expiration that is not an RFC 3339 time"},
		{name: "expired", opts: opts(withCredential(`{"AccessKeyId":"` + accessKeyID + `","SecretAccessKey":"` + secretCanary + `","SessionToken":"t","Expiration":"2026-03-04T05:06:07Z"}`)),
			msg: "the deployment's AWS access keys have expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := deployment("https://bedrock.example", tc.opts...)
			a, err := bedrock.New(d, bedrock.WithClock(at))
			if tc.msg == "" {
				if err != nil || a == nil {
					t.Fatalf("New = %v, %v", a, err)
				}
				return
			}
			pe := asError(t, err)
			if pe.Code != protocol.CodeProviderRejected || pe.Message != tc.msg || pe.ProviderError == nil || pe.ProviderError.Provider != "bedrock" {
				t.Errorf("New error %+v, want provider_rejected %q", pe, tc.msg)
			}
		})
	}
}

func opts(o ...func(*routing.Deployment)) []func(*routing.Deployment) { return o }

// TestAdapterNeverPrintsItsCredential: whatever verb prints the adapter, the secret
// access key, the session token and the API key stay out of the text.
func TestAdapterNeverPrintsItsCredential(t *testing.T) {
	for _, cred := range []string{keysJSON(true), apiKeyCanary} {
		a, err := bedrock.New(deployment("https://bedrock.example", withCredential(cred)), bedrock.WithClock(func() time.Time { return signingTime }))
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x", "%X", "%T", "%p"} {
			texts = append(texts, fmt.Sprintf(verb, a))
		}
		texts = append(texts, fmt.Sprint(a), fmt.Sprintf("%v", []engine.Adapter{a}), fmt.Sprintf("%+v", struct{ A engine.Adapter }{a}))
		for _, s := range texts {
			for _, secret := range allSecrets {
				if strings.Contains(s, secret) || strings.Contains(s, fmt.Sprintf("%x", secret)) {
					t.Errorf("the adapter prints a secret: %s", s)
				}
			}
		}
	}
}

// TestRegister installs the factory and CanEncode for the chat operation.
func TestRegister(t *testing.T) {
	m := map[string]engine.Provider{}
	bedrock.Register(m, bedrock.WithClock(func() time.Time { return signingTime }))
	p, ok := m[bedrock.Provider]
	if !ok || p.New == nil || p.CanEncode == nil || p.Operation != "chat" {
		t.Fatalf("Register = %+v", m)
	}
	if a, err := p.New(deployment("https://bedrock.example")); err != nil || a == nil {
		t.Errorf("New = %v, %v", a, err)
	}
	if a, err := bedrock.Factory(deployment("https://bedrock.example", withCredential(apiKeyCanary))); err != nil || a == nil {
		t.Errorf("Factory = %v, %v", a, err)
	}
	if got := bedrock.DefaultEndpoint("eu-central-1"); got != "https://bedrock-runtime.eu-central-1.amazonaws.com" {
		t.Errorf("DefaultEndpoint = %s", got)
	}
}
