package openai

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Decoding a Chat Completions request (spec/compat.md, "Chat Completions"): the body is
// walked once, every field the door takes is translated into the native request, and
// every other one is refused with its OpenAI location.

// chatNames are the member names of OpenAI's Chat Completions request schema, those the
// door takes and those it refuses alike: a location may name them (compat.Walker.Loc).
var chatNames = setOf(
	// request
	"model", "messages", "tools", "tool_choice", "stream", "stream_options", "max_tokens",
	"max_completion_tokens", "temperature", "top_p", "stop", "seed", "response_format", "n",
	"user", "metadata", "parallel_tool_calls",
	"audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
	"modalities", "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_retention",
	"reasoning_effort", "safety_identifier", "service_tier", "store", "top_logprobs", "verbosity",
	"web_search_options",
	// messages and their parts
	"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "type", "text",
	"image_url", "url", "detail", "input_audio", "data", "format", "file", "file_data", "file_id",
	"filename", "id", "function", "arguments", "custom", "annotations",
	// tools, tool_choice, response_format, stream_options
	"description", "parameters", "strict", "allowed_tools", "json_schema", "schema",
	"include_usage", "include_obfuscation",
)

// setOf is the set of names, each mapped to itself: a walker takes a member's name from
// it without making a string of its own.
func setOf(names ...string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = n
	}
	return m
}

// Fixed rules of Chat Completions refusals.
const (
	ruleRequired      = "required"
	ruleUnsupported   = "not supported by this front door"
	ruleRole          = "must be one of system, developer, user, assistant, tool"
	ruleContent       = "must be a string or a non-empty array of content parts"
	ruleTextContent   = "must be a string or a non-empty array of text parts"
	rulePartType      = "must be one of text, image_url, input_audio, file"
	rulePartForRole   = "this content part type is not allowed in this role's messages"
	ruleNotForRole    = "not allowed in this role's messages"
	ruleNotForPart    = "not allowed for this content part type"
	ruleAssistant     = "an assistant message needs content, refusal or tool_calls"
	ruleDetail        = "must be one of auto, low, high, original"
	ruleObfuscation   = "only false is supported: chunks carry no obfuscation"
	ruleFunctionType  = "must be function"
	ruleToolChoice    = "must be none, auto, required or a function object"
	ruleRespFormat    = "must be one of text, json_object, json_schema"
	ruleNOne          = "only 1 is supported"
	ruleTemperature   = "must be a number from 0 to 2"
	ruleTopP          = "must be a number from 0 to 1"
	ruleTokensBoth    = "give max_tokens or max_completion_tokens, not both"
	ruleSeed          = "must be an integer"
	ruleStop          = "must be a string or an array of at most 4 strings, each of 1 to 256 characters"
	ruleStreamOptions = "only allowed when stream is true"
	ruleUser          = "must be a string of at most 256 characters"
	ruleUserMetadata  = "user is stored as the metadata entry user; metadata may not hold it too"
	ruleSchemaName    = "must match ^[A-Za-z0-9_-]{1,64}$"
	ruleTooManyParts  = "the messages, their content parts and tool calls, and the tools must be at most 256 parts in all"
)

// ruleTokens is the rule of the output caps, whose bound is generation.max_output_tokens'.
var ruleTokens = "must be an integer from 1 to " + strconv.Itoa(protocol.MaxGenerationTokens)

// maxStop is how many stop sequences OpenAI takes, which generation.stop shares, and
// maxStopLength how long each may be natively.
const (
	maxStop       = protocol.MaxGenerationStop
	maxStopLength = 256
)

// schemaNameRE is OpenAI's grammar of a json_schema's name, which
// generation.response_schema_name shares.
var schemaNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// chatRequest is a decoded Chat Completions request: the native request it becomes, less
// the ability and routing its model resolves to, and what the answer's form depends on.
type chatRequest struct {
	model        string
	stream       bool
	includeUsage bool
	native       protocol.Request
}

// chatWalk are Chat Completions' schema names and wording to the shared walker. A value
// read whole (a tool's parameters, a response schema) is passed on as sent.
var chatWalk = compat.WalkOptions{Names: chatNames, Duplicate: "repeats a member", Unsupported: ruleUnsupported}

// decodeChat decodes a Chat Completions body. Every error is a *compat.Refusal.
func decodeChat(body []byte) (*chatRequest, error) {
	d := chatDecoder{w: compat.NewWalker(body, &chatWalk)}
	if err := d.request(); err != nil {
		return nil, err
	}
	return &d.req, nil
}

// chatDecoder holds the state of one decoding.
type chatDecoder struct {
	w   *compat.Walker
	req chatRequest

	tools    []protocol.Part
	metadata map[string]string
	user     *string
	// maxTokens and maxCompletionTokens are the two spellings of the output cap.
	maxTokens, maxCompletionTokens json.Number
	streamOptions                  bool
	sawModel, sawMessages          bool
}

func (d *chatDecoder) request() error {
	w := d.w
	if k := w.Kind(); k != '{' && k != jsontext.KindInvalid {
		return refuse("body", "must be a JSON object")
	}
	if err := w.Members(d.field); err != nil {
		return err
	}
	if err := w.End(); err != nil {
		return err
	}
	return d.finish()
}

// field reads one top-level member.
func (d *chatDecoder) field(key string) error {
	w := d.w
	switch key {
	case "model":
		s, err := w.Str()
		if err != nil {
			return err
		}
		if s == "" {
			return w.Fail(ruleRequired)
		}
		d.req.model, d.sawModel = s, true
	case "messages":
		d.sawMessages = true
		return d.messages()
	case "tools":
		return d.toolList()
	case "tool_choice":
		return d.toolChoice()
	case "stream":
		v, err := w.OptBool()
		d.req.stream = v
		return err
	case "stream_options":
		ok, err := w.OptMembers(func(key string) error {
			switch key {
			case "include_usage":
				v, err := w.OptBool()
				d.req.includeUsage = v
				return err
			case "include_obfuscation":
				// Chunks never carry obfuscation padding: asking for none is what
				// the door does, asking for it is refused.
				v, err := w.OptBool()
				if err == nil && v {
					err = w.Fail(ruleObfuscation)
				}
				return err
			}
			return w.Unknown()
		})
		d.streamOptions = ok
		return err
	case "max_tokens", "max_completion_tokens":
		n, ok, err := w.OptNumber()
		if err != nil || !ok {
			return err
		}
		if v, err := strconv.ParseInt(n, 10, 64); err != nil || v < 1 || v > protocol.MaxGenerationTokens {
			return w.Fail(ruleTokens)
		}
		if key == "max_tokens" {
			d.maxTokens = json.Number(n)
		} else {
			d.maxCompletionTokens = json.Number(n)
		}
	case "temperature":
		return d.number(protocol.GenerationTemperature, 2, ruleTemperature)
	case "top_p":
		return d.number(protocol.GenerationTopP, 1, ruleTopP)
	case "seed":
		n, ok, err := w.OptNumber()
		if err != nil || !ok {
			return err
		}
		if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			return w.Fail(ruleSeed)
		}
		d.extension(protocol.GenerationSeed, json.RawMessage(n))
	case "stop":
		return d.stop()
	case "response_format":
		return d.responseFormat()
	case "n":
		n, ok, err := w.OptNumber()
		if err != nil || !ok {
			return err
		}
		if n != "1" {
			return w.Fail(ruleNOne)
		}
	case "user":
		s, ok, err := w.OptStr()
		if err != nil || !ok {
			return err
		}
		if utf8.RuneCountInString(s) > protocol.MaxMetadataValueLength {
			return w.Fail(ruleUser)
		}
		d.user = &s
	case "metadata":
		return d.metadataField()
	case "parallel_tool_calls":
		// Accepted and not forwarded (spec/compat.md): no native option says how many
		// calls a model may make at once, and every provider's default allows several.
		_, err := w.OptBool()
		return err
	default:
		return w.Unknown()
	}
	return nil
}

// optRawObject reads an object whole, as sent, or null (nil).
func optRawObject(w *compat.Walker) (json.RawMessage, error) {
	if null, err := w.Null(); null || err != nil {
		return nil, err
	}
	return w.RawObject(false)
}

// number reads an optional number in [0, hi] into extension key.
func (d *chatDecoder) number(key string, hi float64, rule string) error {
	n, ok, err := d.w.OptNumber()
	if err != nil || !ok {
		return err
	}
	if v, err := strconv.ParseFloat(n, 64); err != nil || v < 0 || v > hi || math.IsNaN(v) {
		return d.w.Fail(rule)
	}
	d.extension(key, json.RawMessage(n))
	return nil
}

func (d *chatDecoder) extension(key string, v json.RawMessage) {
	r := &d.req.native
	if r.Extensions == nil {
		r.Extensions = map[string]json.RawMessage{}
	}
	r.Extensions[key] = v
}

func (d *chatDecoder) require(c protocol.Capability) {
	d.req.native.Requirements = append(d.req.native.Requirements, c)
}

func (d *chatDecoder) stop() error {
	w := d.w
	var stops []string
	switch w.Kind() {
	case 'n':
		_, err := w.Null()
		return err
	case '"':
		s, err := w.Str()
		if err != nil {
			return err
		}
		stops = []string{s}
	case '[':
		if err := w.Array(func(int) error {
			s, err := w.Str()
			stops = append(stops, s)
			return err
		}); err != nil {
			return err
		}
		if len(stops) == 0 {
			return nil
		}
	case jsontext.KindInvalid:
		return w.Skip() // the syntax error
	default:
		return w.Fail(ruleStop)
	}
	if len(stops) > maxStop {
		return w.Fail(ruleStop)
	}
	for _, s := range stops {
		if s == "" || utf8.RuneCountInString(s) > maxStopLength {
			return w.Fail(ruleStop)
		}
	}
	b, _ := json.Marshal(stops) // strings always encode
	d.extension(protocol.GenerationStop, b)
	return nil
}

func (d *chatDecoder) metadataField() error {
	w := d.w
	m := map[string]string{}
	ok, err := w.OptMembers(func(key string) error {
		if len(m) == protocol.MaxMetadataEntries {
			return refuse("metadata", ruleMetaCount)
		}
		if k := w.Kind(); k != '"' && k != jsontext.KindInvalid {
			return refuse("metadata", ruleMetaValue)
		}
		v, err := w.Str()
		if err != nil {
			return err
		}
		m[key] = v
		return nil
	})
	if err != nil || !ok {
		return err
	}
	if rule := metadataRule(m); rule != "" {
		return refuse("metadata", rule)
	}
	d.metadata = m
	return nil
}

// toolChoice reads tool_choice: none, auto, required or {"type":"function",
// "function":{"name"}}.
func (d *chatDecoder) toolChoice() error {
	w := d.w
	switch w.Kind() {
	case 'n':
		_, err := w.Null()
		return err
	case '"':
		s, err := w.Str()
		if err != nil {
			return err
		}
		if s != "none" && s != "auto" && s != "required" {
			return w.Fail(ruleToolChoice)
		}
		d.extension(protocol.GenerationToolChoice, jsonString(toolChoiceValue(s, "")))
		return nil
	}
	var typ, name string
	if err := w.Members(func(key string) error {
		switch key {
		case "type":
			s, err := w.Str()
			typ = s
			return err
		case "function":
			_, err := w.OptMembers(func(key string) error {
				if key != "name" {
					return w.Unknown()
				}
				s, err := w.Str()
				name = s
				return err
			})
			return err
		}
		return w.Unknown()
	}); err != nil {
		return err
	}
	if typ != "function" {
		return w.FailAt("type", ruleFunctionType)
	}
	if !toolNameRE.MatchString(name) {
		w.Enter("function")
		defer w.Leave()
		return w.FailAt("name", ruleToolName)
	}
	d.extension(protocol.GenerationToolChoice, jsonString(toolChoiceValue("", name)))
	return nil
}

// responseFormat reads response_format: text (the default), json_object or json_schema.
func (d *chatDecoder) responseFormat() error {
	w := d.w
	var typ, name string
	var schema json.RawMessage
	sawSchema := false
	ok, err := w.OptMembers(func(key string) error {
		switch key {
		case "type":
			s, err := w.Str()
			typ = s
			return err
		case "json_schema":
			sawSchema = true
			_, err := w.OptMembers(func(key string) error {
				switch key {
				case "name":
					s, err := w.Str()
					name = s
					return err
				case "schema":
					raw, err := optRawObject(w)
					schema = raw
					return err
				case "description":
					// Accepted and dropped (spec/compat.md): no native option carries
					// it; the schema's own descriptions still reach the model.
					_, _, err := w.OptStr()
					return err
				case "strict":
					// Accepted: a schema is always enforced as strictly as the
					// provider can (structured_output).
					_, err := w.OptBool()
					return err
				}
				return w.Unknown()
			})
			return err
		}
		return w.Unknown()
	})
	if err != nil || !ok {
		return err
	}
	switch typ {
	case "text":
		if sawSchema {
			return w.FailAt("json_schema", ruleNotForPart)
		}
	case "json_object":
		if sawSchema {
			return w.FailAt("json_schema", ruleNotForPart)
		}
		d.extension(protocol.GenerationResponseFormat, jsonString("json"))
		d.require(protocol.CapOutputJSON)
	case "json_schema":
		w.Enter("json_schema")
		defer w.Leave()
		if !sawSchema {
			return w.Fail(ruleRequired)
		}
		if !schemaNameRE.MatchString(name) {
			return w.FailAt("name", ruleSchemaName)
		}
		if schema == nil {
			return w.FailAt("schema", ruleRequired)
		}
		d.extension(protocol.GenerationResponseSchema, upstreamSchema(schema))
		d.extension(protocol.GenerationResponseSchemaName, jsonString(name))
		d.require(protocol.CapStructuredOutput)
	default:
		return w.FailAt("type", ruleRespFormat)
	}
	return nil
}

// toolList reads tools: function tools only.
func (d *chatDecoder) toolList() error {
	w := d.w
	if null, err := w.Null(); null || err != nil {
		return err
	}
	return w.Array(func(int) error {
		var typ, name, description string
		var params json.RawMessage
		if err := w.Members(func(key string) error {
			switch key {
			case "type":
				s, err := w.Str()
				typ = s
				return err
			case "function":
				return w.Members(func(key string) error {
					switch key {
					case "name":
						s, err := w.Str()
						name = s
						return err
					case "description":
						s, _, err := w.OptStr()
						description = s
						return err
					case "parameters":
						raw, err := optRawObject(w)
						params = raw
						return err
					case "strict":
						// Accepted: the schema is forwarded as given; how strictly a
						// provider holds arguments to it is the provider's.
						_, err := w.OptBool()
						return err
					}
					return w.Unknown()
				})
			}
			return w.Unknown()
		}); err != nil {
			return err
		}
		if typ != "function" {
			return w.FailAt("type", ruleFunctionType)
		}
		p, field, rule := toolPart(name, description, params)
		if rule != "" {
			w.Enter("function")
			defer w.Leave()
			return w.FailAt(field, rule)
		}
		d.tools = append(d.tools, p)
		return nil
	})
}

// finish checks what needs the whole body and completes the native request.
func (d *chatDecoder) finish() error {
	r := &d.req.native
	switch {
	case !d.sawModel:
		return refuse("model", ruleRequired)
	case !d.sawMessages:
		return refuse("messages", ruleRequired)
	case d.streamOptions && !d.req.stream:
		return refuse("stream_options", ruleStreamOptions)
	case d.maxTokens != "" && d.maxCompletionTokens != "":
		return refuse("max_tokens", ruleTokensBoth)
	}
	if n := d.maxTokens + d.maxCompletionTokens; n != "" {
		d.extension(protocol.GenerationMaxOutputTokens, json.RawMessage(n))
	}
	r.Input = append(r.Input, d.tools...)
	if len(r.Input) > protocol.MaxInputParts {
		return refuse("messages", ruleTooManyParts)
	}
	if d.user != nil {
		if _, taken := d.metadata["user"]; taken {
			return refuse("user", ruleUserMetadata)
		}
		if d.metadata == nil {
			d.metadata = map[string]string{}
		}
		d.metadata["user"] = *d.user
		if len(d.metadata) > protocol.MaxMetadataEntries {
			return refuse("metadata", ruleMetaCount)
		}
	}
	if len(d.metadata) > 0 {
		r.Metadata = d.metadata
	}
	return nil
}

// jsonString is s as a JSON string.
func jsonString(s string) json.RawMessage {
	return protocol.AppendJSONString(nil, s)
}
