package routing

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The universe the randomized test draws from: few names, so that sets hit existing refs
// and namespaces empty and fill again; "a-b" sorts between "a" and "b" in a different
// place as a namespace than inside "namespace/name".
var (
	randNamespaces = []string{"a", "a-b", "b", "c"}
	randNames      = []string{"m", "m-1", "x"}
	randAbilities  = []string{"chat", "summarize", "embed", "rare"}
	randCaps       = []CapSet{
		textCaps,
		textCaps | CapsOf(protocol.CapInputImage),
		textCaps | CapsOf(protocol.CapTools),
		CapsOf(protocol.CapInputImage, protocol.CapOutputText),
	}
)

func randomRef(rng *rand.Rand) Ref {
	return Ref{randNamespaces[rng.IntN(len(randNamespaces))], randNames[rng.IntN(len(randNames))]}
}

func randomDeployment(rng *rand.Rand, ref Ref) Deployment {
	d := Deployment{
		Ref:          ref,
		Provider:     "openai",
		Model:        fmt.Sprintf("model-%d", rng.IntN(1000)),
		Credential:   NewCredential(fmt.Sprintf("sk-%d", rng.IntN(1000))),
		Capabilities: randCaps[rng.IntN(len(randCaps))],
		Priority:     int32(rng.IntN(4) - 1),
		Weight:       int32(rng.IntN(300)),
	}
	for _, a := range rng.Perm(len(randAbilities))[:1+rng.IntN(3)] {
		d.Abilities = append(d.Abilities, randAbilities[a])
	}
	if rng.IntN(10) == 0 {
		// NewTable lists a deployment once per occurrence of an ability; the
		// incremental path must do the same.
		d.Abilities = append(d.Abilities, d.Abilities[0])
	}
	if rng.IntN(4) == 0 {
		d.Limits = Limits{MaxAttempts: 1 + rng.IntN(3), MaxDeadline: time.Duration(1+rng.IntN(5)) * time.Minute,
			Extensions: [][]string{{"openai.*"}}}
	}
	return d
}

// TestRegistryIncrementalMatchesNewTable applies random sets and removals through the
// registry, before and after Start, and checks every published table against NewTable of
// the same entries: deriving a table from the previous one must be indistinguishable from
// building it afresh. At the end every earlier table is checked again: a later change
// must not have modified what it shared with them.
func TestRegistryIncrementalMatchesNewTable(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			h := &Holder{}
			publishes, models := 0, -1
			reg := NewRegistry(h, OnPublish(func(n int) { publishes++; models = n }))

			type snapshot struct {
				table   *Table
				entries []Deployment
			}
			var history []snapshot
			current := map[Ref]Deployment{}
			startAt := rng.IntN(15)
			for step := range 300 {
				if step == startAt {
					reg.Start()
					if !h.Synced() || publishes != 1 {
						t.Fatalf("Start: synced %v, %d publishes; want synced, 1", h.Synced(), publishes)
					}
				}
				started := step >= startAt
				before := publishes
				ref := randomRef(rng)
				_, existed := current[ref]
				if rng.IntN(3) == 0 {
					reg.Set(ref, nil)
					delete(current, ref)
				} else {
					d := randomDeployment(rng, ref)
					reg.Set(ref, &d)
					current[ref] = d
					existed = true // a set always publishes once started
				}
				if wantPublish := started && existed; (publishes > before) != wantPublish || publishes > before+1 {
					t.Fatalf("step %d: %d publishes, want one: %v", step, publishes-before, wantPublish)
				}
				if !started {
					continue
				}
				entries := slices.Collect(maps.Values(current))
				want := NewTable(entries)
				got := h.Load()
				if models != len(entries) {
					t.Fatalf("step %d: OnPublish got %d models, want %d", step, models, len(entries))
				}
				if !assertSameTable(t, got, want) {
					t.Fatalf("step %d: published table differs from NewTable (after Set(%s))", step, ref)
				}
				for _, ns := range randNamespaces {
					for _, name := range randNames {
						r := Ref{ns, name}
						if _, ok := current[r]; reg.Live(r) != ok {
							t.Fatalf("step %d: Live(%s) = %v, want %v", step, r, !ok, ok)
						}
					}
				}
				history = append(history, snapshot{got, entries})
			}
			for i, s := range history {
				if !assertSameTable(t, s.table, NewTable(s.entries)) {
					t.Fatalf("table %d changed after it was published", i)
				}
			}
		})
	}
}

// assertSameTable reports differences between got and want through every accessor, the
// routes of a set of queries, and the per-ability lists themselves.
func assertSameTable(t *testing.T, got, want *Table) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		ok = false
	}
	if got.Len() != want.Len() {
		fail("Len = %d, want %d", got.Len(), want.Len())
	}
	if diff := cmp.Diff(want.Namespaces(), got.Namespaces()); diff != "" {
		fail("Namespaces (-want +got):\n%s", diff)
	}
	if g, w := derefs(got.Deployments()), derefs(want.Deployments()); !reflect.DeepEqual(g, w) {
		fail("Deployments = %v, want %v", g, w)
	}
	for _, ns := range randNamespaces {
		for _, name := range randNames {
			ref := Ref{ns, name}
			g, gok := got.Get(ref)
			w, wok := want.Get(ref)
			if gok != wok || (gok && !reflect.DeepEqual(*g, *w)) {
				fail("Get(%s) = %v, %v; want %v, %v", ref, g, gok, w, wok)
			}
		}
	}
	abilities := func(tb *Table) map[string][]string {
		out := map[string][]string{}
		for a, ds := range tb.byAbility.all() {
			for _, d := range ds {
				out[string(a)] = append(out[string(a)], d.Ref.String())
			}
		}
		return out
	}
	if diff := cmp.Diff(abilities(want), abilities(got)); diff != "" {
		fail("ability lists (-want +got):\n%s", diff)
	}
	for _, q := range differentialQueries() {
		gr, gerr := got.Route(q())
		wr, werr := want.Route(q())
		if diff := cmp.Diff(routeSummary(wr, werr), routeSummary(gr, gerr)); diff != "" {
			fail("Route(%s) (-want +got):\n%s", q().Ability, diff)
		}
	}
	return ok
}

func derefs(ds []*Deployment) []Deployment {
	out := make([]Deployment, len(ds))
	for i, d := range ds {
		out[i] = *d
	}
	return out
}

// differentialQueries returns query constructors, so that each table is asked with a
// fresh random source of the same seed and equal tables draw the same order.
func differentialQueries() []func() Query {
	var qs []func() Query
	for _, a := range append(slices.Clone(randAbilities), "unknown") {
		for _, req := range []CapSet{CapsOf(protocol.CapInputText), CapsOf(protocol.CapInputImage), CapsOf(protocol.CapTools, protocol.CapInputImage)} {
			qs = append(qs, func() Query {
				return Query{Ability: a, Required: req, Deadline: time.Hour, MaxAttempts: 20, Rand: rand.New(rand.NewPCG(3, 4))}
			})
		}
		qs = append(qs,
			func() Query {
				return Query{Ability: a, Required: CapsOf(protocol.CapInputText), Deadline: time.Hour, MaxAttempts: 2,
					Prefer: []Ref{{"b", "x"}, {"a", "m"}}, ExtensionKeys: []string{"openai.seed"}, Rand: rand.New(rand.NewPCG(5, 6))}
			},
			func() Query {
				return Query{Ability: a, Required: CapsOf(protocol.CapOutputText), Deadline: time.Hour, MaxAttempts: 20,
					Visible: visibleIf(func(ns string) bool { return ns != "a-b" }), ExtensionKeys: []string{"anthropic.x"},
					Rand: rand.New(rand.NewPCG(7, 8))}
			})
	}
	return qs
}

type routeResult struct {
	Candidates  []string
	MaxAttempts int
	Deadline    time.Duration
	Err         string
	Unmet       CapSet
	NoAbility   bool
}

func routeSummary(r Route, err error) routeResult {
	out := routeResult{Candidates: refs(r), MaxAttempts: r.MaxAttempts, Deadline: r.Deadline}
	if err != nil {
		out.Err = err.Error()
		var ne *NoEligibleError
		if errors.As(err, &ne) {
			out.Unmet, out.NoAbility = ne.Unmet, ne.NoAbility
		}
	}
	return out
}

// TestReplaceListedKeepsOrder checks the sorted-list edit on its own: moving a
// deployment to another priority, removing the last entry, and an ability listed twice.
func TestReplaceListedKeepsOrder(t *testing.T) {
	mk := func(name string, prio int32) *Deployment {
		return &Deployment{Ref: Ref{"ns", name}, Priority: prio}
	}
	a, b, c := mk("a", 1), mk("b", 1), mk("c", 0)
	list := []*Deployment{a, b, c}
	names := func(ds []*Deployment) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Ref.Name)
		}
		return out
	}
	tests := []struct {
		name     string
		from, to *Deployment
		n        int
		want     []string
	}{
		{"raise priority", c, mk("c", 2), 1, []string{"c", "a", "b"}},
		{"lower priority", a, mk("a", -1), 1, []string{"b", "c", "a"}},
		{"remove", b, nil, 0, []string{"a", "c"}},
		{"add listed twice", nil, mk("bb", 1), 2, []string{"a", "b", "bb", "bb", "c"}},
		{"no longer serves", b, mk("b", 1), 0, []string{"a", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := replaceListed(list, tt.from, tt.to, tt.n)
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"a", "b", "c"}, names(list)); diff != "" {
				t.Errorf("input list modified (-want +got):\n%s", diff)
			}
		})
	}
	if got := replaceListed([]*Deployment{a}, a, nil, 0); got != nil {
		t.Errorf("removing the last entry = %v, want nil", got)
	}
}
