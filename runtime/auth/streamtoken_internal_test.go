package auth

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
)

// A key out of force verifies nothing, even a token whose expiry lies ahead (one a key
// that leaked could make): the previous period's key verifies during the token lifetime
// after the rotation, the one before never; a replaced key file's key verifies for the
// token lifetime after its replacement, then never.
func TestStreamTokenKeysLeaveForce(t *testing.T) {
	ctx := t.Context()
	hour := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC) // a period starts
	s, err := NewStreamTokens(ctx, StreamTokenConfig{Store: memory.New(), TTL: 15 * time.Minute, KeyRotation: time.Hour,
		Now: func() time.Time { return hour }})
	if err != nil {
		t.Fatal(err)
	}
	check := hour.Add(10 * time.Minute)
	for _, tc := range []struct {
		name     string
		signedAt time.Time
		want     error
	}{
		{"current", hour.Add(time.Minute), nil},
		{"previous", hour.Add(-time.Minute), nil},
		{"older", hour.Add(-time.Hour - time.Minute), errStreamTokenInvalid},
	} {
		token, err := s.sign(ctx, "exe_1", "alice", tc.signedAt, check.Add(5*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := s.Parse(token, check)
		if err == nil {
			err = parsed.Verify(ctx, "exe_1", "alice")
		}
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s key: %v, want %v", tc.name, err, tc.want)
		}
	}
	// After the previous period's last token could have expired, its key is out too.
	late := hour.Add(15*time.Minute + streamTokenClockSkew + time.Second)
	token, err := s.sign(ctx, "exe_1", "alice", hour.Add(-time.Minute), late.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Parse(token, late); !errors.Is(err, errStreamTokenInvalid) {
		t.Errorf("previous key after the lifetime: %v, want not valid", err)
	}

	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, bytes.Repeat([]byte("1"), MinStreamTokenKeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := NewStreamTokens(ctx, StreamTokenConfig{KeyFile: path, TTL: 15 * time.Minute, KeyRotation: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	replaced := hour.Add(5 * time.Minute)
	old, err := f.sign(ctx, "exe_1", "alice", replaced.Add(-time.Second), replaced.Add(20*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	f.rotate(fileSource(bytes.Repeat([]byte("2"), MinStreamTokenKeySize)), replaced)
	for at, want := range map[time.Time]error{
		replaced.Add(15 * time.Minute):                                    nil,
		replaced.Add(15*time.Minute + streamTokenClockSkew + time.Second): errStreamTokenInvalid,
	} {
		parsed, err := f.Parse(old, at)
		if err == nil {
			err = parsed.Verify(ctx, "exe_1", "alice")
		}
		if !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("replaced key file's token at %v after the change: %v, want %v", at.Sub(replaced), err, want)
		}
	}
}
