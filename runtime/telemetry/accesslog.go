package telemetry

import (
	"os"
	"sync"

	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/switchboard-dev/switchboard/runtime/httpapi"
)

// AccessLog writes the access log (spec/observability.md, "Access log"): one info line
// "HTTP request" per request, logger "access", with the encoder (--zap-encoder),
// destination and level of the process's logger, but without its sampling —
// controller-runtime's production logger keeps only the first 100 lines of one message
// per second and every 100th after that, and the access log keeps every line.
//
// Lines are encoded and written by a goroutine of its own: net/http sends the end of a
// response only when its handler returns, and the handler would otherwise wait for the
// line. Nothing is dropped: when the queue is full a request waits for room, and Close
// writes what is queued. Lines use typed fields, not logr, so a line costs no reflection.
type AccessLog struct {
	log   *uberzap.Logger
	lines chan httpapi.AccessEntry
	done  chan struct{}

	mu     sync.RWMutex // held for reading while a line is queued, for writing by Close
	closed bool
}

// accessQueue is how many lines may wait to be written.
const accessQueue = 4096

// NewAccessLog returns the access log of a process whose logger is built from o. Close
// it on exit.
func NewAccessLog(o zap.Options) *AccessLog {
	ecfg := uberzap.NewProductionEncoderConfig()
	if o.Development {
		ecfg = uberzap.NewDevelopmentEncoderConfig()
	}
	timeEncoder := o.TimeEncoder
	if timeEncoder == nil {
		timeEncoder = zapcore.RFC3339TimeEncoder
	}
	ecfg.EncodeTime = timeEncoder
	var enc zapcore.Encoder
	switch {
	case o.NewEncoder != nil:
		enc = o.NewEncoder(func(c *zapcore.EncoderConfig) { c.EncodeTime = timeEncoder })
	case o.Development:
		enc = zapcore.NewConsoleEncoder(ecfg)
	default:
		enc = zapcore.NewJSONEncoder(ecfg)
	}
	dest := o.DestWriter
	if dest == nil {
		dest = os.Stderr
	}
	var level zapcore.LevelEnabler = zapcore.InfoLevel
	if o.Level != nil {
		level = o.Level
	}
	a := &AccessLog{
		log:   uberzap.New(zapcore.NewCore(enc, zapcore.AddSync(dest), level)).Named("access"),
		lines: make(chan httpapi.AccessEntry, accessQueue),
		done:  make(chan struct{}),
	}
	go func() {
		defer close(a.done)
		for e := range a.lines {
			a.write(e)
		}
	}()
	return a
}

// Write queues e's line; it is the HTTP API's Config.AccessLog. After Close it writes
// the line itself.
func (a *AccessLog) Write(e httpapi.AccessEntry) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		a.write(e)
		return
	}
	a.lines <- e
}

// Close writes the queued lines and returns once they are written. Later lines are
// written by Write directly.
func (a *AccessLog) Close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.lines)
	}
	a.mu.Unlock()
	<-a.done
	_ = a.log.Sync()
}

func (a *AccessLog) write(e httpapi.AccessEntry) {
	ce := a.log.Check(zapcore.InfoLevel, "HTTP request")
	if ce == nil {
		return
	}
	ce.Write(
		uberzap.String("route", e.Route),
		uberzap.String("method", e.Method),
		uberzap.Int("status", e.Status),
		uberzap.Duration("duration", e.Duration),
		uberzap.String("principal", e.Principal),
		uberzap.String("execution", e.Execution),
		uberzap.Int64("bytes", e.Bytes),
	)
}
