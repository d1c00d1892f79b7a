package routing

import (
	"math"
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
	// Deadline is the requested execution deadline (> 0).
	Deadline time.Duration
	// MaxAttempts is the requested number of attempts (> 0).
	MaxAttempts int
	// ExtensionKeys are the request's extension keys.
	ExtensionKeys []string
	// Rand orders deployments of equal priority; nil uses the global source. Tests pass a
	// seeded source.
	Rand *rand.Rand
}

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
}

func (e *NoEligibleError) Error() string {
	switch {
	case e.NoAbility:
		return "no routable model serves the requested ability"
	case e.Unmet != 0:
		return "no routable model has the required capabilities: " + e.Unmet.String()
	default:
		return "no routable model has all required capabilities and allows the request"
	}
}

// Route returns the eligible deployments for q in attempt order (CONTRACT §3):
// eligible = serves the ability, effective capabilities ⊇ required, and every extension
// key allowed by the deployment's policies; order = preferred refs first in the caller's
// order, then priority descending, then weighted random by weight among equal priority.
// Policy caps on deadline and attempts narrow the route's limits; they do not exclude.
func (t *Table) Route(q Query) (Route, error) {
	serving := t.byAbility[q.Ability]
	if len(serving) == 0 {
		return Route{}, &NoEligibleError{NoAbility: true}
	}
	eligible := make([]*Deployment, 0, len(serving))
	var offered CapSet
	for _, d := range serving {
		offered |= d.Capabilities
		if d.Capabilities.Has(q.Required) && allowsAll(d.Limits, q.ExtensionKeys) {
			eligible = append(eligible, d)
		}
	}
	if len(eligible) == 0 {
		return Route{}, &NoEligibleError{Unmet: q.Required.Without(offered)}
	}

	ordered := order(eligible, q.Prefer, q.Rand)

	r := Route{MaxAttempts: q.MaxAttempts, Deadline: q.Deadline}
	for i := 0; i < len(ordered) && i < r.MaxAttempts; i++ {
		l := ordered[i].Limits
		if l.MaxAttempts > 0 && l.MaxAttempts < r.MaxAttempts {
			r.MaxAttempts = max(l.MaxAttempts, 1)
		}
		if l.MaxDeadline > 0 && l.MaxDeadline < r.Deadline {
			r.Deadline = l.MaxDeadline
		}
	}
	r.MaxAttempts = min(r.MaxAttempts, len(ordered))
	r.Candidates = ordered[:r.MaxAttempts]
	return r, nil
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

// order puts preferred eligible deployments first (caller's order, duplicates dropped),
// then the rest by priority descending (eligible is already sorted so) with a weighted
// random permutation inside each priority group.
func order(eligible []*Deployment, prefer []Ref, rng *rand.Rand) []*Deployment {
	out := make([]*Deployment, 0, len(eligible))
	var picked map[*Deployment]bool
	if len(prefer) > 0 {
		picked = make(map[*Deployment]bool, len(prefer))
		for _, ref := range prefer {
			for _, d := range eligible {
				if d.Ref == ref && !picked[d] {
					picked[d] = true
					out = append(out, d)
				}
			}
		}
	}
	rest := eligible
	if len(picked) > 0 {
		rest = slices.DeleteFunc(slices.Clone(eligible), func(d *Deployment) bool { return picked[d] })
	}
	for start := 0; start < len(rest); {
		end := start + 1
		for end < len(rest) && rest[end].Priority == rest[start].Priority {
			end++
		}
		out = append(out, weightedShuffle(rest[start:end], rng)...)
		start = end
	}
	return out
}

// weightedShuffle returns group in a random order where each position is drawn with
// probability proportional to weight among those not yet drawn (Efraimidis–Spirakis:
// sort by u^(1/w) descending).
func weightedShuffle(group []*Deployment, rng *rand.Rand) []*Deployment {
	if len(group) == 1 {
		return group
	}
	type keyed struct {
		d   *Deployment
		key float64
	}
	ks := make([]keyed, len(group))
	for i, d := range group {
		u := 0.0
		if rng != nil {
			u = rng.Float64()
		} else {
			u = rand.Float64()
		}
		w := float64(max(d.Weight, 1))
		ks[i] = keyed{d, math.Pow(u, 1/w)}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		switch {
		case a.key > b.key:
			return -1
		case a.key < b.key:
			return 1
		}
		return 0
	})
	out := make([]*Deployment, len(ks))
	for i, k := range ks {
		out[i] = k.d
	}
	return out
}
