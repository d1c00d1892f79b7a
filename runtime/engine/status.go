package engine

import (
	"encoding/json"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Info is what the engine stores as eventstore.Record.Info: the facts about an execution
// that no event carries (metadata) or that status needs without decoding events. It is
// JSON so every store implementation persists it as is, and every replica — of this
// version or a later one — reads the same value.
type Info struct {
	// Ability is the requested ability.
	Ability string `json:"ability"`
	// Metadata are the caller's labels, echoed in status.
	Metadata map[string]string `json:"metadata,omitempty"`
	// DeadlineAt is when the execution's deadline passes.
	DeadlineAt time.Time `json:"deadline_at"`
	// CreatedAt is when the execution was accepted.
	CreatedAt time.Time `json:"created_at"`
}

// ExecutionStatus is the body of GET /v1/executions/{id} (CONTRACT §4.2).
type ExecutionStatus struct {
	// ID is the execution id.
	ID string `json:"id"`
	// Ability is the requested ability.
	Ability string `json:"ability"`
	// Status is accepted, running, completed or failed.
	Status protocol.Status `json:"status"`
	// CreatedAt is when the execution was accepted.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is the timestamp of the last event.
	UpdatedAt time.Time `json:"updated_at"`
	// DeadlineAt is when the execution's deadline passes.
	DeadlineAt time.Time `json:"deadline_at"`
	// LastSequence is the sequence of the last event.
	LastSequence uint64 `json:"last_sequence"`
	// Attempts is the number of route.selected events.
	Attempts int `json:"attempts"`
	// Route is the deployment of the last route.selected; null before the first.
	Route *RouteStatus `json:"route"`
	// Error is the error of execution.failed.
	Error *protocol.Error `json:"error,omitempty"`
	// Metadata are the caller's labels; always an object.
	Metadata map[string]string `json:"metadata"`
}

// RouteStatus is the route member of ExecutionStatus.
type RouteStatus struct {
	// Deployment is the deployment as "namespace/name".
	Deployment string `json:"deployment"`
	// Provider is the deployment's provider.
	Provider string `json:"provider"`
	// Model is the provider's model id.
	Model string `json:"model"`
}

// StatusOf builds an execution's status from its store record and its events from
// sequence 1 (as Store.Read(ctx, id, 0, 0) returns them). Read the events after the
// record, so that they are at least as new: fields the events carry (status, attempts,
// route, error) come from them, and last_sequence and updated_at follow whichever source
// is newer. It is pure, so every replica answers the same for the same store content.
func StatusOf(rec eventstore.Status, events []protocol.Event) ExecutionStatus {
	var info Info
	// Info is written only by the engine; a record that does not decode (none of ours)
	// still gets a status with the fields the events and record give.
	_ = json.Unmarshal(rec.Info, &info)

	s := ExecutionStatus{
		ID:           rec.ID,
		Ability:      info.Ability,
		Status:       protocol.StatusAccepted,
		CreatedAt:    rec.CreatedAt,
		UpdatedAt:    rec.UpdatedAt,
		DeadlineAt:   info.DeadlineAt,
		LastSequence: rec.LastSequence,
		Metadata:     info.Metadata,
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = info.CreatedAt
	}
	if s.Metadata == nil {
		s.Metadata = map[string]string{}
	}

	for _, ev := range events {
		switch ev.Type {
		case protocol.EventAccepted:
			continue // status stays accepted until something happens
		case protocol.EventRouteSelected:
			var d protocol.RouteSelectedData
			if json.Unmarshal(ev.Data, &d) == nil {
				s.Attempts++
				s.Route = &RouteStatus{Deployment: d.Deployment, Provider: d.Provider, Model: d.Model}
			}
		case protocol.EventCompleted:
			s.Status = protocol.StatusCompleted
			continue
		case protocol.EventFailed:
			var d protocol.FailedData
			if json.Unmarshal(ev.Data, &d) == nil {
				s.Error = d.Error
			}
			s.Status = protocol.StatusFailed
			continue
		}
		s.Status = protocol.StatusRunning
	}
	if n := len(events); n > 0 && events[n-1].Sequence >= s.LastSequence {
		s.LastSequence = events[n-1].Sequence
		s.UpdatedAt = events[n-1].Timestamp
	}
	return s
}
