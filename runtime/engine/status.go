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
	// Principal is the caller that created the execution, who owns it
	// (spec/authentication.md); empty when it was created without one.
	Principal string `json:"principal,omitempty"`
	// Namespace is the namespace of the execution's first route: RBAC on executions in
	// it decides who else may read or cancel it.
	Namespace string `json:"namespace,omitempty"`
}

// OwnerOf returns the principal that created execution st and the namespace of its first
// route (spec/authentication.md): empty for an execution created without a principal.
func OwnerOf(st eventstore.Status) (principal, namespace string) {
	var info Info
	_ = json.Unmarshal(st.Info, &info) // none of ours if it does not decode: no owner
	return info.Principal, info.Namespace
}

// StatusOf converts an execution's store status into its API status (spec/http-api.md,
// "Status"). The store folds the events as it records them (state, attempts, route,
// error), so a status costs one Get whatever the number of events; the rest comes from
// the record's Info. It is pure, so every replica answers the same for the same store
// content.
func StatusOf(st eventstore.Status) protocol.ExecutionStatus {
	var info Info
	// Info is written only by the engine; a record that does not decode (none of ours)
	// still gets a status with the fields the store gives.
	_ = json.Unmarshal(st.Info, &info)

	s := protocol.ExecutionStatus{
		ID:           st.ID,
		Ability:      info.Ability,
		Status:       st.State,
		CreatedAt:    st.CreatedAt,
		UpdatedAt:    st.UpdatedAt,
		DeadlineAt:   info.DeadlineAt,
		LastSequence: st.LastSequence,
		Attempts:     st.Attempts,
		Route:        st.Route,
		Error:        st.Error,
		Metadata:     info.Metadata,
	}
	if s.Status == "" {
		s.Status = protocol.StatusAccepted // a Status built by hand, without the store's fold
	}
	if s.CreatedAt.IsZero() {
		s.CreatedAt = info.CreatedAt
	}
	if s.Metadata == nil {
		s.Metadata = map[string]string{}
	}
	return s
}
