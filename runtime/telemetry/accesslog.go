package telemetry

import (
	"os"
	"sync/atomic"
	"time"

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
// A line is encoded into a buffer (zapcore.BufferedWriteSyncer) that is written out
// every accessFlushInterval, or when it fills: net/http sends the end of a response only
// when its handler returns, and the handler would otherwise wait for a write to the log's
// destination. Nor does a line wake another goroutine, which cost more than encoding it.
// Nothing is dropped: a full buffer is written out by the request that fills it, and Close
// writes what is buffered. Lines use typed fields, not logr, so a line costs no
// reflection.
type AccessLog struct {
	log    *uberzap.Logger
	sink   *zapcore.BufferedWriteSyncer
	closed atomic.Bool
}

const (
	// accessFlushInterval is the longest a line waits in the buffer.
	accessFlushInterval = 200 * time.Millisecond
	// accessBuffer is the buffer's size: about a thousand lines.
	accessBuffer = 256 << 10
)

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
	sink := &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(dest), Size: accessBuffer, FlushInterval: accessFlushInterval}
	return &AccessLog{
		log:  uberzap.New(zapcore.NewCore(enc, sink, level)).Named("access"),
		sink: sink,
	}
}

// Write logs e's line; it is the HTTP API's Config.AccessLog. After Close the line is
// written out at once.
func (a *AccessLog) Write(e httpapi.AccessEntry) {
	a.write(e)
	if a.closed.Load() {
		_ = a.sink.Sync()
	}
}

// Close writes out the buffered lines and stops the periodic writing. Later lines are
// written out by Write directly.
func (a *AccessLog) Close() {
	a.closed.Store(true)
	_ = a.sink.Stop()
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
