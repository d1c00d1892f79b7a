// Package budget enforces Budgets (spec/budgets.md): limits on what the executions of
// some callers may spend on some ModelDeployments in calendar windows. It implements the
// engine's Admission: before each attempt it reserves the attempt's worst case against
// every Budget that governs the deployment and counts the caller, in one atomic step of
// the EventStore's Budgets role, so that a deployment whose Budgets cannot take it is
// skipped for the next candidate; when the execution ends it settles the reservation to
// what was spent, exactly once, whichever replica ends it.
//
// The controllers (or the standalone loader) compile Budget objects into Budget values
// and publish them as a Set through a Holder, as they publish the routing table.
package budget

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Budget is one Budget object as the runtime enforces it. Values are immutable once
// published in a Set.
type Budget struct {
	// UID is the object's uid: its counters belong to it, so that editing a Budget
	// keeps what was used and one deleted and created again starts afresh.
	UID string
	// Namespace and Name identify the object; it governs deployments of Namespace only.
	Namespace, Name string
	// Selects reports whether the Budget governs a deployment with these labels; nil
	// governs every deployment of the namespace.
	Selects func(labels map[string]string) bool
	// Subjects are whose executions count; empty: every caller's.
	Subjects []Subject
	// PerSubject gives each caller the whole of every limit.
	PerSubject bool
	// Limits must all hold; 1 to 8.
	Limits []Limit
	// Audit counts and reports but never refuses (action: Audit).
	Audit bool
	// Invalid marks a Budget the runtime cannot evaluate (a time zone it does not know):
	// it takes every deployment it governs out of routing for its subjects.
	Invalid bool
}

// Subject is a caller a Budget counts: a ServiceAccount (Namespace and Name), a Group
// or a User (Name).
type Subject struct {
	Kind      SubjectKind
	Namespace string
	Name      string
}

// SubjectKind is the kind of a Subject.
type SubjectKind string

// The kinds of subjects.
const (
	ServiceAccount SubjectKind = "ServiceAccount"
	Group          SubjectKind = "Group"
	User           SubjectKind = "User"
)

// Limit is what a Budget allows in one window: a cost in micro-units of the governed
// deployments' currency, tokens, requests; 0 where the limit sets none.
type Limit struct {
	Window   Window
	Location *time.Location
	Cost     pricing.Micro
	Tokens   int64
	Requests int64
}

// Units of the counters.
const (
	UnitCost     = "cost"
	UnitTokens   = "tokens"
	UnitRequests = "requests"
)

// NeedsPricing reports whether a limit counts cost: every governed deployment must
// then declare prices (Ready=False/NoPricing otherwise).
func (b *Budget) NeedsPricing() bool {
	return slices.ContainsFunc(b.Limits, func(l Limit) bool { return l.Cost > 0 })
}

// NeedsOutputCap reports whether a limit counts cost or tokens: every governed
// deployment must then cap its output (Ready=False/NoOutputCap otherwise), or its
// worst case would be unbounded.
func (b *Budget) NeedsOutputCap() bool {
	return slices.ContainsFunc(b.Limits, func(l Limit) bool { return l.Cost > 0 || l.Tokens > 0 })
}

// Governs reports whether b governs d: the same namespace and a matching selector.
func (b *Budget) Governs(d *routing.Deployment) bool {
	return d.Ref.Namespace == b.Namespace && (b.Selects == nil || b.Selects(d.Labels))
}

// Counts reports whether b counts the executions of a caller with this name and these
// groups.
func (b *Budget) Counts(name string, groups []string) bool {
	if len(b.Subjects) == 0 {
		return true
	}
	for _, s := range b.Subjects {
		switch s.Kind {
		case ServiceAccount:
			if name == "system:serviceaccount:"+s.Namespace+":"+s.Name {
				return true
			}
		case Group:
			if slices.Contains(groups, s.Name) {
				return true
			}
		case User:
			if name == s.Name {
				return true
			}
		}
	}
	return false
}

// Counter names the counter of one unit in the window of l that starts at start, for
// subject when the Budget is PerSubject ("" otherwise). Counters belong to the Budget's
// uid and the window's start, so editing a Budget keeps them.
func (b *Budget) Counter(start time.Time, w Window, unit, subject string) string {
	name := "budget/" + b.UID + "/" + string(w) + "/" + strconv.FormatInt(start.Unix(), 10) + "/" + unit
	if subject != "" {
		name += "/" + subject
	}
	return name
}

// Set is the published Budgets: immutable, by namespace.
type Set struct {
	byNamespace map[string][]*Budget
	n           int
}

// NewSet indexes budgets; callers must not modify them afterwards.
func NewSet(budgets []Budget) *Set {
	s := &Set{byNamespace: map[string][]*Budget{}, n: len(budgets)}
	for i := range budgets {
		b := &budgets[i]
		s.byNamespace[b.Namespace] = append(s.byNamespace[b.Namespace], b)
	}
	for _, list := range s.byNamespace {
		slices.SortFunc(list, func(a, b *Budget) int { return cmp.Compare(a.Name, b.Name) })
	}
	return s
}

// In returns the Budgets of namespace ns, sorted by name; the caller must not modify
// the slice.
func (s *Set) In(ns string) []*Budget {
	if s == nil {
		return nil
	}
	return s.byNamespace[ns]
}

// All returns every Budget of the set, by namespace and name.
func (s *Set) All() []*Budget {
	if s == nil {
		return nil
	}
	var out []*Budget
	for _, ns := range slices.Sorted(maps.Keys(s.byNamespace)) {
		out = append(out, s.byNamespace[ns]...)
	}
	return out
}

// Len is the number of Budgets in the set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Holder publishes the current Set; Load is one atomic read.
type Holder struct{ set atomic.Pointer[Set] }

// Load returns the current set; never nil.
func (h *Holder) Load() *Set {
	if s := h.set.Load(); s != nil {
		return s
	}
	return emptySet
}

// Store publishes s.
func (h *Holder) Store(s *Set) { h.set.Store(s) }

var emptySet = NewSet(nil)
