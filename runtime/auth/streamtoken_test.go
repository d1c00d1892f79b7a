package auth_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
)

const base64URLAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// t0 is 50 minutes into an hour, and so into a rotation period of an hour.
var t0 = time.Date(2026, 12, 2, 13, 50, 0, 0, time.UTC)

// clock is a settable time for StreamTokenConfig.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func (c *clock) set(t time.Time)           { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time            { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) nowFunc() func() time.Time { return c.now }

// storeTokens returns stream tokens whose keys are in store.
func storeTokens(t *testing.T, store auth.SecretStore, ttl, rotation time.Duration) *auth.StreamTokens {
	t.Helper()
	s, err := auth.NewStreamTokens(t.Context(), auth.StreamTokenConfig{Store: store, TTL: ttl, KeyRotation: rotation, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sign returns a token for exe_1 and owner.
func sign(t *testing.T, s *auth.StreamTokens, owner string, now time.Time) string {
	t.Helper()
	token, err := s.Sign(t.Context(), "exe_1", owner, now)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return token
}

// verify parses token at now and verifies it for id and owner.
func verify(ctx context.Context, s *auth.StreamTokens, token, id, owner string, now time.Time) error {
	parsed, err := s.Parse(token, now)
	if err != nil {
		return err
	}
	return parsed.Verify(ctx, id, owner)
}

func TestStreamTokensRoundTrip(t *testing.T) {
	keyFile := writeKey(t, bytes.Repeat([]byte("k"), auth.MinStreamTokenKeySize))
	for name, s := range map[string]*auth.StreamTokens{
		"store":    storeTokens(t, memory.New(), 0, 0),
		"key file": fileTokens(t, keyFile),
	} {
		t.Run(name, func(t *testing.T) {
			for _, owner := range []string{"alice", "system:serviceaccount:team-a:bot", "ops, team é", ""} {
				token := sign(t, s, owner, t0)
				for _, c := range token {
					if !strings.ContainsRune(base64URLAlphabet, c) {
						t.Fatalf("token %q is not URL-safe", token)
					}
				}
				raw, err := base64.RawURLEncoding.DecodeString(token)
				if err != nil {
					t.Fatal(err)
				}
				if owner != "" && bytes.Contains(raw, []byte(owner)) {
					t.Errorf("the token holds the owner %q: %q", owner, raw)
				}
				for _, at := range []time.Time{t0, t0.Add(auth.DefaultStreamTokenTTL - time.Second)} {
					if err := verify(t.Context(), s, token, "exe_1", owner, at); err != nil {
						t.Errorf("owner %q, verify at %v: %v", owner, at, err)
					}
				}
			}
		})
	}
}

func TestStreamTokensRefuse(t *testing.T) {
	store := memory.New()
	s := storeTokens(t, store, time.Minute, time.Hour)
	token := sign(t, s, "alice", t0)
	other := storeTokens(t, memory.New(), time.Minute, time.Hour)
	tests := []struct {
		name      string
		s         *auth.StreamTokens
		token     string
		id, owner string
		at        time.Time
		want      string
	}{
		{"expired", s, token, "exe_1", "alice", t0.Add(time.Minute), "auth: unauthenticated: stream token expired"},
		{"long expired", s, token, "exe_1", "alice", t0.Add(24 * time.Hour), "auth: unauthenticated: stream token expired"},
		{"other execution", s, token, "exe_2", "alice", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"execution id extended", s, token, "exe_11", "alice", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"empty execution id", s, token, "", "alice", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"other owner", s, token, "exe_1", "bob", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"owner moved into the id", s, token, "exe_1alice", "", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"other store's key", other, token, "exe_1", "alice", t0, "auth: unauthenticated: stream token not valid for this execution"},
		{"empty", s, "", "exe_1", "alice", t0, "auth: unauthenticated: malformed stream token"},
		{"padded", s, token + "=", "exe_1", "alice", t0, "auth: unauthenticated: malformed stream token"},
		{"line break inside", s, token[:10] + "\n" + token[11:], "exe_1", "alice", t0, "auth: unauthenticated: malformed stream token"},
		{"standard base64", s, strings.NewReplacer("-", "+", "_", "/").Replace(token[:len(token)-2]) + "+/", "exe_1", "alice", t0, "auth: unauthenticated: malformed stream token"},
		{"too long", s, strings.Repeat("A", 4096), "exe_1", "alice", t0, "auth: unauthenticated: malformed stream token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verify(t.Context(), tt.s, tt.token, tt.id, tt.owner, tt.at)
			if !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("got %v; want ErrUnauthenticated", err)
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
		if err := verify(t.Context(), s, token[:n], "exe_1", "alice", t0); !errors.Is(err, auth.ErrUnauthenticated) {
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
			err := verify(t.Context(), s, bad, "exe_1", "alice", t0)
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
	store := memory.New()
	for _, tt := range []struct {
		ttl, want time.Duration
	}{{0, auth.DefaultStreamTokenTTL}, {-time.Second, auth.DefaultStreamTokenTTL}, {90 * time.Second, 90 * time.Second}} {
		s := storeTokens(t, store, tt.ttl, 0)
		token := sign(t, s, "alice", t0)
		if err := verify(t.Context(), s, token, "exe_1", "alice", t0.Add(tt.want-time.Second)); err != nil {
			t.Errorf("ttl %v: refused a second before %v: %v", tt.ttl, tt.want, err)
		}
		if err := verify(t.Context(), s, token, "exe_1", "alice", t0.Add(tt.want)); err == nil {
			t.Errorf("ttl %v: accepted after %v", tt.ttl, tt.want)
		}
	}
}

func TestStreamTokensConfig(t *testing.T) {
	short := bytes.Repeat([]byte("k"), auth.MinStreamTokenKeySize-1)
	for name, cfg := range map[string]auth.StreamTokenConfig{
		"short key file":             {KeyFile: writeKey(t, short)},
		"missing key file":           {KeyFile: filepath.Join(t.TempDir(), "missing")},
		"no key file, no store":      {},
		"rotation below the ttl":     {Store: memory.New(), TTL: time.Hour, KeyRotation: 59 * time.Minute},
		"rotation of a fraction":     {Store: memory.New(), KeyRotation: 90*time.Minute + time.Millisecond},
		"store that does not answer": {Store: closedStore(t)},
	} {
		s, err := auth.NewStreamTokens(t.Context(), cfg)
		if err == nil || s != nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), string(short)) {
			t.Errorf("%s: error %q holds the key", name, err)
		}
	}
}

func closedStore(t *testing.T) *memory.Store {
	s := memory.New()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return s
}

// The key rotates every period: the current one signs, the previous one still verifies
// the tokens it signed, and the store keeps each key only while it may verify.
func TestStreamTokensRotateEveryPeriod(t *testing.T) {
	store := &recordingStore{Store: memory.New()}
	s := storeTokens(t, store, 15*time.Minute, time.Hour)
	next := t0.Truncate(time.Hour).Add(time.Hour) // the next period starts
	late := sign(t, s, "alice", next.Add(-5*time.Minute))
	fresh := sign(t, s, "alice", next.Add(time.Minute))
	if keyName(t, late) == keyName(t, fresh) {
		t.Fatal("two periods signed under one key")
	}
	// The previous key verifies until its last token has expired; the current one too.
	for _, token := range []string{late, fresh} {
		if err := verify(t.Context(), s, token, "exe_1", "alice", next.Add(9*time.Minute)); err != nil {
			t.Errorf("verify after the rotation: %v", err)
		}
	}
	// A replica that starts in the new period fetches the previous key to verify.
	peer := storeTokens(t, store, 15*time.Minute, time.Hour)
	if err := verify(t.Context(), peer, late, "exe_1", "alice", next.Add(9*time.Minute)); err != nil {
		t.Errorf("a new replica refuses the previous period's token: %v", err)
	}

	// Each key was stored with an expiry: the end of its period plus the token lifetime
	// and the clock skew, from when it was stored.
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.ttls) < 2 {
		t.Fatalf("stored %d keys, want one per period", len(store.ttls))
	}
	for name, ttl := range store.ttls {
		if ttl <= 0 || ttl > time.Hour+15*time.Minute+time.Minute {
			t.Errorf("key %s stored for %v", name, ttl)
		}
	}
}

// recordingStore records the ttl of every secret stored.
type recordingStore struct {
	*memory.Store
	mu   sync.Mutex
	ttls map[string]time.Duration
}

func (r *recordingStore) Secret(ctx context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error) {
	r.mu.Lock()
	if r.ttls == nil {
		r.ttls = map[string]time.Duration{}
	}
	if _, ok := r.ttls[name]; !ok {
		r.ttls[name] = ttl
	}
	r.mu.Unlock()
	return r.Store.Secret(ctx, name, candidate, ttl)
}

// keyName returns the key name a token carries (its source and period).
func keyName(t *testing.T, token string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 9 {
		t.Fatalf("token %q: %v", token, err)
	}
	return string(raw[1:9])
}

// Two replicas on one store sign with the same key and accept each other's tokens, also
// across a rotation, whichever of them stores the new period's key.
func TestStreamTokensTwoReplicas(t *testing.T) {
	store := memory.New()
	a := storeTokens(t, store, 15*time.Minute, time.Hour)
	b := storeTokens(t, store, 15*time.Minute, time.Hour)
	next := t0.Truncate(time.Hour).Add(time.Hour)
	for _, at := range []time.Time{t0, next.Add(time.Second), next.Add(2 * time.Hour)} {
		for _, pair := range [][2]*auth.StreamTokens{{a, b}, {b, a}} {
			token := sign(t, pair[0], "alice", at)
			if err := verify(t.Context(), pair[1], token, "exe_1", "alice", at.Add(time.Minute)); err != nil {
				t.Errorf("at %v: a replica refuses the other's token: %v", at, err)
			}
		}
	}
	// A replica whose clock is behind accepts the tokens of one already in the next
	// period.
	ahead := sign(t, a, "alice", next.Add(2*time.Hour+time.Hour+time.Second))
	if err := verify(t.Context(), b, ahead, "exe_1", "alice", next.Add(2*time.Hour+time.Hour-30*time.Second)); err != nil {
		t.Errorf("a replica 30 s behind refuses the next period's token: %v", err)
	}
}

// A change of the key file rotates: the new key signs at once, the previous one verifies
// what it signed; a file too short to be a key changes nothing and is logged.
func TestStreamTokensKeyFileRotates(t *testing.T) {
	t.Parallel()
	first := bytes.Repeat([]byte("1"), auth.MinStreamTokenKeySize)
	path := writeKey(t, first)
	clk := newClock(t0)
	logs := &logSink{}
	cfg := auth.StreamTokenConfig{KeyFile: path, TTL: 15 * time.Minute, KeyRotation: time.Hour, Now: clk.nowFunc()}
	peer, err := auth.NewStreamTokens(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = logs.logger()
	s, err := auth.NewStreamTokens(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Another replica mounting the same file accepts the tokens.
	old := sign(t, s, "alice", t0)
	if err := verify(t.Context(), peer, old, "exe_1", "alice", t0); err != nil {
		t.Fatalf("a replica with the same key file refuses: %v", err)
	}

	clk.set(t0.Add(time.Minute))
	replaceKey(t, path, bytes.Repeat([]byte("2"), auth.MinStreamTokenKeySize))
	withinReloadBound(t, func() bool { return keyName(t, sign(t, s, "alice", t0.Add(time.Minute))) != keyName(t, old) })
	if !logs.contains("Stream token key file reloaded") {
		t.Errorf("the reload is not logged:\n%s", logs)
	}
	fresh := sign(t, s, "alice", t0.Add(time.Minute))
	for name, token := range map[string]string{"the previous key's": old, "the new key's": fresh} {
		if err := verify(t.Context(), s, token, "exe_1", "alice", t0.Add(10*time.Minute)); err != nil {
			t.Errorf("%s token after the change: %v", name, err)
		}
	}

	replaceKey(t, path, []byte("short"))
	withinReloadBound(t, func() bool { return logs.contains("Cannot use the stream token key file") })
	if keyName(t, sign(t, s, "alice", t0.Add(time.Minute))) != keyName(t, fresh) {
		t.Error("a short key file replaced the key")
	}
	if out := logs.String(); strings.Contains(out, string(first[:8])) || strings.Contains(out, "22222222") {
		t.Errorf("the log holds a key:\n%s", out)
	}
}

// TestStreamTokensConcurrent signs and verifies across periods while the key file
// changes, for the race detector.
func TestStreamTokensConcurrent(t *testing.T) {
	t.Parallel()
	path := writeKey(t, bytes.Repeat([]byte("a"), auth.MinStreamTokenKeySize))
	stores := map[string]*auth.StreamTokens{
		"store":    storeTokens(t, memory.New(), time.Minute, time.Minute),
		"key file": fileTokens(t, path),
	}
	var wg sync.WaitGroup
	// The store's tokens cross a rotation every minute; the key file's stay within the
	// lifetime of the keys it replaces.
	for name, s := range stores {
		step := time.Second
		if name == "key file" {
			step = 100 * time.Millisecond
		}
		for w := range 4 {
			wg.Go(func() {
				for i := range 300 {
					at := t0.Add(time.Duration(i*(w+1)) * step)
					token, err := s.Sign(t.Context(), "exe_1", "alice", at)
					if err != nil {
						t.Error(err)
						return
					}
					if err := verify(t.Context(), s, token, "exe_1", "alice", at); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	for i := range 3 {
		replaceKey(t, path, bytes.Repeat([]byte{byte('b' + i)}, auth.MinStreamTokenKeySize))
		time.Sleep(600 * time.Millisecond)
	}
	wg.Wait()
}

func BenchmarkStreamTokensVerify(b *testing.B) {
	s, err := auth.NewStreamTokens(b.Context(), auth.StreamTokenConfig{Store: memory.New(), Now: func() time.Time { return t0 }})
	if err != nil {
		b.Fatal(err)
	}
	const id, owner = "exe_01J9Z8Q6Y0000000000000000000", "system:serviceaccount:team-a:bot"
	token, err := s.Sign(b.Context(), id, owner, t0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := verify(b.Context(), s, token, id, owner, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// fileTokens returns stream tokens whose key is the file at path.
func fileTokens(t *testing.T, path string) *auth.StreamTokens {
	t.Helper()
	s, err := auth.NewStreamTokens(t.Context(), auth.StreamTokenConfig{KeyFile: path, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writeKey(t *testing.T, key []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// replaceKey replaces the key file as a whole, as a Secret volume does.
func replaceKey(t *testing.T, path string, key []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}
