package engine

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
)

// idEncoding is base32 with Crockford's alphabet in lower case. The alphabet is in
// ascending byte order, so ids compare like the bytes they encode.
var idEncoding = base32.NewEncoding(idAlphabet).WithPadding(base32.NoPadding)

const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

const (
	// idRandomBytes is the unguessable part of an id: 128 bits (spec/http-api.md,
	// "Conventions").
	idRandomBytes = 16
	// idTimeBytes holds the creation time in milliseconds, like a ULID, so that ids of
	// later executions sort later, which keeps logs and store keys roughly in order.
	idTimeBytes = 6
	// idLength is the length of an id after its prefix: the base32 characters of its
	// time and random bytes.
	idLength = ((idTimeBytes+idRandomBytes)*8 + 4) / 5
)

// NewExecutionID returns a new execution id: "exe_" and 36 characters of lower-case
// Crockford base32 encoding a 48-bit millisecond timestamp followed by 128 bits from
// crypto/rand. The random part alone makes ids unguessable; the timestamp only orders
// them.
func NewExecutionID() string {
	var b [8 + idRandomBytes]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli()))
	// crypto/rand.Read never fails (it aborts the program if the OS cannot supply
	// randomness), so there is no error to handle.
	_, _ = rand.Read(b[8:])
	return "exe_" + idEncoding.EncodeToString(b[8-idTimeBytes:])
}

// randomSuffix returns 40 random bits in the id alphabet, to tell apart replicas that
// share a name.
func randomSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

// IsExecutionID reports whether s has the form of an execution id (NewExecutionID), so
// that a caller-supplied string is logged only when it is one.
func IsExecutionID(s string) bool {
	const prefix = "exe_"
	if len(s) != len(prefix)+idLength || s[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(s); i++ {
		if strings.IndexByte(idAlphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}
