// Package urlsource reads a backend's connection URL from where the runtime accepts it
// (spec/redis.md, spec/postgres.md, "Connecting"): a flag, a file named by a flag (a
// mounted Secret), or an environment variable, so that a password need never show in
// a process listing. Redis and PostgreSQL take their URLs the same way, with the same
// refusals; the messages name flags and files, never what they hold.
package urlsource

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Sources are the places one URL may come from, and how to name them.
type Sources struct {
	// What names the URL in messages: "Redis", "PostgreSQL".
	What string
	// Flag and FlagName: the URL given as a flag's value (--redis-url).
	Flag, FlagName string
	// File and FileName: the file a flag names (--redis-url-file).
	File, FileName string
	// Env is the environment variable consulted when neither flag is set.
	Env string
}

// Resolve returns the URL and the name of its source, reading the environment through
// getenv (nil: os.Getenv). Both flags at once is an error; none of the sources set
// gives an empty URL and no error.
func (s Sources) Resolve(getenv func(string) string) (raw, source string, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch {
	case s.Flag != "" && s.File != "":
		return "", "", fmt.Errorf("both %s and %s are set: give the %s URL one way", s.FlagName, s.FileName, s.What)
	case s.Flag != "":
		return strings.TrimSpace(s.Flag), s.FlagName, nil
	case s.File != "":
		source = s.FileName + " " + s.File
		raw, err := ReadTrimmed(s.File)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", source, err)
		}
		return raw, source, nil
	}
	if raw := strings.TrimSpace(getenv(s.Env)); raw != "" {
		return raw, "$" + s.Env, nil
	}
	return "", "", nil
}

// ReadTrimmed reads a secret from a file, without its surrounding whitespace. Its
// errors name neither the file (the caller does) nor the content; an empty file is one.
func ReadTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var perr *os.PathError
		if errors.As(err, &perr) {
			err = perr.Err // the caller names the path
		}
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", errors.New("the file is empty")
	}
	return s, nil
}
