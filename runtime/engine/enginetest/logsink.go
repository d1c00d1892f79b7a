package enginetest

import (
	"math"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// LogSink collects log lines, at every verbosity, so that tests can check what was
// logged (and what was not). Its zero value is ready to use; it is safe for concurrent
// use.
type LogSink struct {
	mu    sync.Mutex
	lines []string
}

// Logger returns a logger writing to l.
func (l *LogSink) Logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: math.MaxInt})
}

// Text returns every line logged so far, one a line.
func (l *LogSink) Text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Count returns how many lines logged so far contain substr.
func (l *LogSink) Count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}
