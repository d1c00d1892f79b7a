package engine

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Observer receives what the engine measures (spec/observability.md, "Metrics"). Each
// method is called at the one place its fact is known, on the execution's goroutines:
// implementations must be cheap, non-blocking and safe for concurrent use. Every string
// passed is from a bounded set — a routed ability, a deployment of the routing table, a
// portable code — never caller content.
type Observer interface {
	// Running is called with +1 when an execution starts running on this replica and
	// with -1 when it stops, ended or handed over.
	Running(delta int)
	// ExecutionEnded is called once the execution's terminal event is recorded here:
	// code is empty for execution.completed, else execution.failed's code.
	ExecutionEnded(ability string, code protocol.Code)
	// Fallback is called when a failed attempt is followed by the next candidate.
	Fallback(ability string)
	// AttemptEnded is called when an attempt ends; not for an attempt this replica lets
	// go of (handed over, or its lease lost), whose new owner reports it.
	AttemptEnded(r AttemptReport)
	// FirstChunk is called when an attempt records its first output event, after
	// latency since the attempt started.
	FirstChunk(d *routing.Deployment, latency time.Duration)
	// Usage is called with the valid entries of each usage.reported event recorded.
	Usage(d *routing.Deployment, usage []protocol.Usage)
	// OrphanRecovered is called when this replica takes over an execution whose replica
	// stopped: outcome is "adopted" when it resumes its remote job, else the code it
	// ends the execution with.
	OrphanRecovered(outcome string)
}

// AttemptReport describes an ended attempt.
type AttemptReport struct {
	// Deployment is the deployment the attempt ran on.
	Deployment *routing.Deployment
	// Code is the attempt's portable error code; empty when it succeeded.
	Code protocol.Code
	// Duration is the time from the attempt's start to its end.
	Duration time.Duration
}

// OrphanAdopted is the OrphanRecovered outcome of an orphan whose remote job this
// replica resumes.
const OrphanAdopted = "adopted"

// nopObserver is the Observer of an engine configured without one.
type nopObserver struct{}

func (nopObserver) Running(int)                                   {}
func (nopObserver) ExecutionEnded(string, protocol.Code)          {}
func (nopObserver) Fallback(string)                               {}
func (nopObserver) AttemptEnded(AttemptReport)                    {}
func (nopObserver) FirstChunk(*routing.Deployment, time.Duration) {}
func (nopObserver) Usage(*routing.Deployment, []protocol.Usage)   {}
func (nopObserver) OrphanRecovered(string)                        {}

// Span and attribute names (spec/observability.md, "Tracing"): the OpenTelemetry GenAI
// semantic conventions where they name one, switchboard.* otherwise.
const (
	spanExecution = "execution"

	attrExecutionID   = attribute.Key("switchboard.execution.id")
	attrAbility       = attribute.Key("switchboard.ability")
	attrDeployment    = attribute.Key("switchboard.deployment")
	attrAttempt       = attribute.Key("switchboard.attempt")
	attrErrorType     = attribute.Key("error.type")
	attrOperation     = attribute.Key("gen_ai.operation.name")
	attrProvider      = attribute.Key("gen_ai.provider.name")
	attrRequestModel  = attribute.Key("gen_ai.request.model")
	attrResponseModel = attribute.Key("gen_ai.response.model")
	attrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
)

// DefaultOperation is the GenAI operation name of a provider that names none
// (Provider.Operation).
const DefaultOperation = "chat"

// startExecutionSpan starts x's execution span on ctx, when tracing is on. Executions
// outlive the request that submits them, so the span is the root of its own trace, linked
// to the submitter's span (parent) rather than its child.
func (e *Engine) startExecutionSpan(ctx, parent context.Context, x *execution) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	opts := []trace.SpanStartOption{
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrExecutionID.String(x.id), attrAbility.String(x.ability)),
	}
	if link := trace.LinkFromContext(parent); link.SpanContext.IsValid() {
		opts = append(opts, trace.WithLinks(link))
	}
	return e.tracer.Start(ctx, spanExecution, opts...)
}

// endSpan ends span (nil when tracing is off) with code as its error, if any.
func endSpan(span trace.Span, code protocol.Code, attrs ...attribute.KeyValue) {
	if span == nil {
		return
	}
	span.SetAttributes(attrs...)
	if code != "" {
		span.SetAttributes(attrErrorType.String(string(code)))
		span.SetStatus(codes.Error, string(code))
	}
	span.End()
}

// startAttemptSpan starts the client span of attempt n on d, a child of the execution
// span in ctx, when tracing is on. Its context is the attempt's: adapters send its
// traceparent to the provider.
func (e *Engine) startAttemptSpan(ctx context.Context, n int, d *routing.Deployment) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, nil
	}
	op := e.providers[d.Provider].Operation
	if op == "" {
		op = DefaultOperation
	}
	return e.tracer.Start(ctx, op+" "+d.Model,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attrOperation.String(op),
			attrProvider.String(d.Provider),
			attrRequestModel.String(d.Model),
			attrDeployment.String(d.RefString()),
			attrAttempt.Int(n),
		))
}

// attemptSpanAttributes are the attributes an attempt span gets when it ends: the model
// the provider says answered and the attempt's token usage, as reported.
func attemptSpanAttributes(out Outcome, tokens tokenCount) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if out.ResponseModel != "" {
		attrs = append(attrs, attrResponseModel.String(out.ResponseModel))
	}
	if tokens.reported {
		attrs = append(attrs, attrInputTokens.Int64(int64(tokens.input)), attrOutputTokens.Int64(int64(tokens.output)))
	}
	return attrs
}

// tokenCount adds up the input and output tokens an attempt reported, for its span.
type tokenCount struct {
	input, output float64
	reported      bool
}

func (t *tokenCount) add(us []protocol.Usage) {
	for _, u := range us {
		switch u.Unit {
		case protocol.UnitInputTokens:
			t.input += u.Quantity
			t.reported = true
		case protocol.UnitOutputTokens:
			t.output += u.Quantity
			t.reported = true
		}
	}
}
