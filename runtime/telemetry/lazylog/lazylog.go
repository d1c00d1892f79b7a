// Package lazylog adds values to a logr.Logger when it first writes a line rather than
// when the values are given.
//
// The engine gives every execution and every attempt a logger of its own identity, and
// most never log. zap's With, behind logr's zapr, clones its encoder and encodes the
// values at once, about a dozen allocations each time. zap's Logger.WithLazy defers that
// work in the same way, but zapr does not call it, so WithValues does it for any
// logr.LogSink.
package lazylog

import (
	"slices"
	"sync"

	"github.com/go-logr/logr"
)

// WithValues returns l with keysAndValues added when it first writes a line. It writes
// what l.WithValues(keysAndValues...) would, caller included. Values added to the result
// later, by WithValues or by its own WithValues method, are deferred with these; WithName
// adds them at once.
func WithValues(l logr.Logger, keysAndValues ...any) logr.Logger {
	parent := l.GetSink()
	switch p := parent.(type) {
	case nil:
		return l // logr.Discard: nothing to add values to
	case *lazySink:
		return l.WithSink(p.WithValues(keysAndValues...)) // one lazySink, not a chain
	}
	return l.WithSink(&lazySink{parent: parent, values: keysAndValues})
}

// lazySink is a logr.LogSink that adds values to its parent only when a line is
// written. It is safe for concurrent use, as a LogSink must be.
type lazySink struct {
	parent logr.LogSink
	values []any
	depth  int // call depth added by WithCallDepth

	once sync.Once
	sink logr.LogSink // the parent with the values, made once
}

var (
	_ logr.LogSink          = (*lazySink)(nil)
	_ logr.CallDepthLogSink = (*lazySink)(nil)
)

// made returns the parent with the values, making it on the first call. Its call depth
// counts the frame of the lazySink method that writes, so that the parent reports the
// caller of the logr.Logger method, as it would without lazySink.
func (s *lazySink) made() logr.LogSink {
	s.once.Do(func() { s.sink = s.resolve(1) })
	return s.sink
}

// resolve returns the parent with the values and the call depth, plus extraDepth.
func (s *lazySink) resolve(extraDepth int) logr.LogSink {
	sink := s.parent
	if depth := s.depth + extraDepth; depth > 0 {
		if cd, ok := sink.(logr.CallDepthLogSink); ok {
			sink = cd.WithCallDepth(depth)
		}
	}
	if len(s.values) > 0 {
		sink = sink.WithValues(s.values...)
	}
	return sink
}

// Init does nothing: logr calls it only on the sink given to logr.New, the parent.
func (s *lazySink) Init(logr.RuntimeInfo) {}

// Enabled asks the parent: values never change whether a level is enabled.
func (s *lazySink) Enabled(level int) bool { return s.parent.Enabled(level) }

func (s *lazySink) Info(level int, msg string, keysAndValues ...any) {
	s.made().Info(level, msg, keysAndValues...)
}

func (s *lazySink) Error(err error, msg string, keysAndValues ...any) {
	s.made().Error(err, msg, keysAndValues...)
}

// WithValues stays lazy: the values are added with s's when a line is written.
func (s *lazySink) WithValues(keysAndValues ...any) logr.LogSink {
	return &lazySink{parent: s.parent, values: slices.Concat(s.values, keysAndValues), depth: s.depth}
}

// WithName is rare on these loggers: it makes the parent with the values at once.
func (s *lazySink) WithName(name string) logr.LogSink { return s.resolve(0).WithName(name) }

func (s *lazySink) WithCallDepth(depth int) logr.LogSink {
	return &lazySink{parent: s.parent, values: s.values, depth: s.depth + depth}
}
