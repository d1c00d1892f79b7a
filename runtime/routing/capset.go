package routing

import (
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// CapSet is a set of capability ids, one bit per id of protocol.Capabilities. Eligibility
// is a subset test on it, so a lookup costs one AND per candidate.
type CapSet uint32

// capBit maps each capability id to its bit; built once from the protocol's closed set.
var capBit = func() map[protocol.Capability]CapSet {
	m := make(map[protocol.Capability]CapSet, len(protocol.Capabilities))
	for i, c := range protocol.Capabilities {
		m[c] = 1 << i
	}
	return m
}()

// CapsOf returns the set holding the given known ids; unknown ids are ignored (the
// request decoder rejects them before routing).
func CapsOf(caps ...protocol.Capability) CapSet {
	var s CapSet
	for _, c := range caps {
		s |= capBit[c]
	}
	return s
}

// Has reports whether every capability of o is in s.
func (s CapSet) Has(o CapSet) bool { return s&o == o }

// Without returns the capabilities of s that are not in o.
func (s CapSet) Without(o CapSet) CapSet { return s &^ o }

// List returns the capability ids of s in the protocol's fixed order.
func (s CapSet) List() []protocol.Capability {
	var out []protocol.Capability
	for i, c := range protocol.Capabilities {
		if s&(1<<i) != 0 {
			out = append(out, c)
		}
	}
	return out
}

// String joins the ids with commas, for messages and tests.
func (s CapSet) String() string {
	ids := s.List()
	parts := make([]string, len(ids))
	for i, c := range ids {
		parts[i] = string(c)
	}
	return strings.Join(parts, ",")
}
