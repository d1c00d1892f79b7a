// Package routing holds Switchboard's live routing table: the immutable set of routable
// model deployments the runtime serves from, and the eligibility and ordering rules of
// spec/routing.md. The controllers (or the standalone manifest loader) convert their
// objects into Deployment values and publish a new Table through a Holder; request
// handling loads one Table per execution and never locks.
package routing

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/pricing"
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

// Credential is a provider credential, or one part of it (an AWS secret access key, a
// session token): the one type every credential value is held in between the Secret and
// the wire (spec/modeldeployments.md, "Credentials"). It never prints its value: String,
// GoString, Format (every fmt verb) and MarshalJSON write "[redacted]" ("[none]" when
// empty). The value sits behind a pointer, because fmt prints a struct's unexported
// fields by reflection, without calling their methods: an adapter holding a Credential
// in an unexported field would otherwise print it raw, while fmt prints a pointer
// nested in a value as an address. Reveal returns the value where it goes on the wire.
type Credential struct{ value *string }

// NewCredential wraps a credential value.
func NewCredential(v string) Credential {
	if v == "" {
		return Credential{}
	}
	return Credential{value: &v}
}

// Reveal returns the credential value. Call it only where the value is put on the wire,
// or compared with what a provider sent back.
func (c Credential) Reveal() string {
	if c.value == nil {
		return ""
	}
	return *c.value
}

// IsSet reports whether a value is present.
func (c Credential) IsSet() bool { return c.value != nil }

// What a Credential prints instead of its value.
const (
	credentialRedacted = "[redacted]"
	credentialNone     = "[none]"
)

func (c Credential) String() string {
	if c.value == nil {
		return credentialNone
	}
	return credentialRedacted
}

// GoString keeps %#v from printing the value.
func (c Credential) GoString() string { return c.String() }

// Format writes String for every verb and flag (%d and %x of a struct holding a string
// would otherwise print it).
func (c Credential) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(c.String())) }

// MarshalJSON writes String as a JSON string.
func (c Credential) MarshalJSON() ([]byte, error) { return []byte(`"` + c.String() + `"`), nil }

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
	Endpoint string
	// Region and Project place a cloud provider's call (bedrock and vertex); empty for
	// the others.
	Region     string
	Project    string
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
	// Labels are the ModelDeployment's labels, which Budget selectors match
	// (spec/budgets.md); nil for none.
	Labels map[string]string
	// Pricing is the deployment's prices (spec.pricing); nil when none are declared.
	Pricing *pricing.Prices
	// MaxOutputTokens is spec.limits.maxOutputTokens: the provider's output cap, which a
	// request may only lower, and what Budgets reserve for the output; 0 for none.
	MaxOutputTokens int64

	// refString is Ref.String(), set when the deployment enters a Table (see
	// RefString).
	refString string
}

// RefString returns d's Ref as "namespace/name". A deployment in a Table has it
// formatted once, so labelling metrics, events and logs with it costs no allocation
// per attempt.
func (d *Deployment) RefString() string {
	if d.refString != "" {
		return d.refString
	}
	return d.Ref.String()
}

// Table is an immutable snapshot of the routable deployments, indexed by ability. Its
// indexes are persistent (index.go): a table derived from another by one change shares
// with it everything the change did not touch.
type Table struct {
	byAbility  pmap[ability, []*Deployment] // each sorted by routeOrder
	byRef      pmap[Ref, *Deployment]
	namespaces []string // of the deployments, sorted, each once; nil when empty
}

// NewTable indexes deployments. It copies the slice headers it keeps; callers must not
// modify the deployments afterwards.
func NewTable(deployments []Deployment) *Table {
	all := make([]Deployment, len(deployments))
	copy(all, deployments)
	ds := make([]*Deployment, len(all))
	for i := range all {
		all[i].refString = all[i].Ref.String()
		ds[i] = &all[i]
	}
	t, _ := buildTable(ds)
	return t
}

// buildTable indexes ds, which it keeps, and returns the number of deployments of each
// namespace, which the Registry keeps to know when a change adds or removes a namespace.
func buildTable(ds []*Deployment) (*Table, map[string]int) {
	t := &Table{byRef: buildPmap(len(ds), func(i int) (Ref, *Deployment) { return ds[i].Ref, ds[i] })}

	// Group by ability into one backing array, each group with its exact capacity, so
	// that each list is allocated once and sorted in place. The first pass numbers the
	// abilities and remembers each listing's number, so the second pass needs no lookup.
	number := make(map[string]int32)
	var sizes []int
	var listings []int32
	perNamespace := make(map[string]int)
	for _, d := range ds {
		perNamespace[d.Ref.Namespace]++
		for _, a := range d.Abilities {
			n, ok := number[a]
			if !ok {
				n = int32(len(sizes))
				number[a] = n
				sizes = append(sizes, 0)
			}
			sizes[n]++
			listings = append(listings, n)
		}
	}
	groups := make([][]*Deployment, len(sizes))
	backing := make([]*Deployment, len(listings))
	for n, size := range sizes {
		groups[n], backing = backing[:0:size], backing[size:]
	}
	next := 0
	for _, d := range ds {
		for range d.Abilities {
			n := listings[next]
			groups[n] = append(groups[n], d)
			next++
		}
	}
	for _, g := range groups {
		slices.SortFunc(g, routeOrder)
	}
	names := make([]string, len(sizes))
	for a, n := range number {
		names[n] = a
	}
	t.byAbility = buildPmap(len(names), func(i int) (ability, []*Deployment) { return ability(names[i]), groups[i] })

	if len(perNamespace) > 0 {
		t.namespaces = slices.Sorted(maps.Keys(perNamespace))
	}
	return t, perNamespace
}

// replace returns the table with from (nil for an addition) replaced by to (nil for a
// removal); both have the same ref. namespaces is the new table's namespace list. t is
// left as it was. The cost is one shard of each index and the lists of the abilities
// from and to serve, not the whole table (index.go).
func (t *Table) replace(from, to *Deployment, namespaces []string) *Table {
	next := &Table{byAbility: t.byAbility, byRef: t.byRef, namespaces: namespaces}
	if to != nil {
		next.byRef = next.byRef.with(to.Ref, to)
	} else if from != nil {
		next.byRef = next.byRef.without(from.Ref)
	}
	var abilities []string
	if from != nil {
		abilities = append(abilities, from.Abilities...)
	}
	if to != nil {
		abilities = append(abilities, to.Abilities...)
	}
	for i, a := range abilities {
		if slices.Contains(abilities[:i], a) {
			continue // this ability's list is already done
		}
		key := ability(a)
		cur, _ := next.byAbility.get(key)
		var n int
		if to != nil {
			n = occurrences(to.Abilities, a)
		}
		if ds := replaceListed(cur, from, to, n); ds != nil {
			next.byAbility = next.byAbility.with(key, ds)
		} else {
			next.byAbility = next.byAbility.without(key)
		}
	}
	return next
}

func occurrences(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// Namespaces returns the namespaces that hold deployments, sorted. The caller must not
// modify the slice.
func (t *Table) Namespaces() []string { return t.namespaces }

// Len is the number of deployments in the table.
func (t *Table) Len() int { return t.byRef.len() }

// Get returns the deployment with the given ref.
func (t *Table) Get(ref Ref) (*Deployment, bool) {
	return t.byRef.get(ref)
}

// Deployments returns every deployment, sorted by ref. For inspection and tests.
func (t *Table) Deployments() []*Deployment {
	out := make([]*Deployment, 0, t.byRef.len())
	for _, d := range t.byRef.all() {
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
