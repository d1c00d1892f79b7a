package routing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// tableOf10k builds 10,000 deployments spread over abilities (abilities = how many
// distinct abilities they serve) with mixed capabilities and priorities.
func tableOf10k(abilities int) []Deployment {
	const n = 10000
	out := make([]Deployment, n)
	vision := textCaps | CapsOf(protocol.CapInputImage)
	for i := range out {
		caps := textCaps
		if i%3 == 0 {
			caps = vision
		}
		if i%5 == 0 {
			caps |= CapsOf(protocol.CapTools)
		}
		out[i] = Deployment{
			Ref:          Ref{Namespace: fmt.Sprintf("ns-%d", i%50), Name: fmt.Sprintf("model-%d", i)},
			Provider:     "openai",
			Model:        "gpt",
			Abilities:    []string{fmt.Sprintf("ability-%d", i%abilities)},
			Capabilities: caps,
			Priority:     int32(i % 4),
			Weight:       int32(1 + i%200),
		}
	}
	return out
}

func BenchmarkNewTable10k(b *testing.B) {
	deps := tableOf10k(100)
	b.ReportAllocs()
	for b.Loop() {
		NewTable(deps)
	}
}

// BenchmarkRoute10k looks up one request in a 10,000-model table: "spread" has 100
// abilities (~100 models each), "one-ability" puts all 10,000 behind the same ability.
func BenchmarkRoute10k(b *testing.B) {
	for _, tc := range []struct {
		name      string
		abilities int
	}{{"spread", 100}, {"one-ability", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			table := NewTable(tableOf10k(tc.abilities))
			q := Query{Ability: "ability-0", Required: CapsOf(protocol.CapInputText, protocol.CapInputImage),
				Deadline: time.Minute, MaxAttempts: 3, Rand: rand.New(rand.NewPCG(1, 1))}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := table.Route(q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRegistryStart10k collects 10,000 deployments and publishes the first table:
// the routing share of a replica's start-up sync.
func BenchmarkRegistryStart10k(b *testing.B) {
	deps := tableOf10k(100)
	b.ReportAllocs()
	for b.Loop() {
		reg := NewRegistry(&Holder{})
		for i := range deps {
			reg.Set(deps[i].Ref, &deps[i])
		}
		reg.Start()
	}
}

// BenchmarkRegistrySet10k publishes one change to a started registry of 10,000
// deployments, one Set per iteration: "change" sets a changed copy of one deployment
// (its priority moves it within its ability's list), "remove-add" alternately removes a
// deployment and adds it back. "one-ability" lists all 10,000 under the same ability.
func BenchmarkRegistrySet10k(b *testing.B) {
	for _, tc := range []struct {
		name      string
		abilities int
	}{{"spread", 100}, {"one-ability", 1}} {
		deps := tableOf10k(tc.abilities)
		reg := NewRegistry(&Holder{})
		for i := range deps {
			reg.Set(deps[i].Ref, &deps[i])
		}
		reg.Start()
		b.Run(tc.name+"/change", func(b *testing.B) {
			d := deps[4321]
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				d.Priority = int32(i % 4)
				reg.Set(d.Ref, &d)
			}
		})
		b.Run(tc.name+"/remove-add", func(b *testing.B) {
			d := deps[1234]
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					reg.Set(d.Ref, nil)
				} else {
					reg.Set(d.Ref, &d)
				}
			}
		})
	}
}
