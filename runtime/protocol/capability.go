package protocol

// Capability is a capability id (spec/http-api.md, "Request": requirements): what a
// request needs and what a configured model declares.
type Capability string

const (
	CapInputText        Capability = "input.text"
	CapInputJSON        Capability = "input.json"
	CapInputImage       Capability = "input.image"
	CapInputAudio       Capability = "input.audio"
	CapInputVideo       Capability = "input.video"
	CapInputFile        Capability = "input.file"
	CapOutputText       Capability = "output.text"
	CapOutputJSON       Capability = "output.json"
	CapOutputImage      Capability = "output.image"
	CapOutputAudio      Capability = "output.audio"
	CapOutputVideo      Capability = "output.video"
	CapTools            Capability = "tools"
	CapStreaming        Capability = "streaming"
	CapStructuredOutput Capability = "structured_output"
)

// Capabilities lists every capability id, in a fixed order.
var Capabilities = []Capability{
	CapInputText, CapInputJSON, CapInputImage, CapInputAudio, CapInputVideo, CapInputFile,
	CapOutputText, CapOutputJSON, CapOutputImage, CapOutputAudio, CapOutputVideo,
	CapTools, CapStreaming, CapStructuredOutput,
}

// Known reports whether c is one of the closed set of capability ids.
func (c Capability) Known() bool {
	for _, k := range Capabilities {
		if k == c {
			return true
		}
	}
	return false
}

// PartType is the type of one input part (spec/http-api.md, "Request").
type PartType string

const (
	PartText       PartType = "text"
	PartJSON       PartType = "json"
	PartImage      PartType = "image"
	PartAudio      PartType = "audio"
	PartVideo      PartType = "video"
	PartFile       PartType = "file"
	PartTool       PartType = "tool"
	PartToolCall   PartType = "tool_call"
	PartToolResult PartType = "tool_result"
)

// Implies returns the capability an input part of this type requires: its input modality,
// or tools for tool, tool_call and tool_result parts (spec/routing.md, "Required set").
// ok is false for an unknown part type.
func (t PartType) Implies() (c Capability, ok bool) {
	switch t {
	case PartText:
		return CapInputText, true
	case PartJSON:
		return CapInputJSON, true
	case PartImage:
		return CapInputImage, true
	case PartAudio:
		return CapInputAudio, true
	case PartVideo:
		return CapInputVideo, true
	case PartFile:
		return CapInputFile, true
	case PartTool, PartToolCall, PartToolResult:
		return CapTools, true
	}
	return "", false
}
