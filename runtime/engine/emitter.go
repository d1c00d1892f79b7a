package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
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
	output bool       // an output or tool event was recorded
	tokens tokenCount // the input and output tokens reported, for the attempt's span
}

var _ Emitter = (*emitter)(nil)

// Emit implements Emitter.
func (em *emitter) Emit(typ protocol.EventType, data any) error {
	// Encoding happens before the lock: a large payload does not hold up other emits.
	var one [1]json.RawMessage // the usual case, one event, without an allocation
	raws, v, outBytes, err := encodeEvents(one[:0], typ, data, em.log)
	if err != nil || raws == nil {
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
	if len(raws) > 1 && em.w.limits.events > 0 && em.w.seq+uint64(len(raws))+1 > em.w.limits.events {
		// The pieces of a split delta are recorded all or none, so that no half of an
		// event the adapter emitted as one is stored.
		if em.w.exceeded != nil {
			em.w.exceeded()
		}
		return ErrOutputTooLarge
	}
	for i, raw := range raws {
		n := int64(0)
		if i == 0 {
			n = outBytes // counted once, so the byte limit is checked before the first piece
		}
		if err := em.w.appendLocked(typ, raw, em.w.timestamp(), n); err != nil {
			return err
		}
	}
	switch {
	case typ.IsOutput() && !em.output:
		em.output = true
		em.obs.FirstChunk(em.deployment, time.Since(em.start))
	case typ == protocol.EventUsageReported:
		usage := v.(protocol.UsageReportedData).Usage
		em.tokens.add(usage)
		em.obs.Usage(em.deployment, usage)
	}
	return nil
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
