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
	// PrincipalUID is that caller's uid, when it has one (a ServiceAccount's); empty
	// also for executions recorded before uids were.
	PrincipalUID string `json:"principal_uid,omitempty"`
	// Namespace is the namespace of the execution's first route: RBAC on executions in
	// it decides who else may read or cancel it.
	Namespace string `json:"namespace,omitempty"`
}

// Owner is who an execution belongs to (spec/authentication.md, "Isolation").
type Owner struct {
	// Principal and UID are the name and uid of the caller that created it; both are
	// empty for an execution created without a principal, UID for one whose creator
	// had no uid or that was recorded before uids were.
	Principal, UID string
	// Namespace is the namespace of its first route.
	Namespace string
}

// OwnerOf returns the owner of execution st.
func OwnerOf(st eventstore.Status) Owner {
	var info Info
	_ = json.Unmarshal(st.Info, &info) // none of ours if it does not decode: no owner
	return Owner{Principal: info.Principal, UID: info.PrincipalUID, Namespace: info.Namespace}
}

// OwnedBy reports whether the caller named name, with uid (empty when it has none),
// created the execution: the names are equal and, when a uid was recorded, so are the
// uids. A ServiceAccount deleted and created again under the same name has a new uid,
// and is not the owner of its predecessor's executions; an execution recorded without
// a uid is judged by the name alone, as it was when it was created.
func (o Owner) OwnedBy(name, uid string) bool {
	return o.Principal != "" && o.Principal == name && (o.UID == "" || o.UID == uid)
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
