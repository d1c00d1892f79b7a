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
