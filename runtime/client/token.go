package client

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// A runtime that authenticates its callers (spec/authentication.md) expects
// "Authorization: Bearer <token>" on every request. The token is a credential: the client
// never writes it into an error, and neither must callers.

// tokenFileMaxAge bounds how long a token read from a file is used without reading the
// file again, even when the file looks unchanged: a rewrite in place within the
// filesystem's timestamp granularity, with a token of the same length, keeps its
// modification time and size. The kubelet renews a projected token long before it
// expires (at 80 % of its lifetime, at least ten minutes), so a minute is ample.
const tokenFileMaxAge = time.Minute

// maxTokenFileSize bounds what is read from a token file; a Kubernetes token is a few
// KiB, and a larger file is a mistake rather than a token.
const maxTokenFileSize = 64 << 10

// WithBearerToken sends token as "Authorization: Bearer <token>" with every request. For
// a token that is rotated, such as a projected ServiceAccount token, use WithTokenFile.
// A token that is empty or holds a character other than visible ASCII makes every call
// fail without sending anything.
func WithBearerToken(token string) Option {
	return func(c *Client) { c.token = staticToken{tok: token, err: checkToken(token)} }
}

// WithTokenFile sends the token held in the file at path (surrounding white space
// removed) as "Authorization: Bearer <token>" with every request. It suits a projected
// ServiceAccount token (spec/authentication.md), which the kubelet rotates by swapping a
// symbolic link: the file is checked before every request (one stat) and read again when
// it changed, and at least once a minute in any case. When the file cannot be read, or
// holds no valid token, the call fails without sending anything, with an error naming
// the path but never the file's content.
func WithTokenFile(path string) Option {
	return func(c *Client) { c.token = &fileToken{path: path, now: time.Now} }
}

// tokenSource gives the bearer token for the next request.
type tokenSource interface {
	token() (string, error)
}

// staticToken is a token given once; err is its validation error, reported by every call.
type staticToken struct {
	tok string
	err error
}

func (s staticToken) token() (string, error) { return s.tok, s.err }

// fileToken reads the token from a file and keeps it until the file changes or the
// token is tokenFileMaxAge old. It is safe for concurrent use.
type fileToken struct {
	path string
	now  func() time.Time

	mu     sync.Mutex
	tok    string      // "" until a valid token was read
	info   os.FileInfo // the file tok was read from
	readAt time.Time
}

func (f *fileToken) token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Stat follows the symbolic link, so a kubelet rotation (a new file behind the link)
	// shows as another file.
	fi, err := os.Stat(f.path)
	if err != nil {
		f.tok = ""
		return "", fmt.Errorf("client: bearer token file: %w", err)
	}
	if f.tok != "" && sameVersion(fi, f.info) && f.now().Sub(f.readAt) < tokenFileMaxAge {
		return f.tok, nil
	}
	tok, info, err := readTokenFile(f.path)
	if err != nil {
		f.tok = ""
		return "", err
	}
	f.tok, f.info, f.readAt = tok, info, f.now()
	return tok, nil
}

// readTokenFile reads and checks the token at path, with the identity of the file it
// read (taken from the open file, so that a rotation between the two cannot pair one
// file's content with another's identity).
func readTokenFile(path string) (string, os.FileInfo, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("client: bearer token file: %w", err)
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return "", nil, fmt.Errorf("client: bearer token file: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxTokenFileSize+1))
	if err != nil {
		return "", nil, fmt.Errorf("client: bearer token file: %w", err)
	}
	if len(data) > maxTokenFileSize {
		return "", nil, fmt.Errorf("client: bearer token file %s is larger than %d bytes", path, maxTokenFileSize)
	}
	tok := strings.TrimSpace(string(data))
	if err := checkToken(tok); err != nil {
		return "", nil, fmt.Errorf("%w (in file %s)", err, path)
	}
	return tok, info, nil
}

// sameVersion reports whether a and b describe the same file, unmodified as far as the
// file system tells.
func sameVersion(a, b os.FileInfo) bool {
	return b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// checkToken refuses tokens that cannot travel in a header as they are. Its errors never
// contain the token.
func checkToken(tok string) error {
	if tok == "" {
		return errors.New("client: bearer token is empty")
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return errors.New("client: bearer token holds a character other than visible ASCII")
		}
	}
	return nil
}
