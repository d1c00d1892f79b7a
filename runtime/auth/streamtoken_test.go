package auth_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/auth"
)

const base64URLAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

var t0 = time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)

func newStreamTokens(t *testing.T, key []byte, ttl time.Duration) *auth.StreamTokens {
	t.Helper()
	s, err := auth.NewStreamTokens(key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStreamTokensRoundTrip(t *testing.T) {
	s := newStreamTokens(t, auth.GenerateKey(), 0)
	for _, principal := range []string{"alice", "system:serviceaccount:team-a:bot", "ops, team é", ""} {
		token := s.Sign("exe_1", principal, t0)
		for _, c := range token {
			if !strings.ContainsRune(base64URLAlphabet, c) {
				t.Fatalf("token %q is not URL-safe", token)
			}
		}
		for _, at := range []time.Time{t0, t0.Add(-time.Hour), t0.Add(auth.DefaultStreamTokenTTL - time.Second)} {
			got, err := s.Verify(token, "exe_1", at)
			if err != nil || got != principal {
				t.Errorf("Verify at %v: got %q, %v; want %q", at, got, err, principal)
			}
		}
	}
}

func TestStreamTokensRefuse(t *testing.T) {
	key := auth.GenerateKey()
	s := newStreamTokens(t, key, time.Minute)
	token := s.Sign("exe_1", "alice", t0)
	otherKey := newStreamTokens(t, auth.GenerateKey(), time.Minute)
	tests := []struct {
		name  string
		s     *auth.StreamTokens
		token string
		id    string
		at    time.Time
		want  string
	}{
		{"expired", s, token, "exe_1", t0.Add(time.Minute), "auth: unauthenticated: stream token expired"},
		{"long expired", s, token, "exe_1", t0.Add(24 * time.Hour), "auth: unauthenticated: stream token expired"},
		{"other execution", s, token, "exe_2", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"execution id extended", s, token, "exe_11", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"empty execution id", s, token, "", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"other key", otherKey, token, "exe_1", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"empty", s, "", "exe_1", t0, "auth: unauthenticated: malformed stream token"},
		{"padded", s, token + "=", "exe_1", t0, "auth: unauthenticated: malformed stream token"},
		{"line break inside", s, token[:10] + "\n" + token[10:], "exe_1", t0, "auth: unauthenticated: malformed stream token"},
		{"standard base64", s, strings.NewReplacer("-", "+", "_", "/").Replace(token) + "+/", "exe_1", t0, "auth: unauthenticated: malformed stream token"},
		{"too long", s, strings.Repeat("A", 4096), "exe_1", t0, "auth: unauthenticated: malformed stream token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.s.Verify(tt.token, tt.id, tt.at)
			if !errors.Is(err, auth.ErrUnauthenticated) || got != "" {
				t.Fatalf("got %q, %v; want ErrUnauthenticated", got, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error %q, want %q", err, tt.want)
			}
		})
	}

	// Every prefix of the token, and every token with one character replaced by another
	// of the alphabet (which includes changes of the bits the last character carries
	// beyond the data), is refused, with an error that does not hold it.
	for n := range len(token) {
		if _, err := s.Verify(token[:n], "exe_1", t0); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("prefix of %d characters: %v", n, err)
		}
	}
	altered := 0
	for i := range len(token) {
		for _, c := range []byte(base64URLAlphabet) {
			if c == token[i] {
				continue
			}
			bad := token[:i] + string(c) + token[i+1:]
			_, err := s.Verify(bad, "exe_1", t0)
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("token altered at %d to %q verified", i, c)
			}
			if strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), token[:8]) {
				t.Fatalf("error %q holds the token", err)
			}
			altered++
		}
	}
	if altered != len(token)*63 {
		t.Errorf("tried %d alterations", altered)
	}
}

func TestStreamTokensTTL(t *testing.T) {
	key := auth.GenerateKey()
	for _, tt := range []struct {
		ttl, want time.Duration
	}{{0, auth.DefaultStreamTokenTTL}, {-time.Second, auth.DefaultStreamTokenTTL}, {90 * time.Second, 90 * time.Second}} {
		s := newStreamTokens(t, key, tt.ttl)
		token := s.Sign("exe_1", "alice", t0)
		if _, err := s.Verify(token, "exe_1", t0.Add(tt.want-time.Second)); err != nil {
			t.Errorf("ttl %v: refused a second before %v: %v", tt.ttl, tt.want, err)
		}
		if _, err := s.Verify(token, "exe_1", t0.Add(tt.want)); err == nil {
			t.Errorf("ttl %v: accepted after %v", tt.ttl, tt.want)
		}
	}
}

func TestStreamTokensKey(t *testing.T) {
	short := bytes.Repeat([]byte("k"), auth.MinStreamTokenKeySize-1)
	s, err := auth.NewStreamTokens(short, 0)
	if err == nil || s != nil {
		t.Fatalf("accepted a %d-byte key", len(short))
	}
	if strings.Contains(err.Error(), string(short)) {
		t.Errorf("error %q holds the key", err)
	}
	if _, err := auth.NewStreamTokens(nil, 0); err == nil {
		t.Error("accepted no key")
	}

	// Replicas given the same key accept each other's tokens; the key is copied.
	key := auth.GenerateKey()
	if len(key) != auth.MinStreamTokenKeySize {
		t.Fatalf("GenerateKey returned %d bytes", len(key))
	}
	if bytes.Equal(key, auth.GenerateKey()) {
		t.Fatal("GenerateKey returned the same key twice")
	}
	a := newStreamTokens(t, key, 0)
	b := newStreamTokens(t, bytes.Clone(key), 0)
	clear(key)
	if got, err := b.Verify(a.Sign("exe_1", "alice", t0), "exe_1", t0); err != nil || got != "alice" {
		t.Errorf("got %q, %v", got, err)
	}
}

// TestStreamTokensConcurrent is for the race detector.
func TestStreamTokensConcurrent(t *testing.T) {
	s := newStreamTokens(t, auth.GenerateKey(), 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if _, err := s.Verify(s.Sign("exe_1", "alice", t0), "exe_1", t0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkStreamTokensVerify(b *testing.B) {
	s, _ := auth.NewStreamTokens(auth.GenerateKey(), 0)
	token := s.Sign("exe_01J9Z8Q6Y0000000000000000000", "system:serviceaccount:team-a:bot", t0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify(token, "exe_01J9Z8Q6Y0000000000000000000", t0); err != nil {
			b.Fatal(err)
		}
	}
}
