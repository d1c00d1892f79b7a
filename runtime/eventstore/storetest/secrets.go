package storetest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Secrets runs the conformance suite of eventstore.Secrets against the stores
// newHarness returns (see Log): the first candidate stored under a name is every
// handle's secret until it expires.
func Secrets(t *testing.T, newHarness func(t *testing.T) Harness[eventstore.Secrets]) {
	run(t, secretTests, newHarness)
}

var secretTests = []test[eventstore.Secrets]{
	{"SecretSharedOnce", testSecretSharedOnce},
	{"SecretExpires", testSecretExpires},
	{"Close", testSecretsClose},
}

// testSecretSharedOnce: the first candidate stored under a name is the secret every
// handle gets, also when several race to store theirs.
func testSecretSharedOnce(t *testing.T, h Harness[eventstore.Secrets]) {
	ctx := t.Context()
	name := "secret-" + rand.Text()
	first, err := h.Store.Secret(ctx, name, []byte("first"), h.Retention)
	if err != nil || string(first) != "first" {
		t.Fatalf("Secret: %q, %v; want the candidate stored", first, err)
	}
	first[0] = 'X' // the caller's own copy
	again, err := h.Peer.Secret(ctx, name, []byte("second"), h.Retention)
	if err != nil || string(again) != "first" {
		t.Fatalf("Secret from the peer: %q, %v; want the first candidate", again, err)
	}

	raced := "secret-" + rand.Text()
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		s := h.Store
		if i%2 == 1 {
			s = h.Peer
		}
		wg.Go(func() {
			b, err := s.Secret(ctx, raced, fmt.Appendf(nil, "candidate-%d", i), h.Retention)
			if err != nil {
				t.Errorf("Secret: %v", err)
			}
			got[i] = string(b)
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatalf("racing Secret calls got %q: want one secret for all", got)
		}
	}

	for _, c := range []struct {
		name      string
		candidate []byte
		ttl       time.Duration
	}{{"", []byte("x"), time.Hour}, {name, nil, time.Hour}, {name, []byte("x"), 0}, {name, []byte("x"), -time.Second}} {
		if _, err := h.Store.Secret(ctx, c.name, c.candidate, c.ttl); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("Secret(%q, %q, %v): %v, want ErrInvalid", c.name, c.candidate, c.ttl, err)
		}
	}
}

// testSecretExpires: a secret is gone ttl after it was stored, for every handle; the
// next candidate offered then becomes the secret. Asking again does not extend it.
func testSecretExpires(t *testing.T, h Harness[eventstore.Secrets]) {
	ctx := t.Context()
	name := "secret-" + rand.Text()
	if got, err := h.Store.Secret(ctx, name, []byte("first"), h.Retention); err != nil || string(got) != "first" {
		t.Fatalf("Secret: %q, %v; want the candidate stored", got, err)
	}
	h.Advance(h.Retention / 2)
	if got, err := h.Peer.Secret(ctx, name, []byte("second"), h.Retention); err != nil || string(got) != "first" {
		t.Fatalf("Secret before its ttl: %q, %v; want the first candidate", got, err)
	}
	h.Advance(h.Retention)
	if got, err := h.Peer.Secret(ctx, name, []byte("third"), h.Retention); err != nil || string(got) != "third" {
		t.Fatalf("Secret after its ttl: %q, %v; want the new candidate", got, err)
	}
}

func testSecretsClose(t *testing.T, h Harness[eventstore.Secrets]) {
	if err := h.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err := h.Store.Secret(t.Context(), "secret-"+rand.Text(), []byte("candidate"), h.Retention)
	checkClosed(t, map[string]error{"Secret": err})
}
