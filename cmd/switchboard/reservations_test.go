package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/client"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestReservationLimitFlag runs the binary with --max-reservations-per-principal=2: with
// --auth=none all callers share one count, a third key is refused with 429 rate_limited
// until the first expires (a day from now), and a refused submission's key is not
// counted.
func TestReservationLimitFlag(t *testing.T) {
	e := setup(t, "--max-reservations-per-principal=2")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := e.client.Submit(ctx, textRequest("translate", "no model serves this"), client.WithIdempotencyKey("refused")); err == nil {
		t.Fatal("a submission of an ability no model serves was accepted")
	}
	for _, key := range []string{"first", "second"} {
		if _, err := e.client.Submit(ctx, textRequest("chat", "hello"), client.WithIdempotencyKey(key)); err != nil {
			t.Fatalf("key %s: %v", key, err)
		}
	}
	_, err := e.client.Submit(ctx, textRequest("chat", "hello"), client.WithIdempotencyKey("third"))
	ce, ok := errors.AsType[*client.Error](err)
	if !ok || ce.StatusCode != http.StatusTooManyRequests || ce.Code() != protocol.CodeRateLimited || !ce.Retryable() {
		t.Fatalf("third key: %v, want a retryable 429 rate_limited", err)
	}
	if ce.RetryAfter < 23*time.Hour {
		t.Errorf("third key: retry after %v, want about a day, when the first key expires", ce.RetryAfter)
	}
	if acc, err := e.client.Submit(ctx, textRequest("chat", "hello"), client.WithIdempotencyKey("first")); err != nil || !acc.Replayed {
		t.Errorf("replay of the first key at the limit: %+v, %v", acc, err)
	}
}
