package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/go-logr/logr"
)

// maxTokensFileSize bounds what is read from the tokens file: a line per caller is a few
// hundred bytes, and a larger file is a mistake rather than a tokens file.
const maxTokensFileSize = 1 << 20

// Static returns the mode --auth=static (spec/authentication.md), reading callers from the
// tokens file at path: one caller per line, as
//
//	token,principal,namespace[;namespace…][,grant…]
//
// where namespace is a namespace name (a DNS-1123 label) or * for every namespace, and a
// grant is read, cancel or metrics. Blank lines and lines starting with # are ignored;
// spaces around fields are trimmed. Tokens are made of visible ASCII characters (no comma)
// and unique in the file; principals are non-empty and hold no comma or control
// character. A principal may hold several tokens (to rotate one), on lines that list the
// same namespaces and grants.
//
// A request authenticates with "Authorization: Bearer <token>". A principal may create
// executions in the namespaces of its line, and in every namespace with *; a namespace
// of "" (every namespace at once) is allowed only with *. It reads (VerbGet) and cancels
// (VerbUpdate) the executions of others there only with the grants read and cancel, as a
// caller in cluster mode needs RBAC for them; its own it always may. The grant metrics
// lets it scrape /metrics (VerbMetrics).
//
// The file is read again when its content changes, until ctx ends: a token removed from
// it is refused within about a second. A file that cannot be read or parsed then keeps the
// previous tokens in force, and the problem is logged to log. Errors and log lines name
// the file and the line number, never a field of the line, so that a token in the wrong
// column is not disclosed.
func Static(ctx context.Context, path string, log logr.Logger) (Auth, error) {
	data, err := readTokensFile(path)
	if err != nil {
		return Auth{}, err
	}
	set, err := parseTokens(path, data)
	if err != nil {
		return Auth{}, err
	}
	s := &static{}
	s.set.Store(set)
	log.Info("Tokens file loaded", "path", path, "tokens", len(set.byDigest), "principals", len(set.grants))
	go pollFile(ctx, path, data, readTokensFile, func(data []byte) {
		set, err := parseTokens(path, data)
		if err != nil {
			log.Error(err, "Invalid tokens file; the previous tokens stay in force", "path", path)
			return
		}
		s.set.Store(set)
		log.Info("Tokens file reloaded", "path", path, "tokens", len(set.byDigest), "principals", len(set.grants))
	}, func(err error) {
		log.Error(err, "Cannot read the tokens file; the previous tokens stay in force", "path", path)
	})
	return Auth{Authenticator: s, Authorizer: s}, nil
}

var (
	errNoBearerToken = fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	errUnknownToken  = fmt.Errorf("%w: unknown bearer token", ErrUnauthenticated)
)

// static serves the tokens file's current content.
type static struct {
	set atomic.Pointer[tokenSet]
}

// tokenSet is one parsed tokens file.
//
// Tokens are kept as their SHA-256 digests, and a presented token is looked up by its
// digest: the time a lookup takes depends on the digest only, and whoever presents
// tokens cannot steer a digest towards a prefix of a valid token's digest, so timing
// reveals nothing about how much of a token was right — the property a constant-time
// comparison gives, at the cost of one hash, for any number of tokens (a linear scan with
// crypto/subtle grows with the file). The plain tokens are not kept in memory either.
type tokenSet struct {
	byDigest map[[sha256.Size]byte]string // token digest → principal
	grants   map[string]grant             // principal → namespaces and grants
}

// grant is what one principal may do: the namespaces of its line and its grants.
type grant struct {
	all        bool
	namespaces map[string]bool
	// read, cancel and metrics are the line's grants.
	read, cancel, metrics bool
}

// The grants a line of the tokens file may end with.
const (
	grantRead    = "read"
	grantCancel  = "cancel"
	grantMetrics = "metrics"
)

func (s *static) Authenticate(r *http.Request) (*Principal, error) {
	token, ok := BearerToken(r)
	if !ok {
		return nil, errNoBearerToken
	}
	name, ok := s.set.Load().byDigest[sha256.Sum256([]byte(token))]
	if !ok {
		return nil, errUnknownToken
	}
	return &Principal{Name: name}, nil
}

func (s *static) Allowed(_ context.Context, p *Principal, verb, ns string) (bool, error) {
	if p == nil {
		return false, nil
	}
	g, ok := s.set.Load().grants[p.Name]
	if !ok {
		return false, nil // no longer in the file
	}
	inNamespace := g.all || (ns != "" && g.namespaces[ns])
	switch verb {
	case VerbCreate:
		return inNamespace, nil
	case VerbGet:
		return g.read && inNamespace, nil
	case VerbUpdate:
		return g.cancel && inNamespace, nil
	case VerbMetrics:
		return g.metrics, nil
	}
	return false, nil
}

// readTokensFile reads the tokens file, up to maxTokensFileSize.
func readTokensFile(path string) ([]byte, error) {
	return readFileLimited(path, "tokens file", maxTokensFileSize)
}

// parseTokens parses the content of the tokens file named name. Its errors name the file
// and the line, and never quote the line: whatever column a token was written in, it does
// not reach an error.
func parseTokens(name string, data []byte) (*tokenSet, error) {
	set := &tokenSet{
		byDigest: map[[sha256.Size]byte]string{},
		grants:   map[string]grant{},
	}
	tokenLine := map[[sha256.Size]byte]int{} // token digest → line number
	principalLine := map[string]int{}        // principal → first line number
	principalGrant := map[string]string{}    // principal → canonical namespaces and grants
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		lineErr := func(format string, args ...any) error {
			return fmt.Errorf("tokens file %s: line %d: %s", name, n, fmt.Sprintf(format, args...))
		}
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) < 3 {
			return nil, lineErr("want at least 3 comma-separated fields token,principal,namespaces[,grant…], got %d", len(fields))
		}
		token := strings.TrimSpace(fields[0])
		principal := strings.TrimSpace(fields[1])
		if token == "" {
			return nil, lineErr("the token is empty")
		}
		if !visibleASCII(token) {
			return nil, lineErr("the token holds a character other than visible ASCII")
		}
		if principal == "" {
			return nil, lineErr("the principal is empty")
		}
		if !utf8.ValidString(principal) || strings.ContainsFunc(principal, unicode.IsControl) {
			return nil, lineErr("the principal is not valid UTF-8 or holds a control character")
		}
		g, canonical, err := parseNamespaces(fields[2])
		if err != nil {
			return nil, lineErr("%s", err)
		}
		grants, err := parseGrants(&g, fields[3:])
		if err != nil {
			return nil, lineErr("%s", err)
		}
		canonical += "," + grants

		digest := sha256.Sum256([]byte(token))
		if first, dup := tokenLine[digest]; dup {
			return nil, lineErr("duplicate token (first on line %d)", first)
		}
		tokenLine[digest] = n
		if first, seen := principalLine[principal]; seen {
			if principalGrant[principal] != canonical {
				return nil, lineErr("the principal is also on line %d, with other namespaces or grants", first)
			}
		} else {
			principalLine[principal] = n
			principalGrant[principal] = canonical
			set.grants[principal] = g
		}
		set.byDigest[digest] = principal
	}
	return set, nil
}

// parseNamespaces parses the namespaces field: names separated by semicolons. It returns
// the grant and a canonical form to compare the fields of two lines.
func parseNamespaces(field string) (grant, string, error) {
	g := grant{namespaces: map[string]bool{}}
	for i, ns := range strings.Split(field, ";") {
		ns = strings.TrimSpace(ns)
		switch {
		case ns == "":
			return grant{}, "", fmt.Errorf("namespace %d is empty", i+1)
		case ns == "*":
			g.all = true
		case !isDNS1123Label(ns):
			return grant{}, "", fmt.Errorf("namespace %d is neither * nor a DNS-1123 label (at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit)", i+1)
		default:
			g.namespaces[ns] = true
		}
	}
	if g.all {
		return grant{all: true}, "*", nil
	}
	names := make([]string, 0, len(g.namespaces))
	for ns := range g.namespaces {
		names = append(names, ns)
	}
	slices.Sort(names)
	return g, strings.Join(names, ";"), nil
}

// parseGrants sets the grants of fields, the fields of a line after its namespaces, in g.
// It returns a canonical form to compare the grants of two lines. Its errors number the
// field and never quote it.
func parseGrants(g *grant, fields []string) (string, error) {
	for i, f := range fields {
		var flag *bool
		switch strings.TrimSpace(f) {
		case "":
			return "", fmt.Errorf("field %d is empty", i+4)
		case grantRead:
			flag = &g.read
		case grantCancel:
			flag = &g.cancel
		case grantMetrics:
			flag = &g.metrics
		default:
			return "", fmt.Errorf("field %d is not a grant (%s, %s or %s)", i+4, grantRead, grantCancel, grantMetrics)
		}
		if *flag {
			return "", fmt.Errorf("field %d repeats a grant", i+4)
		}
		*flag = true
	}
	return fmt.Sprintf("read=%t,cancel=%t,metrics=%t", g.read, g.cancel, g.metrics), nil
}

// isDNS1123Label reports whether s is a valid namespace name, as Kubernetes validates it
// (k8s.io/apimachinery's IsDNS1123Label, which this package does not import).
func isDNS1123Label(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := ('a' <= c && c <= 'z') || ('0' <= c && c <= '9')
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}
