package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

func text(s string) protocol.Part { return protocol.Part{Type: protocol.PartText, Text: s} }

func TestRequiredInfersEveryPartType(t *testing.T) {
	tests := []struct {
		part protocol.PartType
		want protocol.Capability
	}{
		{protocol.PartText, protocol.CapInputText},
		{protocol.PartJSON, protocol.CapInputJSON},
		{protocol.PartImage, protocol.CapInputImage},
		{protocol.PartAudio, protocol.CapInputAudio},
		{protocol.PartVideo, protocol.CapInputVideo},
		{protocol.PartFile, protocol.CapInputFile},
		{protocol.PartTool, protocol.CapTools},
		{protocol.PartToolCall, protocol.CapTools},
		{protocol.PartToolResult, protocol.CapTools},
	}
	for _, tt := range tests {
		t.Run(string(tt.part), func(t *testing.T) {
			got := Required(nil, []protocol.Part{{Type: tt.part}})
			if want := CapsOf(tt.want); got != want {
				t.Errorf("Required(%s part) = %s, want %s", tt.part, got, want)
			}
		})
	}
}

func TestRequiredWalksToolResultContent(t *testing.T) {
	result := protocol.Part{Type: protocol.PartToolResult, Content: &protocol.ToolContent{
		Parts: []protocol.Part{text("ok"), {Type: protocol.PartImage}},
	}}
	got := Required(nil, []protocol.Part{result})
	want := CapsOf(protocol.CapTools, protocol.CapInputText, protocol.CapInputImage)
	if got != want {
		t.Errorf("Required = %s, want %s", got, want)
	}
}

func TestRequiredNarrowerRequirementsCannotRemoveInferredNeeds(t *testing.T) {
	input := []protocol.Part{text("describe"), {Type: protocol.PartImage}, {Type: protocol.PartTool}}
	for _, explicit := range [][]protocol.Capability{
		nil,
		{},
		{protocol.CapInputText},
		{protocol.CapOutputText, protocol.CapStreaming},
	} {
		got := Required(explicit, input)
		if !got.Has(CapsOf(protocol.CapInputText, protocol.CapInputImage, protocol.CapTools)) {
			t.Errorf("Required(%v) = %s lost an inferred need", explicit, got)
		}
		if !got.Has(CapsOf(explicit...)) {
			t.Errorf("Required(%v) = %s lost an explicit need", explicit, got)
		}
	}
}

func deployment(ns, name string, caps CapSet, opts ...func(*Deployment)) Deployment {
	d := Deployment{Ref: Ref{ns, name}, Provider: "openai", Model: name, Abilities: []string{"chat"},
		Capabilities: caps, Weight: 100}
	for _, o := range opts {
		o(&d)
	}
	return d
}

var textCaps = CapsOf(protocol.CapInputText, protocol.CapInputJSON, protocol.CapOutputText)

func query(required CapSet, opts ...func(*Query)) Query {
	q := Query{Ability: "chat", Required: required, Deadline: 5 * time.Minute, MaxAttempts: 3,
		Rand: rand.New(rand.NewPCG(1, 2))}
	for _, o := range opts {
		o(&q)
	}
	return q
}

func refs(r Route) []string {
	out := make([]string, len(r.Candidates))
	for i, d := range r.Candidates {
		out[i] = d.Ref.String()
	}
	return out
}

// TestRouteGovernsGenerationKeys: the provider-neutral generation.* keys are governed
// by allowedExtensions like any other key: by exact key or by prefix, and a policy
// that lists only provider keys keeps them away.
func TestRouteGovernsGenerationKeys(t *testing.T) {
	limit := func(patterns ...string) func(*Deployment) {
		return func(d *Deployment) { d.Limits.Extensions = [][]string{patterns} }
	}
	table := NewTable([]Deployment{
		deployment("ai", "open", textCaps),
		deployment("ai", "prefix", textCaps, limit("generation.*")),
		deployment("ai", "exact", textCaps, limit("openai.*", "generation.temperature")),
		deployment("ai", "provider-only", textCaps, limit("openai.*", "anthropic.*")),
	})
	for keys, want := range map[string][]string{
		"generation.temperature":                  {"ai/exact", "ai/open", "ai/prefix"},
		"generation.top_k":                        {"ai/open", "ai/prefix"},
		"generation.temperature,openai.seed":      {"ai/exact", "ai/open"},
		"generation.temperature,generation.top_p": {"ai/open", "ai/prefix"},
		"openai.seed":                             {"ai/exact", "ai/open", "ai/provider-only"},
	} {
		r, err := table.Route(query(textCaps, func(q *Query) { q.ExtensionKeys = strings.Split(keys, ","); q.MaxAttempts = 5 }))
		if err != nil {
			t.Fatalf("%s: %v", keys, err)
		}
		got := refs(r)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: eligible %v, want %v", keys, got, want)
		}
	}
}

func TestRouteEligibility(t *testing.T) {
	vision := textCaps | CapsOf(protocol.CapInputImage)
	tools := textCaps | CapsOf(protocol.CapTools)
	table := NewTable([]Deployment{
		deployment("ai", "text", textCaps),
		deployment("ai", "vision", vision),
		deployment("ai", "tools", tools),
		deployment("ai", "summarizer", textCaps, func(d *Deployment) { d.Abilities = []string{"summarize"} }),
		deployment("ai", "no-ext", textCaps, func(d *Deployment) {
			d.Limits.Extensions = [][]string{{"openai.*"}, {"openai.seed", "anthropic.*"}}
		}),
	})
	tests := []struct {
		name      string
		q         Query
		want      []string
		wantUnmet CapSet
		noAbility bool
	}{
		{name: "text request: every chat model", q: query(CapsOf(protocol.CapInputText), func(q *Query) { q.MaxAttempts = 5 }),
			want: []string{"ai/no-ext", "ai/text", "ai/tools", "ai/vision"}},
		{name: "image needs input.image", q: query(Required(nil, []protocol.Part{text("x"), {Type: protocol.PartImage}})),
			want: []string{"ai/vision"}},
		{name: "tool part needs tools", q: query(Required(nil, []protocol.Part{{Type: protocol.PartTool}})),
			want: []string{"ai/tools"}},
		{name: "no model has audio", q: query(CapsOf(protocol.CapInputText, protocol.CapInputAudio)),
			wantUnmet: CapsOf(protocol.CapInputAudio)},
		{name: "image and tools on no single model", q: query(CapsOf(protocol.CapInputImage, protocol.CapTools))},
		{name: "unknown ability", q: query(textCaps, func(q *Query) { q.Ability = "translate" }), noAbility: true},
		{name: "extension key allowed by every policy list",
			q:    query(CapsOf(protocol.CapInputText), func(q *Query) { q.ExtensionKeys = []string{"openai.seed"}; q.MaxAttempts = 5 }),
			want: []string{"ai/no-ext", "ai/text", "ai/tools", "ai/vision"}},
		{name: "extension key refused by one policy list excludes the model",
			q:    query(CapsOf(protocol.CapInputText), func(q *Query) { q.ExtensionKeys = []string{"openai.temperature"}; q.MaxAttempts = 5 }),
			want: []string{"ai/text", "ai/tools", "ai/vision"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := table.Route(tt.q)
			if tt.want == nil {
				var ne *NoEligibleError
				if !errors.As(err, &ne) {
					t.Fatalf("Route() error = %v, want NoEligibleError", err)
				}
				if ne.Unmet != tt.wantUnmet || ne.NoAbility != tt.noAbility {
					t.Errorf("NoEligibleError = %+v, want unmet %s noAbility %v", ne, tt.wantUnmet, tt.noAbility)
				}
				return
			}
			if err != nil {
				t.Fatalf("Route() error = %v", err)
			}
			got := refs(r)
			// Equal priority and weight: order is random; compare as sets here.
			if diff := cmp.Diff(tt.want, slices.Sorted(slices.Values(got))); diff != "" {
				t.Errorf("eligible (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRouteMessageNeverNamesTheAbility(t *testing.T) {
	table := NewTable([]Deployment{deployment("ai", "text", textCaps)})
	for _, ability := range []string{"chat", "secret-ability-canary"} {
		_, err := table.Route(query(CapsOf(protocol.CapInputVideo), func(q *Query) { q.Ability = ability }))
		if err == nil {
			t.Fatal("Route() succeeded, want an error")
		}
		if msg := err.Error(); strings.Contains(msg, ability) {
			t.Errorf("error %q names the ability", msg)
		}
	}
}

func TestRouteOrder(t *testing.T) {
	table := NewTable([]Deployment{
		deployment("ai", "low", textCaps, func(d *Deployment) { d.Priority = -1 }),
		deployment("ai", "high-a", textCaps, func(d *Deployment) { d.Priority = 10 }),
		deployment("ai", "high-b", textCaps, func(d *Deployment) { d.Priority = 10 }),
		deployment("ai", "mid", textCaps),
		deployment("other", "vision", CapsOf(protocol.CapInputImage)),
	})
	r, err := table.Route(query(CapsOf(protocol.CapInputText), func(q *Query) {
		q.MaxAttempts = 5
		// Preferred first, in the caller's order; ineligible and duplicate refs are skipped.
		q.Prefer = []Ref{{"ai", "low"}, {"other", "vision"}, {"ai", "mid"}, {"ai", "low"}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := refs(r)
	if diff := cmp.Diff([]string{"ai/low", "ai/mid"}, got[:2]); diff != "" {
		t.Errorf("preferred prefix (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ai/high-a", "ai/high-b"}, slices.Sorted(slices.Values(got[2:4]))); diff != "" {
		t.Errorf("priority group (-want +got):\n%s", diff)
	}
	if len(got) != 4 {
		t.Errorf("got %d candidates, want 4 (each eligible deployment once)", len(got))
	}
}

func TestRouteWeights(t *testing.T) {
	table := NewTable([]Deployment{
		deployment("ai", "heavy", textCaps, func(d *Deployment) { d.Weight = 900 }),
		deployment("ai", "light", textCaps, func(d *Deployment) { d.Weight = 100 }),
	})
	rng := rand.New(rand.NewPCG(7, 7))
	const n = 20000
	first := map[string]int{}
	for range n {
		r, err := table.Route(query(textCaps, func(q *Query) { q.Rand = rng }))
		if err != nil {
			t.Fatal(err)
		}
		first[r.Candidates[0].Ref.Name]++
		if len(r.Candidates) != 2 {
			t.Fatalf("got %d candidates, want both as fallback", len(r.Candidates))
		}
	}
	share := float64(first["heavy"]) / n
	if share < 0.88 || share > 0.92 {
		t.Errorf("heavy first in %.3f of routes, want ≈ 0.90", share)
	}
}

func TestRoutePolicyCaps(t *testing.T) {
	capped := func(attempts int, deadline time.Duration) func(*Deployment) {
		return func(d *Deployment) { d.Limits.MaxAttempts, d.Limits.MaxDeadline = attempts, deadline }
	}
	table := NewTable([]Deployment{
		deployment("ai", "a", textCaps, func(d *Deployment) { d.Priority = 3 }, capped(2, time.Minute)),
		deployment("ai", "b", textCaps, func(d *Deployment) { d.Priority = 2 }),
		deployment("ai", "c", textCaps, func(d *Deployment) { d.Priority = 1 }),
	})
	r, err := table.Route(query(textCaps, func(q *Query) { q.MaxAttempts = 5; q.Deadline = time.Hour }))
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxAttempts != 2 || r.Deadline != time.Minute {
		t.Errorf("limits = %d attempts, %s; want 2, 1m0s (capped by the first candidate's policy)", r.MaxAttempts, r.Deadline)
	}
	if diff := cmp.Diff([]string{"ai/a", "ai/b"}, refs(r)); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}
}

// formatVerbs are the fmt verbs a credential could be printed with by mistake: a log
// line, a test failure, a debug dump.
var formatVerbs = []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %[1]v"}

// TestCredentialNeverPrints formats a credential, a deployment holding one, and a struct
// holding one in an unexported field (as an adapter does; fmt prints those by
// reflection, without their methods) with every verb and as JSON: none shows the value.
func TestCredentialNeverPrints(t *testing.T) {
	const canary = "sk-canary-123"
	d := deployment("ai", "m", textCaps, func(d *Deployment) { d.Credential = NewCredential(canary) })
	type holder struct {
		name string
		cred Credential
	}
	values := map[string]any{
		"credential":            d.Credential,
		"credential pointer":    &d.Credential,
		"deployment":            &d,
		"deployment value":      d,
		"unexported field":      holder{"h", d.Credential},
		"unexported field, ptr": &holder{"h", d.Credential},
		"slice of credentials":  []Credential{d.Credential},
		"map of credentials":    map[string]Credential{"k": d.Credential},
	}
	for name, v := range values {
		for _, verb := range formatVerbs {
			if s := fmt.Sprintf(verb, v); strings.Contains(s, canary) {
				t.Errorf("%s formatted with %s leaks the credential: %s", name, verb, s)
			}
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Errorf("json.Marshal(%s): %v", name, err)
		}
		if strings.Contains(string(b), canary) {
			t.Errorf("%s as JSON leaks the credential: %s", name, b)
		}
	}
	for _, s := range []string{d.Credential.String(), d.Credential.GoString(), fmt.Sprint(d.Credential)} {
		if s != "[redacted]" {
			t.Errorf("a set credential prints %q, want [redacted]", s)
		}
	}
	if b, _ := json.Marshal(d.Credential); string(b) != `"[redacted]"` {
		t.Errorf("a set credential is JSON %s, want \"[redacted]\"", b)
	}
	if got := fmt.Sprint(Credential{}); got != "[none]" {
		t.Errorf("an empty credential prints %q, want [none]", got)
	}
	if d.Credential.Reveal() != canary || !d.Credential.IsSet() {
		t.Error("Reveal lost the value")
	}
	if (Credential{}).Reveal() != "" || (Credential{}).IsSet() || NewCredential("").IsSet() {
		t.Error("an empty credential is set")
	}
}

func TestRegistryPublishesOnlyAfterStart(t *testing.T) {
	h := &Holder{}
	reg := NewRegistry(h)
	a := deployment("ai", "a", textCaps)
	reg.Set(a.Ref, &a)
	if h.Load().Len() != 0 || h.Synced() {
		t.Fatal("table published before Start")
	}
	if !reg.Visited([]Ref{a.Ref}) || reg.Visited([]Ref{a.Ref, {"ai", "b"}}) {
		t.Error("Visited does not track Set calls")
	}
	reg.Start()
	if h.Load().Len() != 1 || !h.Synced() || !reg.Live(a.Ref) {
		t.Fatal("Start did not publish")
	}
	old := h.Load()
	reg.Set(a.Ref, nil)
	if h.Load().Len() != 0 || reg.Live(a.Ref) {
		t.Error("removal not published")
	}
	if old.Len() != 1 {
		t.Error("a published table changed after a later Set")
	}
}

func TestParseRef(t *testing.T) {
	for in, want := range map[string]bool{"ai/gpt": true, "ai/": false, "/gpt": false, "gpt": false, "": false} {
		if _, ok := ParseRef(in); ok != want {
			t.Errorf("ParseRef(%q) ok = %v, want %v", in, ok, want)
		}
	}
}

// TestRegistryConcurrentUse runs writers (reconcilers on several workers) against readers
// (request handlers) under -race: readers see whole tables, never a half-built one.
func TestRegistryConcurrentUse(t *testing.T) {
	h := &Holder{}
	reg := NewRegistry(h)
	reg.Start()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				d := deployment("ai", fmt.Sprintf("w%d-%d", w, i%10), textCaps)
				if i%3 == 0 {
					reg.Set(d.Ref, nil)
				} else {
					reg.Set(d.Ref, &d)
				}
			}
		}()
	}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				tb := h.Load()
				if r, err := tb.Route(query(textCaps, func(q *Query) { q.Rand = nil })); err == nil {
					for _, d := range r.Candidates {
						if _, ok := tb.Get(d.Ref); !ok {
							t.Error("a route names a deployment its own table lacks")
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
}

// TestRouteAdmit: Query.Admit is asked only about deployments every other check allows;
// a refusal excludes the deployment and is reported when nothing else is eligible,
// unless capabilities were the reason.
func TestRouteAdmit(t *testing.T) {
	vision := textCaps | CapsOf(protocol.CapInputImage)
	table := NewTable([]Deployment{
		deployment("ai", "a", textCaps, func(d *Deployment) { d.Priority = 1 }),
		deployment("ai", "b", textCaps),
		deployment("ai", "vision", vision, func(d *Deployment) { d.Provider = "refused" }),
	})
	errRefused := errors.New("cannot encode")
	asked := map[string]int{}
	refuse := func(names ...string) func(*Query) {
		return func(q *Query) {
			q.Admit = func(d *Deployment) error {
				asked[d.Ref.Name]++
				if slices.Contains(names, d.Ref.Name) {
					return errRefused
				}
				return nil
			}
		}
	}

	r, err := table.Route(query(CapsOf(protocol.CapInputText), refuse("a"), func(q *Query) { q.Prefer = []Ref{{"ai", "a"}} }))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(refs(r), "ai/a") {
		t.Errorf("route %v: the refused deployment is a candidate", refs(r))
	}
	if asked["a"] != 1 {
		t.Errorf("asked about the preferred deployment %d times, want once", asked["a"])
	}

	_, err = table.Route(query(CapsOf(protocol.CapInputText), refuse("a", "b", "vision")))
	var ne *NoEligibleError
	if !errors.As(err, &ne) || !errors.Is(ne.Refused, errRefused) || ne.Unmet != 0 {
		t.Errorf("every deployment refused: %v, want NoEligibleError with the refusal", err)
	}

	clear(asked)
	_, err = table.Route(query(CapsOf(protocol.CapInputText, protocol.CapInputAudio), refuse("a", "b", "vision")))
	if !errors.As(err, &ne) || ne.Refused != nil || ne.Unmet == 0 {
		t.Errorf("unmet capability: %v, want the capability reported, not a refusal", err)
	}
	if len(asked) != 0 {
		t.Errorf("Admit asked about deployments that lack capabilities: %v", asked)
	}
}

// Deployments of namespaces the caller may not use are as if they did not exist: not
// routed to, not reachable by a preference, and the error is the one an empty table
// gives (spec/routing.md, "Eligibility").
func TestRouteVisibility(t *testing.T) {
	table := NewTable([]Deployment{
		deployment("team-a", "text", textCaps),
		deployment("team-b", "text", textCaps),
		deployment("team-b", "vision", textCaps|CapsOf(protocol.CapInputImage)),
		deployment("team-b", "summarizer", textCaps, func(d *Deployment) { d.Abilities = []string{"summarize"} }),
	})
	if diff := cmp.Diff([]string{"team-a", "team-b"}, table.Namespaces()); diff != "" {
		t.Errorf("Namespaces (-want +got):\n%s", diff)
	}
	onlyA := func(q *Query) {
		q.Visible = visibleIf(func(ns string) bool { return ns == "team-a" })
		q.MaxAttempts = 5
	}

	r, err := table.Route(query(CapsOf(protocol.CapInputText), onlyA, func(q *Query) {
		q.Prefer = []Ref{{"team-b", "text"}}
	}))
	if err != nil || !slices.Equal(refs(r), []string{"team-a/text"}) {
		t.Errorf("route %v, %v: want only team-a's model, the preference ignored", refs(r), err)
	}

	for name, q := range map[string]Query{
		"ability served only elsewhere":     query(CapsOf(protocol.CapInputText), onlyA, func(q *Query) { q.Ability = "summarize" }),
		"capability offered only elsewhere": query(CapsOf(protocol.CapInputImage), onlyA),
	} {
		_, err := table.Route(q)
		_, wantErr := NewTable([]Deployment{deployment("team-a", "text", textCaps)}).Route(q)
		if err == nil || wantErr == nil || err.Error() != wantErr.Error() || strings.Contains(err.Error(), "team-b") {
			t.Errorf("%s: %v, want the error of a table without team-b: %v", name, err, wantErr)
		}
	}
}

// visibleIf is the Visibility of the namespaces pred allows.
func visibleIf(pred func(ns string) bool) Visibility {
	return func(_, _ []string) (func(string) bool, error) { return pred, nil }
}

// Visibility is asked once per route, about the namespaces of the deployments that serve
// the ability and nothing else; its error ends the route.
func TestRouteAsksVisibilityAboutCandidatesOnly(t *testing.T) {
	table := NewTable([]Deployment{
		deployment("team-a", "text", textCaps),
		deployment("team-b", "text", textCaps),
		deployment("team-b", "text-2", textCaps),
		deployment("team-c", "summarizer", textCaps, func(d *Deployment) { d.Abilities = []string{"summarize"} }),
		deployment("team-d", "vision", textCaps|CapsOf(protocol.CapInputImage), func(d *Deployment) { d.Abilities = []string{"look"} }),
	})
	type call struct{ Candidates, All []string }
	var calls []call
	asking := func(visible func(string) bool, err error) func(q *Query) {
		return func(q *Query) {
			q.MaxAttempts = 5
			q.Visible = func(candidates, all []string) (func(string) bool, error) {
				calls = append(calls, call{slices.Clone(candidates), slices.Clone(all)})
				return visible, err
			}
		}
	}
	all := []string{"team-a", "team-b", "team-c", "team-d"}

	r, err := table.Route(query(CapsOf(protocol.CapInputText), asking(func(ns string) bool { return ns == "team-b" }, nil),
		func(q *Query) { q.Prefer = []Ref{{"team-a", "text"}, {"team-c", "summarizer"}} }))
	if got := slices.Sorted(slices.Values(refs(r))); err != nil || !slices.Equal(got, []string{"team-b/text", "team-b/text-2"}) {
		t.Errorf("route %v, %v: want team-b's two models only", refs(r), err)
	}
	if diff := cmp.Diff([]call{{[]string{"team-a", "team-b"}, all}}, calls); diff != "" {
		t.Errorf("Visible asked (-want +got):\n%s", diff)
	}

	calls = nil
	_, err = table.Route(query(CapsOf(protocol.CapInputText), asking(nil, nil), func(q *Query) { q.Ability = "unknown" }))
	var ne *NoEligibleError
	if !errors.As(err, &ne) || !ne.NoAbility {
		t.Errorf("an ability nothing serves: %v", err)
	}
	if diff := cmp.Diff([]call{{[]string{}, all}}, calls); diff != "" {
		t.Errorf("Visible asked, for an ability nothing serves (-want +got):\n%s", diff)
	}

	refused := errors.New("cannot decide")
	if _, err := table.Route(query(CapsOf(protocol.CapInputText), asking(nil, refused))); !errors.Is(err, refused) {
		t.Errorf("Visible's error: Route returned %v", err)
	}
}

func TestRouteOnly(t *testing.T) {
	table := NewTable([]Deployment{
		deployment("team-a", "text", textCaps, func(d *Deployment) { d.Priority = 10 }),
		deployment("team-b", "text", textCaps),
		deployment("team-b", "vision", textCaps|CapsOf(protocol.CapInputImage)),
	})
	var asked []string
	only := func(refs ...Ref) func(q *Query) {
		return func(q *Query) {
			q.MaxAttempts = 5
			q.Only = refs
			q.Visible = func(candidates, _ []string) (func(string) bool, error) {
				asked = slices.Clone(candidates)
				return func(string) bool { return true }, nil
			}
		}
	}
	r, err := table.Route(query(CapsOf(protocol.CapInputText), only(Ref{"team-b", "text"})))
	if err != nil || !slices.Equal(refs(r), []string{"team-b/text"}) {
		t.Errorf("route %v, %v: want team-b/text alone, never the higher-priority fallback", refs(r), err)
	}
	if !slices.Equal(asked, []string{"team-b"}) {
		t.Errorf("Visible asked about %v: want the pinned deployment's namespace only", asked)
	}

	// A pinned deployment that is not eligible is not replaced by one that is.
	_, err = table.Route(query(CapsOf(protocol.CapInputText, protocol.CapInputImage), only(Ref{"team-b", "text"})))
	var ne *NoEligibleError
	if !errors.As(err, &ne) {
		t.Errorf("pinned to a text model, an image request: %v, want NoEligibleError", err)
	}

	// An empty, non-nil Only pins nothing: nothing is eligible.
	if _, err := table.Route(query(CapsOf(protocol.CapInputText), only([]Ref{}...))); !errors.As(err, &ne) || !ne.NoAbility {
		t.Errorf("empty Only: %v, want NoEligibleError{NoAbility}", err)
	}
}
