package routing

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Query is what one request asks of the table. The engine fills it from a decoded request
// with defaults already applied.
type Query struct {
	// Ability is the requested ability name.
	Ability string
	// Required is the required set: explicit requirements ∪ what the input implies
	// (see Required).
	Required CapSet
	// Prefer lists deployments to try first, in the caller's order, when eligible.
	Prefer []Ref
	// Only, if not nil, restricts the route to these deployments: the others serving
	// the ability are treated as if they did not exist.
	Only []Ref
	// Deadline is the requested execution deadline (> 0).
	Deadline time.Duration
	// MaxAttempts is the requested number of attempts (> 0).
	MaxAttempts int
	// ExtensionKeys are the request's extension keys.
	ExtensionKeys []string
	// Visible, if set, says which namespaces' deployments the caller may use (spec/
	// routing.md, "Eligibility"): the others are treated as if they did not exist, so
	// that neither the route, a preference nor the error reveals them.
	Visible Visibility
	// Admit, if set, is asked last about each deployment that passes every other check;
	// a non-nil error makes the deployment ineligible. The engine uses it to ask the
	// deployment's adapter whether it can encode the request (part roles, media form,
	// parameters), so a request no adapter can send is refused before it exists.
	Admit func(d *Deployment) error
	// Rand orders deployments of equal priority; nil uses the global source. Tests pass a
	// seeded source.
	Rand *rand.Rand
}

// Visibility decides which namespaces' deployments a caller may use. Route calls it
// once, before judging any deployment, with candidates, the namespaces of the
// deployments that serve the query's ability (sorted, each once; empty when none
// does), and all, every namespace of the table (sorted); neither may be modified. It
// returns the test Route applies to the candidates' namespaces, and to no other, or an
// error, which Route returns as it is.
//
// Asking about all the candidates at once lets an implementation that consults an
// authorizer ask about them concurrently, and about nothing else; all is there for the
// one that must tell a caller who may use no namespace at all, when none of the
// candidates is visible, from one who may not use these.
type Visibility func(candidates, all []string) (visible func(namespace string) bool, err error)

// Route is the plan for one execution: candidates in attempt order and the limits after
// every policy of the candidates it may use.
type Route struct {
	// Candidates are tried in order, one attempt each; len(Candidates) == MaxAttempts.
	Candidates []*Deployment
	// MaxAttempts is the request's attempts, capped by the policies of the candidates.
	MaxAttempts int
	// Deadline is the request's deadline, capped by the policies of the candidates.
	Deadline time.Duration
}

// NoEligibleError says that no deployment can serve a query. It names only capability ids
// (a closed set), never the caller's ability string.
type NoEligibleError struct {
	// Unmet holds required capabilities that no deployment serving the ability has.
	// It may be empty when each capability is offered by some deployment but none offers
	// all of them, or when policies exclude the request.
	Unmet CapSet
	// NoAbility is true when no deployment serves the ability at all.
	NoAbility bool
	// Refused is the first refusal of Query.Admit, when it excluded a deployment that
	// every other check allowed; nil otherwise.
	Refused error
}

func (e *NoEligibleError) Error() string {
	switch {
	case e.NoAbility:
		return "no routable model serves the requested ability"
	case e.Unmet != 0:
		return "no routable model has the required capabilities: " + e.Unmet.String()
	case e.Refused != nil:
		return "no routable model can take the request as given"
	default:
		return "no routable model has all required capabilities and allows the request"
	}
}

// Route returns the eligible deployments for q in attempt order (spec/routing.md):
// eligible = serves the ability, effective capabilities ⊇ required, every extension key
// allowed by the deployment's policies, and admitted by q.Admit (the adapter can encode
// the request); order = preferred refs first in the caller's
// order, then priority descending, then weighted random by weight among equal priority.
// Only the first q.MaxAttempts positions are drawn, so a lookup in a large table costs one
// pass over the ability's deployments. Policy caps on deadline and attempts narrow the
// route's limits; they do not exclude.
func (t *Table) Route(q Query) (Route, error) {
	serving, _ := t.byAbility.get(ability(q.Ability))
	if q.Only != nil {
		serving = slices.DeleteFunc(slices.Clone(serving), func(d *Deployment) bool { return !slices.Contains(q.Only, d.Ref) })
	}
	var visible func(namespace string) bool
	if q.Visible != nil {
		var err error
		if visible, err = q.Visible(namespacesOf(serving), t.namespaces); err != nil {
			return Route{}, err
		}
		serving = slices.DeleteFunc(slices.Clone(serving), func(d *Deployment) bool { return !visible(d.Ref.Namespace) })
	}
	if len(serving) == 0 {
		return Route{}, &NoEligibleError{NoAbility: true}
	}
	limit := max(q.MaxAttempts, 1)
	var refused error
	eligible := func(d *Deployment) bool {
		if !d.Capabilities.Has(q.Required) || !allowsAll(d.Limits, q.ExtensionKeys) {
			return false
		}
		if q.Admit != nil {
			if err := q.Admit(d); err != nil {
				if refused == nil {
					refused = err
				}
				return false
			}
		}
		return true
	}

	out := make([]*Deployment, 0, limit)
	// judged holds the preferred deployments already checked, eligible or not, so that
	// the pass below neither adds them twice nor asks Admit about them again.
	var judged []*Deployment
	for _, ref := range q.Prefer {
		if len(out) == limit {
			break
		}
		d, ok := t.byRef.get(ref)
		// A deployment that serves the ability is among those whose namespaces
		// visible was asked about.
		if !ok || !slices.Contains(d.Abilities, q.Ability) || slices.Contains(judged, d) ||
			(visible != nil && !visible(d.Ref.Namespace)) {
			continue
		}
		judged = append(judged, d)
		if eligible(d) {
			out = append(out, d)
		}
	}
	for start := 0; start < len(serving) && len(out) < limit; {
		end := start + 1
		for end < len(serving) && serving[end].Priority == serving[start].Priority {
			end++
		}
		var group []*Deployment
		for _, d := range serving[start:end] {
			if !slices.Contains(judged, d) && eligible(d) {
				group = append(group, d)
			}
		}
		out = drawWeighted(out, group, limit-len(out), q.Rand)
		start = end
	}
	if len(out) == 0 {
		var offered CapSet
		for _, d := range serving {
			offered |= d.Capabilities
		}
		unmet := q.Required.Without(offered)
		if unmet != 0 {
			refused = nil // the capabilities are the reason; a refusal is incidental
		}
		return Route{}, &NoEligibleError{Unmet: unmet, Refused: refused}
	}

	r := Route{MaxAttempts: limit, Deadline: q.Deadline}
	for i := 0; i < len(out) && i < r.MaxAttempts; i++ {
		l := out[i].Limits
		if l.MaxAttempts > 0 && l.MaxAttempts < r.MaxAttempts {
			r.MaxAttempts = max(l.MaxAttempts, 1)
		}
		if l.MaxDeadline > 0 && l.MaxDeadline < r.Deadline {
			r.Deadline = l.MaxDeadline
		}
	}
	r.MaxAttempts = min(r.MaxAttempts, len(out))
	r.Candidates = out[:r.MaxAttempts]
	return r, nil
}

// namespacesOf returns the namespaces of ds, sorted, each once.
func namespacesOf(ds []*Deployment) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.Ref.Namespace)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func allowsAll(l Limits, keys []string) bool {
	if len(l.Extensions) == 0 {
		return true
	}
	for _, k := range keys {
		if !l.AllowsExtension(k) {
			return false
		}
	}
	return true
}

// drawWeighted appends up to k deployments of group to out, each drawn with probability
// proportional to its weight among those not yet drawn (weighted sampling without
// replacement). It reorders group.
func drawWeighted(out, group []*Deployment, k int, rng *rand.Rand) []*Deployment {
	if len(group) == 1 && k > 0 {
		return append(out, group[0])
	}
	var total int64
	for _, d := range group {
		total += int64(max(d.Weight, 1))
	}
	for n := len(group); k > 0 && n > 0; k, n = k-1, n-1 {
		var x int64
		if rng != nil {
			x = rng.Int64N(total)
		} else {
			x = rand.Int64N(total)
		}
		i := 0
		for ; i < n-1; i++ {
			if x -= int64(max(group[i].Weight, 1)); x < 0 {
				break
			}
		}
		out = append(out, group[i])
		total -= int64(max(group[i].Weight, 1))
		group[i], group[n-1] = group[n-1], group[i]
	}
	return out
}
