package gemini

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// keyFile returns a service account key file of key with id.
func keyFile(t *testing.T, key *rsa.PrivateKey, id string) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "private_key_id": id, "client_email": "sb@sb-test-project.iam.gserviceaccount.com",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"token_uri":   "https://oauth2.googleapis.com/token",
	})
	return string(b)
}

func TestTokenCacheBounds(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	c := &tokenCache{entries: map[[sha256.Size]byte]*tokenEntry{}, now: func() time.Time { return now }}
	client := &http.Client{}

	first, ok := c.entry(keyFile(t, key, "k0"), client)
	if !ok {
		t.Fatal("a service account key was refused")
	}
	if again, _ := c.entry(keyFile(t, key, "k0"), client); again != first {
		t.Error("the same key got a second token source")
	}
	if _, ok := c.entries[sha256.Sum256([]byte(keyFile(t, key, "k0")))]; !ok {
		t.Error("the cache is not keyed by the key file's SHA-256")
	}

	// A key in use stays; the cache never holds more than maxTokenSources entries.
	for i := 1; i < 2*maxTokenSources; i++ {
		now = now.Add(time.Second)
		if _, ok := c.entry(keyFile(t, key, fmt.Sprintf("k%d", i)), client); !ok {
			t.Fatal("a service account key was refused")
		}
		if i%8 == 0 {
			_, _ = c.entry(keyFile(t, key, "k0"), client) // k0 keeps being used
		}
		if n := len(c.entries); n > maxTokenSources {
			t.Fatalf("%d entries, want at most %d", n, maxTokenSources)
		}
	}
	if e, _ := c.entry(keyFile(t, key, "k0"), client); e != first {
		t.Error("a key in use was evicted")
	}

	// Keys unused for tokenSourceIdle are dropped at the next insertion.
	now = now.Add(tokenSourceIdle + time.Minute)
	if _, ok := c.entry(keyFile(t, key, "fresh"), client); !ok {
		t.Fatal("a service account key was refused")
	}
	if n := len(c.entries); n != 1 {
		t.Errorf("%d entries after an idle hour, want only the fresh one", n)
	}

	// forget drops an entry, but not a newer one for the same key.
	e, _ := c.entry(keyFile(t, key, "fresh"), client)
	c.forget(e)
	if len(c.entries) != 0 {
		t.Error("forget kept the entry")
	}
	newer, _ := c.entry(keyFile(t, key, "fresh"), client)
	c.forget(e)
	if got, _ := c.entry(keyFile(t, key, "fresh"), client); got != newer {
		t.Error("forgetting a stale entry dropped the newer one")
	}
}

func TestTokenURIAllowed(t *testing.T) {
	for uri, want := range map[string]bool{
		"https://oauth2.googleapis.com/token": true,
		"http://127.0.0.1:8080/token":         true,
		"http://[::1]:8080/token":             true,
		"http://localhost/token":              true,
		"http://oauth2.googleapis.com/token":  false,
		"https://u:p@oauth2.example.com/":     false,
		"/token":                              false,
		"file:///etc/passwd":                  false,
	} {
		if got := tokenURIAllowed(uri); got != want {
			t.Errorf("tokenURIAllowed(%q) = %v, want %v", uri, got, want)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	for in, want := range map[string]time.Duration{"37s": 37 * time.Second, "0.5s": 500 * time.Millisecond, "1.000340s": 1000340 * time.Microsecond} {
		if got, ok := retryDelay(in); !ok || got != want {
			t.Errorf("retryDelay(%q) = %s %v, want %s", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "37", "-1s", "1e9s", "NaNs", "soon"} {
		if _, ok := retryDelay(bad); ok {
			t.Errorf("retryDelay(%q) accepted", bad)
		}
	}
}
