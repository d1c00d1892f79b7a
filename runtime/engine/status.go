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

// StatusOf builds an execution's status from its store record and its events from
// sequence 1 (as Store.Read(ctx, id, 0, 0) returns them). Read the events after the
// record, so that they are at least as new: fields the events carry (status, attempts,
// route, error) come from them, and last_sequence and updated_at follow whichever source
// is newer. It is pure, so every replica answers the same for the same store content.
func StatusOf(rec eventstore.Status, events []protocol.Event) protocol.ExecutionStatus {
	var info Info
	// Info is written only by the engine; a record that does not decode (none of ours)
	// still gets a status with the fields the events and record give.
	_ = json.Unmarshal(rec.Info, &info)

	s := protocol.ExecutionStatus{
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
				s.Route = &protocol.RouteStatus{Deployment: d.Deployment, Provider: d.Provider, Model: d.Model}
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
