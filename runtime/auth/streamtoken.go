package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// DefaultStreamTokenTTL is how long a stream token is valid unless StreamTokenConfig
// names another lifetime (spec/authentication.md).
const DefaultStreamTokenTTL = 15 * time.Minute

// DefaultStreamTokenKeyRotation is how long one key signs stream tokens unless
// StreamTokenConfig names another period.
const DefaultStreamTokenKeyRotation = 24 * time.Hour

// MinStreamTokenKeySize is the smallest key file NewStreamTokens accepts, in bytes: the
// size of the HMAC-SHA256 output, and of the random keys it stores.
const MinStreamTokenKeySize = 32

// maxStreamTokenKeyFileSize bounds what is read from the key file.
const maxStreamTokenKeyFileSize = 64 << 10

// streamTokenClockSkew is how far apart the clocks of replicas may be: a key verifies
// from this long before its period starts, and this long after the last token it signed
// expires, so that a replica whose clock is ahead or behind accepts the tokens of the
// others.
const streamTokenClockSkew = time.Minute

// A stream token, before base64url encoding (no padding), is
//
//	version (1 byte) | source (4 bytes) | period (4 bytes) | expiry (8 bytes) | MAC (32 bytes)
//
// all big-endian: source and period name the key (below), expiry is in Unix seconds,
// and MAC is HMAC-SHA256, under that key, of streamTokenDomain, the execution id and the
// principal that owns the execution (each as its length in 4 bytes, then its bytes) and
// every byte before the MAC. Neither the execution id nor the owner is in the token: the
// id is the one of the URL the token comes with, and the server reads the owner from the
// execution, so a URL tells nobody who created the execution. The domain string keeps
// these MACs apart from any other use of the same key.
//
// Keys change every rotation period (period = Unix seconds / rotation seconds, modulo
// 2^32). Source 0 is the EventStore: the key of a period is random, stored by the first
// replica that needs it, with an expiry, and shared by all. Any other source is a key
// file, named by a digest of its content, from which the key of each period is derived.
const (
	streamTokenDomain    = "switchboard.dev/stream-token\x00"
	streamKeyDomain      = "switchboard.dev/stream-token-key\x00"
	streamKeyIDDomain    = "switchboard.dev/stream-token-key-id\x00"
	streamTokenVersion   = 2
	streamTokenHeader    = 1 + 4 + 4 + 8
	streamTokenSize      = streamTokenHeader + sha256.Size
	streamTokenStoreName = "stream-token-key"
	storeSource          = 0
)

// The errors of Parse and Verify; their text is fixed and never holds the token.
var (
	errStreamTokenMalformed = fmt.Errorf("%w: malformed stream token", ErrUnauthenticated)
	errStreamTokenInvalid   = fmt.Errorf("%w: stream token not valid for this execution", ErrUnauthenticated)
	errStreamTokenExpired   = fmt.Errorf("%w: stream token expired", ErrUnauthenticated)
)

// streamTokenEncoding is strict: a token whose last character differs only in the bits
// that the encoding ignores would otherwise decode to the same bytes and verify.
var streamTokenEncoding = base64.RawURLEncoding.Strict()

// streamTokenLen is the length of an encoded token.
var streamTokenLen = streamTokenEncoding.EncodedLen(streamTokenSize)

// SecretStore keeps the keys of stream tokens when there is no key file: the EventStore's
// Secret, shared by every replica.
type SecretStore interface {
	// Secret returns the secret stored under name, storing candidate there to expire
	// after ttl when there is none, atomically (eventstore.Secrets).
	Secret(ctx context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error)
}

// StreamTokenConfig configures NewStreamTokens.
type StreamTokenConfig struct {
	// TTL is how long a token is valid; DefaultStreamTokenTTL when 0.
	TTL time.Duration
	// KeyRotation is how long one key signs; DefaultStreamTokenKeyRotation when 0. It
	// is a whole number of seconds, at least TTL, so that a key verifies the tokens it
	// signed while the next one signs, and none before it.
	KeyRotation time.Duration
	// KeyFile names a file holding a key of at least MinStreamTokenKeySize bytes, from
	// which the key of each period is derived; every replica must mount the same file.
	// It is read again when its content changes, until the context given to
	// NewStreamTokens ends: the new key signs at once, the previous one verifies for
	// TTL more. Empty: keys come from Store.
	KeyFile string
	// Store keeps a random key per period, with an expiry, when KeyFile is empty.
	Store SecretStore
	// Now returns the current time, for the first key NewStreamTokens fetches and the
	// moment a key file change is seen; default time.Now. Sign and Parse take theirs.
	Now func() time.Time
	// Logger receives the key file's reloads and failures; default: discards.
	Logger logr.Logger
}

// StreamTokens signs and verifies stream tokens (spec/authentication.md): short-lived
// credentials that let the bearer read one execution (its events and result) as the
// principal that created it, from a URL's ?token= parameter, since a browser's
// EventSource cannot send an Authorization header. A token is URL-safe (base64url without
// padding) and carries its expiry and the name of its key, authenticated by HMAC-SHA256
// over them, the execution id and its owner.
//
// The key rotates: a current key signs, and the keys before it verify until the last
// token they signed has expired, then never again. Every replica derives the same keys
// (from the same key file or the same EventStore), so each accepts the tokens of the
// others, across rotations. A StreamTokens is safe for concurrent use; signing and
// verifying take no lock once the period's key is known.
type StreamTokens struct {
	ttl      time.Duration
	rotation int64 // seconds
	store    SecretStore
	now      func() time.Time
	log      logr.Logger

	ring atomic.Pointer[keyRing]
	mu   sync.Mutex // serialises the replacements of ring
}

// keyRing is the keys in force, immutable: the key sources and the period keys known.
type keyRing struct {
	// sources[0] signs; the others are key files replaced since, which verify until
	// their retirement plus the token lifetime.
	sources []keySource
	keys    []periodKey
}

// keySource is the EventStore (id storeSource, no master) or one key file's content.
type keySource struct {
	id      uint32
	master  []byte
	retired time.Time // zero while it signs
}

// periodKey is the key of one source for one period.
type periodKey struct {
	source uint32
	period int64
	key    []byte
}

// StreamToken is a token Parse found well-formed, unexpired and under a key in force;
// Verify checks its MAC.
type StreamToken struct {
	s      *StreamTokens
	raw    [streamTokenSize]byte
	source uint32
	period int64
	now    time.Time
}

// NewStreamTokens returns a signer of stream tokens, with the key in force now: the key
// file's, or the one of the current period in cfg.Store (stored now if no replica has
// yet). A key file that cannot be read or holds fewer than MinStreamTokenKeySize bytes,
// a rotation shorter than the lifetime, or a store that does not answer is an error,
// whose text does not hold the key. The key file is watched until ctx ends.
func NewStreamTokens(ctx context.Context, cfg StreamTokenConfig) (*StreamTokens, error) {
	s := &StreamTokens{ttl: cfg.TTL, store: cfg.Store, now: cfg.Now, log: cfg.Logger}
	if s.ttl <= 0 {
		s.ttl = DefaultStreamTokenTTL
	}
	rotation := cfg.KeyRotation
	if rotation <= 0 {
		rotation = DefaultStreamTokenKeyRotation
	}
	if rotation < s.ttl || rotation%time.Second != 0 {
		return nil, fmt.Errorf("stream token key rotation %v: want whole seconds, at least the token lifetime %v", rotation, s.ttl)
	}
	s.rotation = int64(rotation / time.Second)
	if s.now == nil {
		s.now = time.Now
	}
	if s.log.GetSink() == nil {
		s.log = logr.Discard()
	}
	now := s.now()
	if cfg.KeyFile == "" {
		if cfg.Store == nil {
			return nil, errors.New("stream tokens need a key file or a store")
		}
		s.ring.Store(&keyRing{sources: []keySource{{id: storeSource}}})
		if _, err := s.key(ctx, storeSource, s.period(now), now); err != nil {
			return nil, err
		}
		return s, nil
	}
	data, err := readStreamTokenKeyFile(cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	s.ring.Store(&keyRing{sources: []keySource{fileSource(data)}})
	go pollFile(ctx, cfg.KeyFile, data, readStreamTokenKeyFile, func(data []byte) {
		s.rotate(fileSource(data), s.now())
		s.log.Info("Stream token key file reloaded; the previous key verifies for the token lifetime", "path", cfg.KeyFile, "ttl", s.ttl)
	}, func(err error) {
		s.log.Error(err, "Cannot use the stream token key file; the previous key stays in force", "path", cfg.KeyFile)
	})
	return s, nil
}

// readStreamTokenKeyFile reads a key file, refusing one that is too short.
func readStreamTokenKeyFile(path string) ([]byte, error) {
	data, err := readFileLimited(path, "stream token key file", maxStreamTokenKeyFileSize)
	if err != nil {
		return nil, err
	}
	if len(data) < MinStreamTokenKeySize {
		return nil, fmt.Errorf("stream token key file %s has %d bytes, want at least %d", path, len(data), MinStreamTokenKeySize)
	}
	return data, nil
}

// fileSource is the key source of a key file's content.
func fileSource(master []byte) keySource {
	h := hmac.New(sha256.New, master)
	h.Write([]byte(streamKeyIDDomain))
	id := binary.BigEndian.Uint32(h.Sum(nil))
	if id == storeSource {
		id = 1
	}
	return keySource{id: id, master: master}
}

// generateKey returns a new random key of MinStreamTokenKeySize bytes from crypto/rand,
// for a period's key in the store.
func generateKey() []byte {
	key := make([]byte, MinStreamTokenKeySize)
	if _, err := rand.Read(key); err != nil {
		// crypto/rand.Read does not fail on supported platforms (it crashes the
		// program itself when the system's generator is unusable).
		panic(fmt.Sprintf("auth: read random key: %v", err))
	}
	return key
}

// Sign returns a token that lets its bearer read the execution executionID, which owner
// created, until now plus the lifetime (to the second), under the current key. It fails
// only when the key of a new period cannot be read from the store.
func (s *StreamTokens) Sign(ctx context.Context, executionID, owner string, now time.Time) (string, error) {
	return s.sign(ctx, executionID, owner, now, now.Add(s.ttl))
}

// sign is Sign with the expiry given.
func (s *StreamTokens) sign(ctx context.Context, executionID, owner string, now, expiry time.Time) (string, error) {
	period := s.period(now)
	source := s.ring.Load().sources[0].id
	key, err := s.key(ctx, source, period, now)
	if err != nil {
		return "", err
	}
	raw := make([]byte, streamTokenHeader, streamTokenSize)
	raw[0] = streamTokenVersion
	binary.BigEndian.PutUint32(raw[1:], source)
	binary.BigEndian.PutUint32(raw[5:], uint32(period))
	binary.BigEndian.PutUint64(raw[9:], uint64(expiry.Unix()))
	raw = streamTokenMAC(raw, key, executionID, owner)
	return streamTokenEncoding.EncodeToString(raw), nil
}

// Parse checks what can be checked of token without the execution's owner: its form, its
// expiry at now, and that its key is in force at now. It reads nothing from the store.
// Its errors wrap ErrUnauthenticated: malformed, expired, or not valid (a key retired or
// unknown, an expiry later than this server signs).
func (s *StreamTokens) Parse(token string, now time.Time) (StreamToken, error) {
	t := StreamToken{s: s, now: now}
	if len(token) != streamTokenLen || !base64URL(token) {
		return t, errStreamTokenMalformed
	}
	n, err := streamTokenEncoding.Decode(t.raw[:], []byte(token))
	if err != nil || n != streamTokenSize || t.raw[0] != streamTokenVersion {
		return t, errStreamTokenMalformed
	}
	expiry := int64(binary.BigEndian.Uint64(t.raw[9:]))
	switch {
	case now.Unix() >= expiry:
		return t, errStreamTokenExpired
	case expiry > now.Add(s.ttl+streamTokenClockSkew).Unix():
		return t, errStreamTokenInvalid
	}
	t.period = nearestPeriod(s.period(now), binary.BigEndian.Uint32(t.raw[5:]))
	id := binary.BigEndian.Uint32(t.raw[1:])
	ring := s.ring.Load()
	i := slices.IndexFunc(ring.sources, func(k keySource) bool { return k.id == id })
	if i < 0 || !s.inForce(ring.sources[i], t.period, now) {
		return t, errStreamTokenInvalid
	}
	t.source = id
	return t, nil
}

// Verify checks that t was signed for executionID, which owner created. It may read the
// key of t's period from the store, once per period and replica. Its error wraps
// ErrUnauthenticated (not valid for this execution), or is the store's. The MAC is
// compared in constant time.
func (t StreamToken) Verify(ctx context.Context, executionID, owner string) error {
	if t.s == nil {
		return errStreamTokenMalformed
	}
	key, err := t.s.key(ctx, t.source, t.period, t.now)
	if err != nil {
		return err
	}
	want := streamTokenMAC(append(make([]byte, 0, streamTokenSize), t.raw[:streamTokenHeader]...), key, executionID, owner)
	if !hmac.Equal(t.raw[streamTokenHeader:], want[streamTokenHeader:]) {
		return errStreamTokenInvalid
	}
	return nil
}

// streamTokenMAC appends to body, the token's header, its MAC under key for executionID
// and owner.
func streamTokenMAC(body, key []byte, executionID, owner string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(streamTokenDomain))
	var n [4]byte
	for _, s := range []string{executionID, owner} {
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	h.Write(body)
	return h.Sum(body)
}

// nearestPeriod returns the period nearest to current whose value modulo 2^32 is p.
func nearestPeriod(current int64, p uint32) int64 {
	return current - int64(int32(uint32(current)-p))
}

// period is the rotation period of now.
func (s *StreamTokens) period(now time.Time) int64 {
	return now.Unix() / s.rotation
}

// inForce reports whether the key of source for period verifies at now: from the clock
// skew before the period starts, while tokens it signed may be unexpired (the period's
// end plus the lifetime) plus the skew, and, for a key file replaced since, while the
// tokens signed before its replacement may be.
func (s *StreamTokens) inForce(source keySource, period int64, now time.Time) bool {
	start := time.Unix(period*s.rotation, 0)
	end := time.Unix((period+1)*s.rotation, 0).Add(s.ttl + streamTokenClockSkew)
	if !source.retired.IsZero() {
		end = minTime(end, source.retired.Add(s.ttl+streamTokenClockSkew))
	}
	return !now.Before(start.Add(-streamTokenClockSkew)) && now.Before(end)
}

// storeTTL is how long the store keeps the key of period, stored at now: until it is no
// longer in force.
func (s *StreamTokens) storeTTL(period int64, now time.Time) time.Duration {
	return time.Unix((period+1)*s.rotation, 0).Add(s.ttl + streamTokenClockSkew).Sub(now)
}

// key returns the key of source for period: from the ring, or derived from its key file,
// or read from the store (and stored, the first time any replica asks). Keys no longer
// in force at now leave the ring then.
func (s *StreamTokens) key(ctx context.Context, source uint32, period int64, now time.Time) ([]byte, error) {
	if k := s.ring.Load().find(source, period); k != nil {
		return k, nil
	}
	return s.newKey(ctx, source, period, now)
}

// newKey is key for a key not in the ring yet: once per period and source. It is a
// function of its own so that the frame of key, on the path of every request with a
// stream token, stays small.
func (s *StreamTokens) newKey(ctx context.Context, source uint32, period int64, now time.Time) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ring := s.ring.Load()
	if k := ring.find(source, period); k != nil {
		return k, nil
	}
	i := slices.IndexFunc(ring.sources, func(k keySource) bool { return k.id == source })
	if i < 0 {
		return nil, errStreamTokenInvalid // replaced since the token was parsed
	}
	var key []byte
	if master := ring.sources[i].master; master != nil {
		h := hmac.New(sha256.New, master)
		h.Write([]byte(streamKeyDomain))
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(s.rotation)))
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(period)))
		key = h.Sum(nil)
	} else {
		// The rotation is part of the name: replicas configured differently do not
		// share keys whose periods differ.
		name := fmt.Sprintf("%s:%ds:%d", streamTokenStoreName, s.rotation, period)
		var err error
		if key, err = s.store.Secret(ctx, name, generateKey(), s.storeTTL(period, now)); err != nil {
			return nil, fmt.Errorf("stream token key from the store: %w", err)
		}
	}
	next := &keyRing{sources: ring.sources}
	for _, k := range ring.keys {
		if j := slices.IndexFunc(ring.sources, func(src keySource) bool { return src.id == k.source }); j >= 0 && s.inForce(ring.sources[j], k.period, now) {
			next.keys = append(next.keys, k)
		}
	}
	next.keys = append(next.keys, periodKey{source: source, period: period, key: key})
	s.ring.Store(next)
	return key, nil
}

// rotate makes source, a key file's new content, the key that signs from now on. The
// source that signed until now retires, and retired ones whose tokens have all expired
// leave the ring. A content seen before (a file changed back) signs again.
func (s *StreamTokens) rotate(source keySource, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ring := s.ring.Load()
	next := &keyRing{sources: []keySource{source}}
	for i, src := range ring.sources {
		if src.id == source.id {
			continue
		}
		if i == 0 {
			src.retired = now
		}
		if now.Before(src.retired.Add(s.ttl + streamTokenClockSkew)) {
			next.sources = append(next.sources, src)
		}
	}
	for _, k := range ring.keys {
		if slices.ContainsFunc(next.sources, func(src keySource) bool { return src.id == k.source }) {
			next.keys = append(next.keys, k)
		}
	}
	s.ring.Store(next)
}

// find returns the key of source for period, or nil.
func (r *keyRing) find(source uint32, period int64) []byte {
	for _, k := range r.keys {
		if k.source == source && k.period == period {
			return k.key
		}
	}
	return nil
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// base64URL reports whether s holds only characters of the base64url alphabet. The
// decoder alone would also skip line breaks, which a token never contains.
func base64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}
