package postgres

import (
	"errors"
	"flag"

	"github.com/switchboard-dev/switchboard/runtime/internal/urlsource"
)

// EnvURL is the environment variable that may hold the PostgreSQL URL, so that a
// password never shows in a process listing.
const EnvURL = "SWITCHBOARD_POSTGRES_URL"

// URLConfig is where the runtime reads the database's URL from (spec/postgres.md,
// "Connecting"): --postgres-url, --postgres-url-file or $SWITCHBOARD_POSTGRES_URL, as
// for Redis. A libpq URL (postgres://user:password@host:port/db?sslmode=…) or key/value
// DSN; TLS as its sslmode says, libpq's default (prefer) when it says nothing.
type URLConfig struct {
	// URL is --postgres-url. A password here shows in process listings.
	URL string
	// URLFile is --postgres-url-file: a file holding the URL, such as a mounted Secret;
	// surrounding whitespace is ignored.
	URLFile string
}

// RegisterFlags registers c's flags on fs.
func (c *URLConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "postgres-url", c.URL,
		"PostgreSQL URL or key/value DSN for --event-store=postgres (TLS per its sslmode). "+
			"A password given here shows in process listings: prefer --postgres-url-file or $"+EnvURL+".")
	fs.StringVar(&c.URLFile, "postgres-url-file", c.URLFile,
		"File holding the PostgreSQL URL (surrounding whitespace ignored), e.g. a mounted Secret. Not together with --postgres-url.")
}

// Resolve returns the URL and the name of its source ("--postgres-url", …), reading
// the environment through getenv (nil: os.Getenv). Its errors name the source, never
// the URL; no source at all is one.
func (c *URLConfig) Resolve(getenv func(string) string) (url, source string, err error) {
	url, source, err = urlsource.Sources{What: "PostgreSQL", Flag: c.URL, FlagName: "--postgres-url",
		File: c.URLFile, FileName: "--postgres-url-file", Env: EnvURL}.Resolve(getenv)
	if err == nil && url == "" {
		err = errors.New("no PostgreSQL URL: set --postgres-url-file, $" + EnvURL + " or --postgres-url")
	}
	return url, source, err
}
