package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// cloudModels are a Gemini API and a Bedrock model on the demo provider, which speaks
// both wire formats at their real paths. The Bedrock model authenticates with a Bedrock
// API key (a bearer token); the demo's key serves as one.
func cloudModels(provider string) string {
	return fmt.Sprintf(`apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: gemini, namespace: e2e}
spec:
  provider: gemini
  model: echo
  endpoint: http://%[1]s
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [gemini-chat]
  capabilities: {streaming: true}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: bedrock, namespace: e2e}
spec:
  provider: bedrock
  model: echo
  region: us-east-1
  endpoint: http://%[1]s
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: demo, key: api-key}}
  abilities: [bedrock-chat]
  capabilities: {streaming: true}
`, provider)
}

// One streamed execution through each of the gemini and bedrock adapters, on the built
// binary: the Go client follows the stream, and the snapshot it folds equals /result.
func TestCloudProvidersEndToEnd(t *testing.T) {
	e := setupWith(t, cloudModels)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ability := range []string{"gemini-chat", "bedrock-chat"} {
		t.Run(ability, func(t *testing.T) {
			text := "hello through " + ability
			acc, err := e.client.Submit(ctx, textRequest(ability, text))
			if err != nil {
				t.Fatal(err)
			}
			events := follow(t, ctx, e.client, acc.ID)
			deltas := 0
			for _, ev := range events {
				if ev.Type == protocol.EventOutputDelta {
					deltas++
				}
			}
			if deltas < 2 {
				t.Errorf("%d output.delta events, want the demo's streamed pieces: %v", deltas, types(events))
			}
			snap, err := e.client.FollowResult(ctx, acc.ID)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Status != protocol.StatusCompleted || len(snap.Output) != 1 || snap.Output[0].Text != text {
				t.Errorf("snapshot = %+v", snap)
			}
			if len(snap.Usage) == 0 {
				t.Error("no usage reported")
			}
			server, err := e.client.Result(ctx, acc.ID)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(snap)
			b, _ := json.Marshal(server)
			if !bytes.Equal(a, b) {
				t.Errorf("client snapshot %s != server /result %s", a, b)
			}
		})
	}
}

// tokenServer is a fake OAuth 2.0 token endpoint for service-account keys (the JWT
// bearer grant of RFC 7523, as Google's token_uri speaks it). It records which service
// account signed each assertion; it does not verify signatures (the gemini package's
// tests do).
type tokenServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	issuer []string
}

func newTokenServer(t *testing.T) *tokenServer {
	ts := &tokenServer{}
	ts.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		parts := strings.Split(r.Form.Get("assertion"), ".")
		var claims struct {
			Iss string `json:"iss"`
		}
		if len(parts) != 3 {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
		_ = json.Unmarshal(payload, &claims)
		ts.mu.Lock()
		ts.issuer = append(ts.issuer, claims.Iss)
		n := len(ts.issuer)
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"access_token":"ya29.token-%d","token_type":"Bearer","expires_in":3600}`, n)
	}))
	t.Cleanup(ts.srv.Close)
	return ts
}

// issued reports whether a token was minted for the service account email.
func (ts *tokenServer) issued(email string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Contains(ts.issuer, email)
}

// serviceAccountKey returns a service-account key file, as Google Cloud issues it, for
// email with a fresh RSA key, pointing at tokenURI.
func serviceAccountKey(t *testing.T, email, tokenURI string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "demo-project", "private_key_id": "key-" + email[:1],
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": email, "client_id": "1", "token_uri": tokenURI,
	})
	return string(b)
}

// vertexModel is a vertex ModelDeployment on the demo provider with key as its Secret.
func vertexModel(key string) func(provider string) string {
	quoted, _ := json.Marshal(key) // a JSON string is a YAML double-quoted scalar
	return func(provider string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: vertex-key, namespace: e2e}
stringData: {key.json: %[2]s}
---
apiVersion: ai.switchboard.dev/v1alpha1
kind: ModelDeployment
metadata: {name: vertex, namespace: e2e}
spec:
  provider: vertex
  model: echo
  region: us-central1
  project: demo-project
  endpoint: http://%[1]s
  allowInsecureEndpoint: true
  credentials: {secretRef: {name: vertex-key, key: key.json}}
  abilities: [vertex-chat]
  capabilities: {streaming: true}
`, provider, quoted)
	}
}

// A Vertex model authenticates with the service-account key in its Secret: the runtime
// mints an access token at the key's token endpoint. Rotating the Secret to another
// service account's key changes the token source within 5 seconds, on the running
// binary.
func TestVertexKeyRotation(t *testing.T) {
	ts := newTokenServer(t)
	const first, second = "first@demo-project.iam.gserviceaccount.com", "second@demo-project.iam.gserviceaccount.com"
	e := setupWith(t, vertexModel(serviceAccountKey(t, first, ts.srv.URL)))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	run := func() {
		t.Helper()
		acc, err := e.client.Submit(ctx, textRequest("vertex-chat", "hello vertex"))
		if err != nil {
			t.Fatal(err)
		}
		snap, err := e.client.FollowResult(ctx, acc.ID)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Status != protocol.StatusCompleted || len(snap.Output) != 1 || snap.Output[0].Text != "hello vertex" {
			t.Fatalf("snapshot = %+v", snap)
		}
	}
	run()
	if !ts.issued(first) {
		t.Fatal("no token was minted for the first key")
	}

	e.writeModels(t, vertexModel(serviceAccountKey(t, second, ts.srv.URL)))
	rotated := time.Now()
	for !ts.issued(second) {
		if time.Since(rotated) > 5*time.Second {
			t.Fatal("the rotated key was not used within 5s")
		}
		run()
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the rotated key minted a token %s after the Secret changed", time.Since(rotated).Round(time.Millisecond))
	if strings.Contains(e.runtime.String(), "PRIVATE KEY") {
		t.Error("the runtime's log holds the private key")
	}
}
