package routing

import "github.com/switchboard-dev/switchboard/runtime/protocol"

// Required returns a request's required set (spec/routing.md, "Required set"): its
// explicit requirements united with what its input parts imply — text→input.text,
// image→input.image, …, any tool, tool_call or tool_result part→tools — including parts
// nested in a tool_result's content. An omitted or narrower requirements list can never
// remove an inferred need.
func Required(explicit []protocol.Capability, input []protocol.Part) CapSet {
	s := CapsOf(explicit...)
	return s | implied(input)
}

func implied(parts []protocol.Part) CapSet {
	var s CapSet
	for i := range parts {
		if c, ok := parts[i].Type.Implies(); ok {
			s |= capBit[c]
		}
		if parts[i].Content != nil {
			s |= implied(parts[i].Content.Parts)
		}
	}
	return s
}
