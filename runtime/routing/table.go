// Package routing holds Switchboard's live routing table: the immutable set of routable
// model deployments the runtime serves from, and the eligibility and ordering rules of
// spec/routing.md. The controllers (or the standalone manifest loader) convert their
// objects into Deployment values and publish a new Table through a Holder; request
// handling loads one Table per execution and never locks.
package routing

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// Ref identifies a deployment as namespace/name.
type Ref struct {
	Namespace string
	Name      string
}

func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// ParseRef parses "namespace/name".
func ParseRef(s string) (Ref, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			if i == 0 || i == len(s)-1 {
				return Ref{}, false
			}
			return Ref{Namespace: s[:i], Name: s[i+1:]}, true
		}
	}
	return Ref{}, false
}

// Credential is a provider credential. It is opaque on purpose: its String and GoString
// methods never reveal the value, so a Deployment can be logged or printed in a test
// failure without leaking it. Adapters call Reveal when building the auth header.
type Credential struct{ value string }

// NewCredential wraps a credential value.
func NewCredential(v string) Credential { return Credential{value: v} }

// Reveal returns the credential value. Call it only where the value is put on the wire.
func (c Credential) Reveal() string { return c.value }

// IsSet reports whether a value is present.
func (c Credential) IsSet() bool { return c.value != "" }

func (c Credential) String() string {
	if c.value == "" {
		return "<none>"
	}
	return "<redacted>"
}

// GoString keeps %#v from printing the value.
func (c Credential) GoString() string { return c.String() }

// Limits are the caps the CapabilityPolicies selecting a deployment put on requests.
// Zero values mean "no cap".
type Limits struct {
	// MaxDeadline caps the execution deadline of requests routed to the deployment.
	MaxDeadline time.Duration
	// MaxAttempts caps the number of attempts of requests routed to the deployment.
	MaxAttempts int
	// Extensions holds, per selecting policy that restricts extensions, the patterns it
	// allows (an exact key, or a prefix ending in "*"). A request extension key must
	// match a pattern of every list.
	Extensions [][]string
}

// AllowsExtension reports whether key is allowed by every policy.
func (l Limits) AllowsExtension(key string) bool {
	for _, patterns := range l.Extensions {
		if !slices.ContainsFunc(patterns, func(p string) bool { return matchPattern(p, key) }) {
			return false
		}
	}
	return true
}

func matchPattern(pattern, key string) bool {
	if n := len(pattern); n > 0 && pattern[n-1] == '*' {
		return len(key) >= n-1 && key[:n-1] == pattern[:n-1]
	}
	return pattern == key
}

// Deployment is one routable model: everything the runtime needs to call it. Values are
// immutable once published in a Table.
type Deployment struct {
	Ref      Ref
	Provider string
	Model    string
	// Endpoint is the base URL; empty means the provider's default.
	Endpoint   string
	Credential Credential
	// CredentialsVersion changes whenever the credential Secret changes.
	CredentialsVersion string
	Abilities          []string
	// Capabilities are the effective capabilities (declared ∩ policies).
	Capabilities   CapSet
	Priority       int32
	Weight         int32
	AttemptTimeout time.Duration
	Limits         Limits
	// Parameters names the model input parameters callers may set through the
	// provider's parameters extension (ModelDeployment spec.allowedParameters); empty
	// means none.
	Parameters []string
}

// Table is an immutable snapshot of the routable deployments, indexed by ability.
type Table struct {
	byAbility  map[string][]*Deployment // each sorted by priority desc, then ref
	byRef      map[Ref]*Deployment
	namespaces []string // of the deployments, sorted, each once
}

// NewTable indexes deployments. It copies the slice headers it keeps; callers must not
// modify the deployments afterwards.
func NewTable(deployments []Deployment) *Table {
	t := &Table{
		byAbility: make(map[string][]*Deployment),
		byRef:     make(map[Ref]*Deployment, len(deployments)),
	}
	all := make([]Deployment, len(deployments))
	copy(all, deployments)
	for i := range all {
		d := &all[i]
		t.byRef[d.Ref] = d
		t.namespaces = append(t.namespaces, d.Ref.Namespace)
		for _, a := range d.Abilities {
			t.byAbility[a] = append(t.byAbility[a], d)
		}
	}
	for _, ds := range t.byAbility {
		slices.SortFunc(ds, func(a, b *Deployment) int {
			if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
				return c
			}
			if c := cmp.Compare(a.Ref.Namespace, b.Ref.Namespace); c != 0 {
				return c
			}
			return cmp.Compare(a.Ref.Name, b.Ref.Name)
		})
	}
	slices.Sort(t.namespaces)
	t.namespaces = slices.Compact(t.namespaces)
	return t
}

// Namespaces returns the namespaces that hold deployments, sorted. The caller must not
// modify the slice.
func (t *Table) Namespaces() []string { return t.namespaces }

// Len is the number of deployments in the table.
func (t *Table) Len() int { return len(t.byRef) }

// Get returns the deployment with the given ref.
func (t *Table) Get(ref Ref) (*Deployment, bool) {
	d, ok := t.byRef[ref]
	return d, ok
}

// Deployments returns every deployment, sorted by ref. For inspection and tests.
func (t *Table) Deployments() []*Deployment {
	out := make([]*Deployment, 0, len(t.byRef))
	for _, d := range t.byRef {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *Deployment) int { return cmp.Compare(a.Ref.String(), b.Ref.String()) })
	return out
}

// Holder publishes the current Table. Load is a single atomic read; Store swaps the whole
// table. A Holder starts empty and not synced: the runtime reports ready only after the
// first complete table has been stored and MarkSynced called.
type Holder struct {
	table  atomic.Pointer[Table]
	synced atomic.Bool
}

// Load returns the current table; never nil.
func (h *Holder) Load() *Table {
	if t := h.table.Load(); t != nil {
		return t
	}
	return emptyTable
}

// Store publishes t.
func (h *Holder) Store(t *Table) { h.table.Store(t) }

// MarkSynced records that the table reflects every object known at start-up.
func (h *Holder) MarkSynced() { h.synced.Store(true) }

// Synced reports whether MarkSynced has been called.
func (h *Holder) Synced() bool { return h.synced.Load() }

var emptyTable = NewTable(nil)

func (d *Deployment) String() string {
	return fmt.Sprintf("%s(%s %s)", d.Ref, d.Provider, d.Model)
}
