package replicate

import (
	"encoding/json"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// extVersion is the only extension key this adapter reads: the model version to run when
// the deployment's model id does not pin one (Replicate's "version" body field).
const extVersion = "replicate.version"

// promptSeparator joins the text parts into input.prompt: a blank line keeps parts
// apart without inventing a chat template the model may not know.
const promptSeparator = "\n\n"

// mediaKeys names the input field each media part type is sent under. Replicate models
// declare their own input schema; these are the names its common models use, and a json
// part can always supply another field name instead.
var mediaKeys = map[protocol.PartType]string{
	protocol.PartImage: "image",
	protocol.PartAudio: "audio",
	protocol.PartVideo: "video",
	protocol.PartFile:  "file",
}

// createBody is the body of both create endpoints; version is set only for
// POST /v1/predictions.
type createBody struct {
	Version string                     `json:"version,omitempty"`
	Input   map[string]json.RawMessage `json:"input"`
}

// createRequest returns the create URL and body for req. A pinned version (from the
// model id, else from the replicate.version extension) selects POST /v1/predictions;
// otherwise the model is run through its official-model endpoint.
func (a *adapter) createRequest(req *protocol.Request) (string, []byte, *protocol.Error) {
	input, perr := buildInput(req.Input, a.caps)
	if perr != nil {
		return "", nil, perr
	}
	body := createBody{Version: a.version, Input: input}
	if body.Version == "" {
		if raw, ok := req.Extensions[extVersion]; ok {
			// DecodeRequest already checked the type and pattern; this only unwraps it.
			if err := json.Unmarshal(raw, &body.Version); err != nil || body.Version == "" {
				return "", nil, protocol.NewError(protocol.CodeInvalidRequest, "extension replicate.version must be a version id")
			}
		}
	}
	target := a.base + "/v1/models/" + a.owner + "/" + a.name + "/predictions"
	if body.Version != "" {
		target = a.base + "/v1/predictions"
	}
	b, err := json.Marshal(body)
	if err != nil {
		// Every value is a string or a json part's already-valid raw JSON.
		return "", nil, protocol.NewError(protocol.CodeInvalidRequest, "the request cannot be encoded for replicate")
	}
	return target, b, nil
}

// buildInput maps the request's parts to a prediction's input object:
//
//   - text parts, in order and whatever their role, are joined with a blank line into
//     "prompt";
//   - an image, audio, video or file part goes under "image", "audio", "video" or "file":
//     its uri as given, or its data as a data URI ("data:<media_type>;base64,<data>");
//     at most one part of each type, and only types the deployment declares;
//   - a json part must hold a JSON object, whose keys become input fields. json parts
//     are applied last and in order, so their keys override "prompt" and the media keys,
//     and a later json part overrides an earlier one: the caller's explicit field wins
//     over the adapter's derived one;
//   - tool, tool_call and tool_result parts are refused: Replicate cannot declare tools.
//
// Routing has already matched the parts against the deployment's capabilities; the
// checks here keep a misrouted request from reaching the provider.
func buildInput(parts []protocol.Part, caps routing.CapSet) (map[string]json.RawMessage, *protocol.Error) {
	input := map[string]json.RawMessage{}
	var texts []string
	var objects []map[string]json.RawMessage
	for i := range parts {
		p := &parts[i]
		c, known := p.Type.Implies()
		switch {
		case !known:
			return nil, protocol.NewError(protocol.CodeInvalidRequest, "the request has a part type replicate does not know")
		case c == protocol.CapTools:
			return nil, protocol.NewError(protocol.CodeInvalidRequest, "replicate deployments cannot take tool, tool_call or tool_result parts")
		case !caps.Has(routing.CapsOf(c)):
			return nil, protocol.NewError(protocol.CodeUnsupportedCapability, "the deployment does not declare an input modality the request uses")
		}
		switch p.Type {
		case protocol.PartText:
			texts = append(texts, p.Text)
		case protocol.PartJSON:
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(p.JSON, &obj); err != nil || obj == nil {
				return nil, protocol.NewError(protocol.CodeInvalidRequest, "replicate json parts must hold a JSON object of input fields")
			}
			objects = append(objects, obj)
		default:
			key := mediaKeys[p.Type]
			if _, dup := input[key]; dup {
				return nil, protocol.NewError(protocol.CodeInvalidRequest, "replicate takes at most one part of each media type")
			}
			input[key] = jsonString(mediaValue(p))
		}
	}
	if len(texts) > 0 {
		input["prompt"] = jsonString(strings.Join(texts, promptSeparator))
	}
	for _, obj := range objects {
		for k, v := range obj {
			input[k] = v
		}
	}
	return input, nil
}

// mediaValue is what Replicate accepts for a file input: an HTTP URL, or a data URI for
// inline content. The runtime never fetches the uri; Replicate does.
func mediaValue(p *protocol.Part) string {
	if p.URI != "" {
		return p.URI
	}
	// RFC 2397 writes media type parameters without spaces ("audio/ogg;codecs=opus").
	return "data:" + strings.ReplaceAll(p.MediaType, " ", "") + ";base64," + p.Data
}

// jsonString encodes s as a JSON string. Encoding a string cannot fail.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
