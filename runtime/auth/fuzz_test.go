package auth

import (
	"crypto/sha256"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
)

// parseErrorForm is the shape of every error of parseTokens: the file, the line number and
// fixed text, with numbers only. A field of the line would not fit it.
var parseErrorForm = regexp.MustCompile(`^tokens file fuzz: line [0-9]+: (` +
	`want at least 3 comma-separated fields token,principal,namespaces\[,grant…\], got [0-9]+|` +
	`the token is empty|` +
	`the token holds a character other than visible ASCII|` +
	`the principal is empty|` +
	`the principal is not valid UTF-8 or holds a control character|` +
	`namespace [0-9]+ is empty|` +
	`namespace [0-9]+ is neither \* nor a DNS-1123 label \(at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit\)|` +
	`field [0-9]+ is empty|` +
	`field [0-9]+ is not a grant \(read, cancel or metrics\)|` +
	`field [0-9]+ repeats a grant|` +
	`duplicate token \(first on line [0-9]+\)|` +
	`the principal is also on line [0-9]+, with other namespaces or grants)$`)

// FuzzParseTokens checks that parseTokens either fails with an error of the fixed form,
// which cannot hold a token, or returns a set in which every token of the file maps to
// the principal of its line, with the grants the line names and no others. Its seed
// corpus is testdata/fuzz/FuzzParseTokens.
func FuzzParseTokens(f *testing.F) {
	f.Fuzz(func(t *testing.T, data string) {
		set, err := parseTokens("fuzz", []byte(data))
		if err != nil {
			if !parseErrorForm.MatchString(err.Error()) {
				t.Fatalf("error %q is not of the fixed form", err)
			}
			return
		}
		for _, line := range strings.Split(strings.TrimPrefix(data, "\ufeff"), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			fields := strings.Split(line, ",")
			token, principal := strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1])
			if got := set.byDigest[sha256.Sum256([]byte(token))]; got != principal {
				t.Fatalf("token of line %q maps to %q", line, got)
			}
			g, ok := set.grants[principal]
			if !ok {
				t.Fatalf("principal of line %q has no grant", line)
			}
			named := map[string]bool{}
			for _, f := range fields[3:] {
				named[strings.TrimSpace(f)] = true
			}
			if g.read != named[grantRead] || g.cancel != named[grantCancel] || g.metrics != named[grantMetrics] {
				t.Fatalf("line %q: grants %+v", line, g)
			}
		}
	})
}

// FuzzParseStreamToken checks that no string but the token Sign returned verifies, and
// that Parse's and Verify's errors are the fixed ones.
func FuzzParseStreamToken(f *testing.F) {
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	s, err := NewStreamTokens(f.Context(), StreamTokenConfig{Store: memory.New(), TTL: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		f.Fatal(err)
	}
	valid, err := s.Sign(f.Context(), "exe_1", "alice", now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid + "A")
	f.Add("")
	f.Add("AgAAAAAAAAAAAAAAAGpO3sAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, token string) {
		parsed, err := s.Parse(token, now)
		if err == nil {
			err = parsed.Verify(t.Context(), "exe_1", "alice")
		}
		switch {
		case token == valid:
			if err != nil {
				t.Fatalf("the signed token: %v", err)
			}
		case err == nil:
			t.Fatalf("%q verified", token)
		case err != errStreamTokenMalformed && err != errStreamTokenInvalid && err != errStreamTokenExpired: //nolint:errorlint // the exact values are the contract
			t.Fatalf("unexpected error %v", err)
		}
	})
}
