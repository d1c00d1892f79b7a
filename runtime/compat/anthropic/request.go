package anthropic

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The Messages request (spec/compat.md, "Anthropic Messages"), translated into the
// protocol request it stands for. Every field is mapped or refused: an unknown field
// is a 400 naming its location, a field of Anthropic's schema the runtime has no
// mapping for is a 400 naming it, so nothing a caller asked for is silently dropped —
// except what spec/compat.md lists as accepted and ignored.

// The one Anthropic extension the door writes; the generation options are the
// protocol's provider-neutral keys (spec/http-api.md, "Generation options").
const extCacheControl = "anthropic.cache_control"

// metadataUserID is the execution metadata key metadata.user_id becomes.
const metadataUserID = "user_id"

// maxBreakpoints is how many blocks may carry cache_control, as Anthropic allows.
const maxBreakpoints = 4

// Known Messages fields without a mapping, by location: refused by name.
var (
	unsupportedTop = []string{
		"thinking", "service_tier", "container", "mcp_servers", "context_management",
		"output_config", "output_format", "inference_geo", "speed", "diagnostics",
	}
	unsupportedTool = []string{"strict", "eager_input_streaming", "defer_loading", "allowed_callers", "input_examples"}
)

// request is a decoded Messages request.
type request struct {
	// model is the model name the caller sent, resolved by the handler.
	model string
	// stream asks for the event stream.
	stream bool
	// native is the protocol request, but for the ability and routing, which the
	// model name decides.
	native protocol.Request
}

// decoder builds a request while the walker reads the body.
type decoder struct {
	*compat.Walker
	system, tools, turns []protocol.Part
	// breakpoints lists, per group, the parts whose block carried cache_control, with
	// the TTL ("" for the default); group is which of system, tools, turns.
	breakpoints []breakpoint
	// toolNames are the declared tools, for tool_choice.
	toolNames []string
	// choice is tool_choice's name when its type is tool, checked at the end.
	choice struct {
		mode, name string
	}
	seen uint32 // top-level members read, by bit
}

// breakpoint is a block carrying cache_control: the part it became.
type breakpoint struct {
	group, index int
	ttl          string
}

const (
	groupSystem = iota
	groupTools
	groupTurns
)

// Top-level members, by bit in decoder.seen.
const (
	fieldModel = 1 << iota
	fieldMaxTokens
	fieldMessages
)

// walkOptions are the Messages schema's to the shared walker: the decoder enters only
// names of the schema, and a repeated name is refused at any depth, as the body must
// not mean one thing here and another to a proxy.
var walkOptions = compat.WalkOptions{Duplicate: ruleDuplicate, DeepDuplicates: true, Unsupported: ruleUnsupported}

// Rules of the Messages decoder.
const (
	ruleObject       = compat.RuleObject
	ruleArray        = compat.RuleArray
	ruleString       = compat.RuleString
	ruleNumber       = compat.RuleNumber
	ruleDuplicate    = "duplicate object key"
	ruleUnknown      = compat.RuleUnknown
	ruleRequired     = "required"
	ruleUnsupported  = "not supported by this runtime"
	ruleNonEmpty     = "must not be empty"
	ruleStringOrList = "must be a string or an array of content blocks"
)

// unknown refuses a member that has no mapping. A name of the Messages schema that the
// runtime does not support (supported, from a closed list) is named; any other key is
// not, as it is the caller's text.
func (d *decoder) unknown(key string, known []string) error {
	if slices.Contains(known, key) {
		d.Enter(key)
		return d.Fail(ruleUnsupported)
	}
	return d.Fail(ruleUnknown)
}

// decodeRequest decodes a Messages request body. Every error is an invalid_request
// *protocol.Error with a fixed message naming the location.
func decodeRequest(body []byte) (*request, *protocol.Error) {
	d := &decoder{Walker: compat.NewWalker(body, &walkOptions)}
	r := &request{}
	err := d.Object(func(key string) error { return d.top(r, key) })
	if err == nil {
		err = d.End()
	}
	if err == nil {
		err = d.finish(r)
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return r, nil
}

// top reads one top-level member.
func (d *decoder) top(r *request, key string) error {
	switch key {
	case "model":
		d.seen |= fieldModel
		return d.Member(key, func() error {
			s, err := d.Str()
			if err == nil && s == "" {
				return d.Fail(ruleNonEmpty)
			}
			r.model = s
			return err
		})
	case "max_tokens":
		d.seen |= fieldMaxTokens
		return d.Member(key, func() error {
			n, err := d.integer(1, protocol.MaxGenerationTokens, "must be an integer from 1 to "+strconv.Itoa(protocol.MaxGenerationTokens))
			if err != nil {
				return err
			}
			d.extension(&r.native, protocol.GenerationMaxOutputTokens, json.RawMessage(strconv.FormatInt(n, 10)))
			return nil
		})
	case "messages":
		d.seen |= fieldMessages
		return d.Member(key, d.messages)
	case "system":
		return d.Member(key, d.systemPrompt)
	case "tools":
		return d.Member(key, d.toolList)
	case "tool_choice":
		return d.Member(key, func() error { return d.toolChoice(&r.native) })
	case "stream":
		return d.Member(key, func() error {
			if null, err := d.Null(); null || err != nil {
				return err
			}
			b, err := d.Bool()
			r.stream = b
			return err
		})
	case "temperature":
		return d.Member(key, func() error { return d.unit(&r.native, protocol.GenerationTemperature) })
	case "top_p":
		return d.Member(key, func() error { return d.unit(&r.native, protocol.GenerationTopP) })
	case "top_k":
		return d.Member(key, func() error {
			if null, err := d.Null(); null || err != nil {
				return err
			}
			n, err := d.integer(1, protocol.MaxGenerationTopK, "must be an integer from 1 to "+strconv.Itoa(protocol.MaxGenerationTopK))
			if err != nil {
				return err
			}
			d.extension(&r.native, protocol.GenerationTopK, json.RawMessage(strconv.FormatInt(n, 10)))
			return nil
		})
	case "stop_sequences":
		return d.Member(key, func() error { return d.stopSequences(&r.native) })
	case "metadata":
		return d.Member(key, func() error { return d.metadata(&r.native) })
	case "cache_control":
		// Top-level cache control marks the last cacheable block, which is known only
		// once every message is read: it is the request's last block.
		return d.Member(key, func() error {
			ttl, present, err := d.cacheControl()
			if present {
				d.breakpoints = append(d.breakpoints, breakpoint{group: -1, ttl: ttl})
			}
			return err
		})
	}
	return d.unknown(key, unsupportedTop)
}

// finish applies the rules that span members, assembles the input and checks the
// protocol's limits under Messages names, so the native decoder meets no violation
// it would name in its own terms.
func (d *decoder) finish(r *request) error {
	d.Top()
	for _, f := range []struct {
		bit  uint32
		name string
	}{{fieldModel, "model"}, {fieldMaxTokens, "max_tokens"}, {fieldMessages, "messages"}} {
		if d.seen&f.bit == 0 {
			d.Enter(f.name)
			return d.Fail(ruleRequired)
		}
	}
	if len(d.turns) == 0 {
		d.Enter("messages")
		return d.Fail("must hold at least one message with content")
	}
	switch d.choice.mode {
	case "any", "tool":
		if len(d.toolNames) == 0 {
			d.Enter("tool_choice")
			return d.Fail("requires tools")
		}
		if d.choice.mode == "tool" && !contains(d.toolNames, d.choice.name) {
			d.Enter("tool_choice")
			d.Enter("name")
			return d.Fail("must name one of tools")
		}
	}
	input := make([]protocol.Part, 0, len(d.system)+len(d.tools)+len(d.turns))
	input = append(append(append(input, d.system...), d.tools...), d.turns...)
	if len(input) > protocol.MaxInputParts {
		d.Enter("messages")
		return d.Fail("the system blocks, tools and content blocks together must be at most " + strconv.Itoa(protocol.MaxInputParts))
	}
	r.native.Input = input
	if marks := d.cacheMarks(len(input)); len(marks) > 0 {
		if len(marks) > maxBreakpoints {
			d.Enter("cache_control")
			return d.Fail("at most " + strconv.Itoa(maxBreakpoints) + " blocks may carry cache_control")
		}
		raw, _ := json.Marshal(marks) // strings always encode
		d.extension(&r.native, extCacheControl, raw)
	}
	return nil
}

// cacheMarks is the anthropic.cache_control value of the breakpoints: for each, the
// index of the input part its block became, with ":1h" for a one-hour TTL, in input
// order. Top-level cache control names the last part; a block marked
// twice (by the top level and by itself) is one breakpoint, with the longer TTL.
func (d *decoder) cacheMarks(parts int) []string {
	offsets := [...]int{groupSystem: 0, groupTools: len(d.system), groupTurns: len(d.system) + len(d.tools)}
	var indices []int
	ttls := map[int]string{}
	for _, bp := range d.breakpoints {
		i := parts - 1
		if bp.group >= 0 {
			i = offsets[bp.group] + bp.index
		}
		if _, dup := ttls[i]; !dup {
			indices = append(indices, i)
		}
		ttls[i] = longer(ttls[i], bp.ttl)
	}
	slices.Sort(indices)
	marks := make([]string, len(indices))
	for n, i := range indices {
		marks[n] = strconv.Itoa(i)
		if ttls[i] == "1h" {
			marks[n] += ":1h"
		}
	}
	return marks
}

// extension sets a native extension.
func (d *decoder) extension(n *protocol.Request, key string, v json.RawMessage) {
	if n.Extensions == nil {
		n.Extensions = map[string]json.RawMessage{}
	}
	n.Extensions[key] = v
}

// integer reads an integral number within [lo, hi]; 2.0 and 2e0 count, as they do for
// the native decoder.
func (d *decoder) integer(lo, hi int64, rule string) (int64, error) {
	lit, err := d.Number()
	if err != nil {
		if d.Kind() != '0' {
			return 0, d.Fail(rule)
		}
		return 0, err
	}
	if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
		if n < lo || n > hi {
			return 0, d.Fail(rule)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, d.Fail(rule)
	}
	return int64(f), nil
}

// unit reads temperature or top_p: a number from 0 to 1, Anthropic's range for both.
func (d *decoder) unit(n *protocol.Request, key string) error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	const rule = "must be a number from 0 to 1"
	if d.Kind() != '0' {
		return d.Fail(rule)
	}
	lit, err := d.Number()
	if err != nil {
		return err
	}
	f, perr := strconv.ParseFloat(lit, 64)
	if perr != nil || f < 0 || f > 1 {
		return d.Fail(rule)
	}
	d.extension(n, key, json.RawMessage(lit))
	return nil
}

// stopSequences reads stop_sequences: strings with more than whitespace, within the
// bounds the generation.stop key documents (the fewest any bundled provider takes).
func (d *decoder) stopSequences(n *protocol.Request) error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	var stops []string
	err := d.Array(func(int) error {
		s, err := d.Str()
		if err != nil {
			return err
		}
		if strings.TrimSpace(s) == "" {
			return d.Fail("must contain non-whitespace characters")
		}
		stops = append(stops, s)
		return nil
	})
	if err != nil {
		return err
	}
	if len(stops) == 0 {
		return nil // an empty list asks for nothing
	}
	raw, _ := json.Marshal(stops) // strings always encode
	if spec, _ := protocol.LookupExtension(protocol.GenerationStop); !spec.Valid(raw) {
		return d.Fail("must hold at most " + strconv.Itoa(spec.MaxItems) + " sequences of at most " + strconv.Itoa(spec.MaxLength) + " characters")
	}
	d.extension(n, protocol.GenerationStop, raw)
	return nil
}

// metadata reads metadata: only user_id, which becomes execution metadata.
func (d *decoder) metadata(n *protocol.Request) error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	return d.Object(func(key string) error {
		if key != "user_id" {
			return d.unknown(key, nil)
		}
		return d.Member(key, func() error {
			if null, err := d.Null(); null || err != nil {
				return err
			}
			s, err := d.Str()
			if err != nil {
				return err
			}
			if utf8.RuneCountInString(s) > protocol.MaxMetadataValueLength {
				return d.Fail("must be at most " + strconv.Itoa(protocol.MaxMetadataValueLength) + " characters")
			}
			if s != "" {
				n.Metadata = map[string]string{metadataUserID: s}
			}
			return nil
		})
	})
}

// toolChoice reads tool_choice into generation.tool_choice.
func (d *decoder) toolChoice(n *protocol.Request) error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	var typ, name string
	var typed, named bool
	err := d.Object(func(key string) error {
		switch key {
		case "type":
			typed = true
			return d.Member(key, func() error {
				s, err := d.Str()
				if err != nil {
					return err
				}
				if !contains([]string{"auto", "any", "tool", "none"}, s) {
					return d.Fail("must be one of auto, any, tool, none")
				}
				typ = s
				return nil
			})
		case "name":
			named = true
			return d.Member(key, func() error {
				s, err := d.Str()
				name = s
				return err
			})
		case "disable_parallel_tool_use":
			// Accepted and not forwarded: no native option limits how many calls a
			// model makes at once (the OpenAI door treats parallel_tool_calls alike).
			return d.Member(key, func() error {
				if null, err := d.Null(); null || err != nil {
					return err
				}
				_, err := d.Bool()
				return err
			})
		}
		return d.unknown(key, nil)
	})
	if err != nil {
		return err
	}
	switch {
	case !typed:
		d.Enter("type")
		return d.Fail(ruleRequired)
	case typ == "tool" && !named:
		d.Enter("name")
		return d.Fail(ruleRequired)
	case typ != "tool" && named:
		d.Enter("name")
		return d.Fail("allowed only when type is tool")
	}
	d.choice.mode, d.choice.name = typ, name
	value := map[string]string{"auto": "auto", "any": "required", "none": "none", "tool": "tool:" + name}[typ]
	d.extension(n, protocol.GenerationToolChoice, protocol.AppendJSONString(nil, value))
	return nil
}
