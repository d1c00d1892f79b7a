package providerhttp

import (
	"math"
	"slices"
	"strconv"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// GenerationSupport is what one adapter's provider can honour of the provider-neutral
// generation options (spec/http-api.md, "Generation options"). An adapter declares it
// once; Read and Check decide its refusals, so every adapter declines alike: a request
// whose options the provider cannot honour is unsupported_capability, and routing moves
// on to a model that can honour it.
type GenerationSupport struct {
	// Adapter names the adapter in refusal messages ("openai"): a constant, never
	// caller data.
	Adapter string
	// Honours lists the generation keys the provider takes. A request that sets any
	// other option is declined; generation.response_schema_name is never declined (it
	// only names a schema).
	Honours []string
	// MaxTemperature is the provider's largest temperature; 0 means the registry's (2).
	MaxTemperature float64
	// Seed32 says that the provider takes seeds within 32 bits only.
	Seed32 bool
	// NoToolChoiceNone says that the provider has no tool choice "none".
	NoToolChoiceNone bool
	// Overrides maps each provider key of the adapter to the generation key it
	// overrides: when a request sets both, the provider key wins and the generation
	// option is neither sent nor checked against the provider.
	Overrides map[string]string
}

// generationPhrases name each option in refusals, with the verb that agrees with it.
var generationPhrases = map[string]string{
	protocol.GenerationMaxOutputTokens: "an output token limit is",
	protocol.GenerationTemperature:     "a sampling temperature is",
	protocol.GenerationTopP:            "nucleus sampling (top_p) is",
	protocol.GenerationTopK:            "top-k sampling is",
	protocol.GenerationStop:            "stop sequences are",
	protocol.GenerationSeed:            "a sampling seed is",
	protocol.GenerationToolChoice:      "a tool choice is",
	protocol.GenerationResponseFormat:  "JSON output mode is",
	protocol.GenerationResponseSchema:  "structured output is",
}

// Read returns req's generation options for deployment d, as the adapter sends them:
// protocol.Generation's values, without the options a provider key of the request
// overrides, checked by Check against d's capabilities, and with d's output cap applied
// (Limit). refusals are the adapter's own verdicts on the rest of the request, in the
// order it decides them: the first that is not nil is the refusal. Otherwise a refusal
// is protocol.Generation's (invalid_request) or Check's.
//
// When a provider key of the request overrides generation.max_output_tokens, the cap is
// not applied here: the adapter lowers that key's value with OutputCap where it puts it
// in the body, so that no key of the request raises the output above the cap.
func (s *GenerationSupport) Read(req *protocol.Request, d *routing.Deployment, refusals ...*protocol.Error) (protocol.GenerationOptions, *protocol.Error) {
	for _, err := range refusals {
		if err != nil {
			return protocol.GenerationOptions{}, err
		}
	}
	if d == nil {
		d = &routing.Deployment{}
	}
	g, err := protocol.Generation(req)
	if err != nil {
		return g, err
	}
	capped := true // false once a provider key carries the output limit instead
	for provider, key := range s.Overrides {
		if _, ok := req.Extensions[provider]; ok {
			g.Clear(key)
			capped = capped && key != protocol.GenerationMaxOutputTokens
		}
	}
	if err := s.Check(&g, d.Capabilities); err != nil {
		return protocol.GenerationOptions{}, err
	}
	if capped {
		s.Limit(&g, d.MaxOutputTokens)
	}
	return g, nil
}

// Limit applies a deployment's output cap, limit (ModelDeployment
// spec.limits.maxOutputTokens; 0 for none), to g, once Check admitted it: the output
// token limit becomes OutputCap of the request's and the cap, so a deployment with a cap
// sends it on every call and a caller may only lower it (spec/http-api.md, "Generation
// options"). A provider that takes no output limit (s does not honour
// generation.max_output_tokens) is left alone: the cap cannot be sent to it.
func (s *GenerationSupport) Limit(g *protocol.GenerationOptions, limit int64) {
	if slices.Contains(s.Honours, protocol.GenerationMaxOutputTokens) {
		g.MaxOutputTokens = OutputCap(g.MaxOutputTokens, limit)
	}
}

// OutputCap is the output token limit to send for a request that asks for requested
// (nil: none) on a deployment whose cap is limit (0: none): the smaller of the two when
// both are set, the cap alone when the request sets none, and requested when there is
// no cap. A request asking for more than the cap is clamped to it, never refused.
func OutputCap(requested *int64, limit int64) *int64 {
	if limit <= 0 || (requested != nil && *requested <= limit) {
		return requested
	}
	return &limit
}

// Check declines options the provider cannot honour, in protocol.GenerationKeys order:
// an option it does not take, a temperature or seed beyond its range, a tool choice it
// has no form of, and JSON or structured output on a deployment that does not declare
// output.json or structured_output (so a policy that narrows the outputs keeps them
// narrowed). Each refusal is unsupported_capability with a fixed message.
func (s *GenerationSupport) Check(g *protocol.GenerationOptions, caps routing.CapSet) *protocol.Error {
	for _, key := range protocol.GenerationKeys {
		phrase, declinable := generationPhrases[key]
		if !declinable || !g.Has(key) {
			continue
		}
		if !slices.Contains(s.Honours, key) {
			return unsupported(phrase + " not supported by the " + s.Adapter + " adapter")
		}
		if err := s.checkValue(g, key, caps); err != nil {
			return err
		}
	}
	return nil
}

// checkValue declines a value of a supported option that the provider or the deployment
// cannot honour.
func (s *GenerationSupport) checkValue(g *protocol.GenerationOptions, key string, caps routing.CapSet) *protocol.Error {
	switch key {
	case protocol.GenerationTemperature:
		if s.MaxTemperature > 0 && *g.Temperature > s.MaxTemperature {
			return unsupported("the " + s.Adapter + " adapter takes temperatures from 0 to " +
				strconv.FormatFloat(s.MaxTemperature, 'g', -1, 64) + " only")
		}
	case protocol.GenerationSeed:
		if s.Seed32 && (*g.Seed < math.MinInt32 || *g.Seed > math.MaxInt32) {
			return unsupported("the " + s.Adapter + " adapter takes 32-bit seeds only")
		}
	case protocol.GenerationToolChoice:
		if s.NoToolChoiceNone && g.ToolChoice.Mode == protocol.ToolChoiceNone {
			return unsupported("a tool choice of none is not supported by the " + s.Adapter + " adapter")
		}
	case protocol.GenerationResponseFormat:
		if !caps.Has(routing.CapsOf(protocol.CapOutputJSON)) {
			return unsupported("the deployment does not declare JSON output (output.json)")
		}
	case protocol.GenerationResponseSchema:
		if !caps.Has(routing.CapsOf(protocol.CapStructuredOutput)) {
			return unsupported("the deployment does not declare structured output (structured_output)")
		}
	}
	return nil
}

func unsupported(msg string) *protocol.Error {
	return protocol.NewError(protocol.CodeUnsupportedCapability, msg)
}
