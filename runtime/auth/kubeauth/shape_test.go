package kubeauth

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// jwt returns a token of the given header and payload (JSON) and a signature of junk.
func jwt(header, payload string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString([]byte("not a signature"))
}

func TestPlausible(t *testing.T) {
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	audiences := []string{"switchboard", "other"}
	const header = `{"alg":"RS256","kid":"k1"}`
	future := `"exp":1796220000` // 14:00 UTC, an hour after now
	tests := []struct {
		what  string
		token string
		want  bool
	}{
		{"aud a string", jwt(header, `{"aud":"switchboard",`+future+`}`), true},
		{"aud a list naming it", jwt(header, `{"aud":["https://kubernetes.default.svc","other"],`+future+`}`), true},
		{"fractional exp", jwt(header, `{"aud":"other","exp":1796220000.5}`), true},
		{"expired within the leeway", jwt(header, `{"aud":"switchboard","exp":1796216360}`), true}, // 40 s ago
		{"padding-free header with spaces", jwt(` {"alg":"ES256"}`, `{"aud":"switchboard",`+future+`}`), true},
		{"another audience", jwt(header, `{"aud":"https://kubernetes.default.svc",`+future+`}`), false},
		{"an empty audience list", jwt(header, `{"aud":[],`+future+`}`), false},
		{"no audience", jwt(header, `{`+future+`}`), false},
		{"an audience of another type", jwt(header, `{"aud":7,`+future+`}`), false},
		{"expired", jwt(header, `{"aud":"switchboard","exp":1796216330}`), false}, // 70 s ago, beyond the leeway
		{"no exp", jwt(header, `{"aud":"switchboard"}`), false},
		{"exp not a number", jwt(header, `{"aud":"switchboard","exp":"tomorrow"}`), false},
		{"alg none", jwt(`{"alg":"none"}`, `{"aud":"switchboard",`+future+`}`), false},
		{"no alg", jwt(`{"typ":"JWT"}`, `{"aud":"switchboard",`+future+`}`), false},
		{"header null", jwt(`null`, `{"aud":"switchboard",`+future+`}`), false},
		{"payload a list", jwt(header, `["switchboard"]`), false},
		{"payload not JSON", jwt(header, `aud=switchboard`), false},
		{"garbage", "not-a-token", false},
		{"hex", strings.Repeat("0f", 32), false},
		{"two segments", strings.Join(strings.Split(jwt(header, `{"aud":"switchboard",`+future+`}`), ".")[:2], "."), false},
		{"four segments", jwt(header, `{"aud":"switchboard",`+future+`}`) + ".x", false},
		{"no signature", strings.TrimRight(jwt(header, `{"aud":"switchboard",`+future+`}`), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"), false},
		{"signature not base64url", jwt(header, `{"aud":"switchboard",`+future+`}`) + "!", false},
		{"padded base64", base64.StdEncoding.EncodeToString([]byte(header)) + "." + strings.SplitN(jwt(header, `{"aud":"switchboard",`+future+`}`), ".", 2)[1], false},
		{"too long", jwt(header, `{"aud":"switchboard",`+future+`,"pad":"`+strings.Repeat("x", maxTokenBytes)+`"}`), false},
	}
	for _, tt := range tests {
		if got := plausible(tt.token, audiences, now); got != tt.want {
			t.Errorf("%s: plausible = %v, want %v", tt.what, got, tt.want)
		}
	}
}

// FuzzPlausible checks that plausible never panics, and accepts only what is shaped like
// a JWT: three segments, a header and a payload that are base64url.
func FuzzPlausible(f *testing.F) {
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	f.Add(jwt(`{"alg":"RS256"}`, `{"aud":"switchboard","exp":1796220000}`))
	f.Add(jwt(`{"alg":"RS256"}`, `{"aud":["a","switchboard"],"exp":1.79622e9}`))
	f.Add(jwt(`{"alg":"RS256"}`, `{"aud":null,"exp":null}`))
	f.Add("a.b.c")
	f.Add("..")
	f.Add("")
	f.Fuzz(func(t *testing.T, token string) {
		if !plausible(token, []string{"switchboard"}, now) {
			return
		}
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			t.Fatalf("%q has %d segments", token, len(parts))
		}
		for _, p := range parts {
			if _, err := base64.RawURLEncoding.DecodeString(p); err != nil || p == "" {
				t.Fatalf("segment %q of %q: %v", p, token, err)
			}
		}
	})
}

// A client address may fail FailureBurst times in a row; a success costs nothing, an
// authentication in progress counts until it has succeeded; past the burst the address
// waits, others do not.
func TestFailureLimit(t *testing.T) {
	f := newFailureLimit(3)
	from := func(addr string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "/v1/executions", nil)
		r.RemoteAddr = addr
		return r
	}
	a := from("192.0.2.7:40000")
	for range 2 {
		f.attempt(a).done(true)
	}
	for range 10 {
		f.attempt(a).done(false)
	}
	pending := f.attempt(from("192.0.2.7:40001")) // the third, from another port
	if pending == nil {
		t.Fatal("throttled within the burst")
	}
	if f.attempt(a) != nil {
		t.Error("a fourth attempt while the third is in progress was let through")
	}
	pending.done(false)
	f.attempt(a).done(true)
	if f.attempt(a) != nil {
		t.Error("a fourth failure in a row was let through")
	}
	if f.attempt(from("192.0.2.8:40000")) == nil {
		t.Error("another address was throttled")
	}
}

// The state of at most maxAddresses addresses is kept, the least recently seen
// forgotten first: about 250 bytes each.
func TestFailureLimitIsBounded(t *testing.T) {
	f := newFailureLimit(DefaultFailureBurst)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 2 * maxAddresses {
		r, _ := http.NewRequest(http.MethodGet, "/v1/executions", nil)
		r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 40000).String()
		f.attempt(r).done(true)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if n := f.byAddr.Len(); n != maxAddresses {
		t.Errorf("%d addresses remembered after %d, want %d", n, 2*maxAddresses, maxAddresses)
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("the state of %d addresses: %d bytes, %d each", maxAddresses, grown, grown/maxAddresses)
	if grown > 4<<20 {
		t.Errorf("the state of %d addresses takes %d bytes, want at most 4 MiB", maxAddresses, grown)
	}
}

func TestClientKey(t *testing.T) {
	for addr, want := range map[string]any{
		"192.0.2.7:40000":              netip.MustParseAddr("192.0.2.7"),
		"[::ffff:192.0.2.7]:40000":     netip.MustParseAddr("192.0.2.7"),
		"[2001:db8:1:2:3:4:5:6]:443":   netip.MustParsePrefix("2001:db8:1:2::/64"),
		"[2001:db8:1:2:ffff::1]:40000": netip.MustParsePrefix("2001:db8:1:2::/64"),
		"@":                            "@",
	} {
		if got := clientKey(addr); got != want {
			t.Errorf("clientKey(%q) = %v, want %v", addr, got, want)
		}
	}
}

// The review client's rate limiter refuses at once a wait longer than maxThrottleWait.
func TestBoundedWait(t *testing.T) {
	l := boundedWait{flowcontrol.NewTokenBucketRateLimiter(0.1, 1)} // one token, then one every 10 s
	if err := l.Wait(context.Background()); err != nil {
		t.Fatalf("the first token: %v", err)
	}
	if err := l.Wait(context.Background()); !errors.Is(err, errReviewsBusy) {
		t.Errorf("a 10 s wait: %v, want errReviewsBusy", err)
	}
}
