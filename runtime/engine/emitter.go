package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// emitter is the Emitter of one attempt.
type emitter struct {
	w   *writer
	ctx context.Context // the attempt's context: emits stop when it ends
	log logr.Logger
	// attempt and deployment identify the attempt in a RemoteJob record and in
	// measurements.
	attempt    int
	deployment *routing.Deployment
	obs        Observer
	start      time.Time // when the attempt started, for the time to its first chunk

	// Guarded by w.mu, so that close and a concurrent emit agree on whether the event
	// belongs to the attempt.
	closed bool
	output bool             // an output or tool event was recorded
	tokens tokenCount       // the input and output tokens reported, for the attempt's span
	usage  []protocol.Usage // every entry reported, for Config.Admission's settlement
	// counting is how the deployment's provider counts tokens (Provider.Counting).
	counting pricing.Counting
}

var _ Emitter = (*emitter)(nil)

// Text implements Emitter.
func (em *emitter) Text(index int, text string) error {
	// Encoding happens before the lock: a large payload does not hold up other emits.
	var one [1]json.RawMessage // the usual case, one event, without an allocation
	raws, err := encodeText(one[:0], index, text)
	return em.record(protocol.EventOutputDelta, raws, int64(len(text)), nil, err)
}

// ToolStarted implements Emitter.
func (em *emitter) ToolStarted(index int, callID, name string) error {
	var one [1]json.RawMessage
	raws, err := encodeToolStarted(one[:0], index, callID, name)
	return em.record(protocol.EventToolCallStarted, raws, 0, nil, err)
}

// ToolArgs implements Emitter.
func (em *emitter) ToolArgs(callID, delta string) error {
	var one [1]json.RawMessage
	raws, err := encodeToolArgs(one[:0], callID, delta)
	return em.record(protocol.EventToolCallArgsDelta, raws, int64(len(delta)), nil, err)
}

// Progress implements Emitter.
func (em *emitter) Progress(p protocol.ProgressData) error {
	var one [1]json.RawMessage
	raws, err := encodeProgress(one[:0], p)
	return em.record(protocol.EventProgress, raws, 0, nil, err)
}

// Result implements Emitter.
func (em *emitter) Result(r protocol.OutputResultData) error {
	var one [1]json.RawMessage
	raws, err := encodeResult(one[:0], r)
	return em.record(protocol.EventOutputResult, raws, int64(len(r.Result)), nil, err)
}

// Usage implements Emitter.
func (em *emitter) Usage(usage []protocol.Usage) error {
	usage = validUsage(usage, em.log)
	if len(usage) == 0 {
		return nil
	}
	if em.deployment.Pricing != nil {
		usage = append(usage, costFact(usage, em.deployment, em.counting))
	}
	var one [1]json.RawMessage
	raws, err := encodeUsage(one[:0], usage)
	return em.record(protocol.EventUsageReported, raws, 0, usage, err)
}

// record appends one emitted event, raws its data (more than one for the pieces of a split
// delta) and outBytes the materialized output it adds, unless its encoding failed (err)
// or the attempt is over; usage is the entries of a usage.reported. An event too large to
// record ends the execution with output_too_large, as the limits do.
func (em *emitter) record(typ protocol.EventType, raws []json.RawMessage, outBytes int64, usage []protocol.Usage, err error) error {
	if err != nil {
		if errors.Is(err, ErrOutputTooLarge) {
			em.w.mu.Lock()
			if em.w.exceeded != nil && !em.closed {
				em.w.exceeded()
			}
			em.w.mu.Unlock()
		}
		return err
	}
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	if em.closed || em.ctx.Err() != nil {
		return ErrAttemptOver
	}
	if err := em.w.appendAllLocked(typ, raws, outBytes); err != nil {
		return err
	}
	switch {
	case typ.IsOutput() && !em.output:
		em.output = true
		em.obs.FirstChunk(em.deployment, time.Since(em.start))
	case typ == protocol.EventUsageReported:
		em.tokens.add(usage)
		em.usage = append(em.usage, usage...)
		em.obs.Usage(em.deployment, usage)
	}
	return nil
}

// costFact is the derived cost of a usage report on d, which declares prices
// (spec/budgets.md, "Pricing"): unit cost.<currency>, in currency units with micro-unit
// precision.
func costFact(usage []protocol.Usage, d *routing.Deployment, c pricing.Counting) protocol.Usage {
	m := pricing.Measure(usage, c, d.Pricing)
	return protocol.Usage{
		Unit:     protocol.CostUnit(d.Pricing.Currency),
		Quantity: float64(m.Cost) / pricing.MicroPerUnit,
		Source:   protocol.SourceDerived,
	}
}

// spent returns what the attempt reported and whether it recorded output.
func (em *emitter) spent() (usage []protocol.Usage, output bool) {
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	return em.usage, em.output
}

// tokenCount returns the tokens the attempt reported.
func (em *emitter) tokenCount() tokenCount {
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	return em.tokens
}

// RemoteJob implements Emitter. The handle is stored with the attempt's number and
// deployment, so that the replica taking the execution over resumes this attempt, on
// this deployment, and only while it is the execution's last attempt.
func (em *emitter) RemoteJob(handle json.RawMessage) error {
	if len(handle) == 0 || len(handle) > MaxRemoteJobBytes || !json.Valid(handle) {
		return fmt.Errorf("remote job handle: empty, larger than %d bytes or not JSON: %w", MaxRemoteJobBytes, ErrInvalidEvent)
	}
	rec, err := json.Marshal(remoteJob{Attempt: em.attempt, Deployment: em.deployment.RefString(), Handle: handle})
	if err != nil {
		return fmt.Errorf("remote job handle: %w", ErrInvalidEvent)
	}
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	// An attempt being handed over may still record its job (a create answered during
	// the cleanup grace), so that the replica taking over adopts it rather than leaving
	// it unfollowed; the store refuses it once that replica holds the lease.
	if em.closed || em.w.terminal || (em.ctx.Err() != nil && !Detached(em.ctx)) {
		return ErrAttemptOver
	}
	if err := em.w.store.SetRemote(em.w.ctx, em.w.id, em.w.fence, rec); err != nil {
		if errors.Is(err, eventstore.ErrLeaseLost) && em.w.lost != nil {
			em.w.lost()
		}
		return fmt.Errorf("record remote job of %s: %w", em.w.id, err)
	}
	return nil
}

// close ends the attempt: later emits are refused. It reports whether the attempt
// recorded output, which rules out a fallback.
func (em *emitter) close() (output bool) {
	em.w.mu.Lock()
	defer em.w.mu.Unlock()
	em.closed = true
	return em.output
}
