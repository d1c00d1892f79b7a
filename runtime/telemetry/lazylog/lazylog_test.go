package lazylog_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/switchboard-dev/switchboard/runtime/telemetry/lazylog"
)

// logAll writes one line of each kind through l, from one place, so that two loggers
// that report their caller correctly report the same one.
func logAll(l logr.Logger) {
	l.Info("info", "k", 1)
	l.V(1).Info("debug")
	l.Error(errors.New("boom"), "error")
	l.WithName("sub").Info("named")
	l.WithCallDepth(1).Info("one frame up")
}

// A lazy logger writes what the eager one writes, caller included, and adds its values
// to the parent only when it writes a line.
func TestLazyValues(t *testing.T) {
	var lines []string
	parent := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) },
		funcr.Options{LogCaller: funcr.All, Verbosity: 1})
	written := func(l logr.Logger) string {
		lines = nil
		logAll(l)
		return strings.Join(lines, "\n")
	}

	eager := written(parent.WithValues("execution", "exe_1").WithValues("attempt", 2))
	counted := &countingSink{LogSink: parent.GetSink()}
	lazy := lazylog.WithValues(lazylog.WithValues(parent.WithSink(counted), "execution", "exe_1"), "attempt", 2)
	if counted.withValues != 0 {
		t.Fatalf("values added to the parent %d times before anything was logged", counted.withValues)
	}
	if got := written(lazy); got != eager {
		t.Errorf("the lazy logger wrote\n%s\nthe eager one\n%s", got, eager)
	}
	if !strings.Contains(eager, `"caller"={"file"="lazylog_test.go"`) {
		t.Errorf("the lines do not name the caller:\n%s", eager)
	}

	if got := lazylog.WithValues(logr.Discard(), "k", "v"); got.GetSink() != nil {
		t.Error("values added to a discarding logger")
	}
}

// countingSink counts the values added to a sink.
type countingSink struct {
	logr.LogSink
	withValues int
}

func (c *countingSink) WithValues(kv ...any) logr.LogSink {
	c.withValues++
	return c.LogSink.WithValues(kv...)
}

func (c *countingSink) WithCallDepth(depth int) logr.LogSink {
	return &countingSink{LogSink: c.LogSink.(logr.CallDepthLogSink).WithCallDepth(depth)}
}
