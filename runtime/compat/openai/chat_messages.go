package openai

import (
	"github.com/go-json-experiment/json/jsontext"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Decoding Chat Completions messages into input parts. A message's members may come in
// any order (its role last), so each is read whole first, its content parts already
// translated, and checked against its role at its end.

// Members of a content part, as bits, to check them against the part's type.
const (
	memText uint8 = 1 << iota
	memImageURL
	memInputAudio
	memFile
	memRefusal
)

// partMembers names the member of each bit, in bit order.
var partMembers = [...]string{"text", "image_url", "input_audio", "file", "refusal"}

// partTypes are the content part types, with the member each needs.
var partTypes = map[string]uint8{
	"text": memText, "image_url": memImageURL, "input_audio": memInputAudio, "file": memFile,
	"refusal": memRefusal,
}

// contentPart is one translated content part and its OpenAI type.
type contentPart struct {
	typ  string
	part protocol.Part
}

// content is a message's content: absent or null (neither set), a string, or parts.
type content struct {
	text  *string
	parts []contentPart
}

func (c *content) present() bool { return c.text != nil || c.parts != nil }

// message is one message as read.
type message struct {
	role       string
	content    content
	refusal    *string
	toolCalls  []protocol.Part
	toolCallID *string
	// sawToolCalls is a tool_calls member, even null or empty.
	sawToolCalls bool
}

// messages reads messages: a non-empty array.
func (d *chatDecoder) messages() error {
	w := d.w
	if k := w.Kind(); k != '[' && k != jsontext.KindInvalid {
		return w.Fail("must be a non-empty array of messages")
	}
	n := 0
	if err := w.Array(func(int) error {
		n++
		return d.message()
	}); err != nil {
		return err
	}
	if n == 0 {
		return w.Fail("must be a non-empty array of messages")
	}
	return nil
}

// message reads one message and appends its parts to the input.
func (d *chatDecoder) message() error {
	w := d.w
	var m message
	if err := w.Members(func(key string) error {
		switch key {
		case "role":
			s, err := w.Str()
			m.role = s
			return err
		case "content":
			return d.content(&m.content)
		case "refusal":
			s, ok, err := w.OptStr()
			if ok {
				m.refusal = &s
			}
			return err
		case "tool_calls":
			m.sawToolCalls = true
			return d.toolCalls(&m)
		case "tool_call_id":
			s, err := w.Str()
			if err == nil && !validCallID(s) {
				err = w.Fail(ruleCallID)
			}
			m.toolCallID = &s
			return err
		}
		return w.Unknown()
	}); err != nil {
		return err
	}
	return d.addMessage(&m)
}

// addMessage checks m against its role and appends its parts.
func (d *chatDecoder) addMessage(m *message) error {
	w := d.w
	var role protocol.Role
	allowed := memText
	switch m.role {
	case "system", "developer":
		role = protocol.RoleSystem
	case "user":
		role = protocol.RoleUser
		allowed = memText | memImageURL | memInputAudio | memFile
	case "assistant":
		role = protocol.RoleAssistant
		allowed = memText | memRefusal
	case "tool":
		role = protocol.RoleTool
	case "":
		return w.FailAt("role", ruleRequired)
	default:
		return w.FailAt("role", ruleRole)
	}
	if role != protocol.RoleAssistant {
		switch {
		case m.sawToolCalls:
			return w.FailAt("tool_calls", ruleNotForRole)
		case m.refusal != nil:
			return w.FailAt("refusal", ruleNotForRole)
		case !m.content.present():
			return w.FailAt("content", ruleRequired)
		}
	}
	if role != protocol.RoleTool && m.toolCallID != nil {
		return w.FailAt("tool_call_id", ruleNotForRole)
	}
	for i, cp := range m.content.parts {
		if allowed&partTypes[cp.typ] == 0 {
			w.Enter("content")
			w.EnterIndex(i)
			err := w.FailAt("type", rulePartForRole)
			w.Leave()
			w.Leave()
			return err
		}
	}

	in := &d.req.native.Input
	switch role {
	case protocol.RoleTool:
		if m.toolCallID == nil {
			return w.FailAt("tool_call_id", ruleRequired)
		}
		result := protocol.Part{Type: protocol.PartToolResult, CallID: *m.toolCallID, Content: &protocol.ToolContent{Text: m.content.text}}
		if m.content.text == nil {
			parts := make([]protocol.Part, len(m.content.parts))
			for i, cp := range m.content.parts {
				parts[i] = cp.part
			}
			result.Content = &protocol.ToolContent{Parts: parts}
		}
		*in = append(*in, result)
		return nil
	case protocol.RoleAssistant:
		if !m.content.present() && m.refusal == nil && len(m.toolCalls) == 0 {
			return w.Fail(ruleAssistant)
		}
	}
	// User parts keep the default role, which is user.
	partRole := role
	if role == protocol.RoleUser {
		partRole = ""
	}
	// An assistant turn of tool calls often says content "" (OpenAI's own answers do):
	// that is no text, and some providers refuse empty text blocks.
	noText := role == protocol.RoleAssistant && m.content.text != nil && *m.content.text == "" &&
		(len(m.toolCalls) > 0 || m.refusal != nil)
	if m.content.text != nil && !noText {
		*in = append(*in, protocol.Part{Type: protocol.PartText, Role: partRole, Text: *m.content.text})
	}
	for _, cp := range m.content.parts {
		p := cp.part
		p.Role = partRole
		*in = append(*in, p)
	}
	if m.refusal != nil {
		// What the assistant said to refuse is what it said.
		*in = append(*in, protocol.Part{Type: protocol.PartText, Role: partRole, Text: *m.refusal})
	}
	*in = append(*in, m.toolCalls...)
	if len(*in) > protocol.MaxInputParts {
		// Stop reading a conversation that can no longer be taken.
		return refuse("messages", ruleTooManyParts)
	}
	return nil
}

// content reads a message's content: a string, a non-empty array of parts, or null.
func (d *chatDecoder) content(c *content) error {
	w := d.w
	switch w.Kind() {
	case 'n':
		_, err := w.Null()
		return err
	case '"':
		s, err := w.Str()
		if err == nil {
			c.text = &s
		}
		return err
	case jsontext.KindInvalid:
		return w.Skip() // the syntax error
	case '[':
	default:
		return w.Fail(ruleContent)
	}
	parts := []contentPart{}
	if err := w.Array(func(int) error {
		cp, err := d.contentPart()
		parts = append(parts, cp)
		return err
	}); err != nil {
		return err
	}
	if len(parts) == 0 {
		return w.Fail(ruleContent)
	}
	c.parts = parts
	return nil
}

// contentPart reads one content part and translates it.
func (d *chatDecoder) contentPart() (contentPart, error) {
	w := d.w
	var (
		typ, text, url, detail, audioData, audioFormat, fileData, fileName, refusal string
		seen                                                                        uint8
		sawURL, sawData, sawFormat, sawFileData, sawFileID                          bool
	)
	err := w.Members(func(key string) error {
		var err error
		switch key {
		case "type":
			typ, err = w.Str()
		case "text":
			seen |= memText
			text, err = w.Str()
		case "refusal":
			seen |= memRefusal
			refusal, err = w.Str()
		case "image_url":
			seen |= memImageURL
			err = d.members(func(key string) (err error) {
				switch key {
				case "url":
					sawURL = true
					url, err = w.Str()
				case "detail":
					// Accepted and dropped (spec/compat.md): no native option carries
					// a resolution hint, so each provider's default applies.
					var ok bool
					detail, ok, err = w.OptStr()
					if err == nil && ok && detail != "auto" && detail != "low" && detail != "high" && detail != "original" {
						err = w.Fail(ruleDetail)
					}
				default:
					err = w.Unknown()
				}
				return err
			})
		case "input_audio":
			seen |= memInputAudio
			err = d.members(func(key string) (err error) {
				switch key {
				case "data":
					sawData = true
					audioData, err = w.Str()
				case "format":
					sawFormat = true
					audioFormat, err = w.Str()
				default:
					err = w.Unknown()
				}
				return err
			})
		case "file":
			seen |= memFile
			err = d.members(func(key string) (err error) {
				switch key {
				case "file_data":
					sawFileData = true
					fileData, err = w.Str()
				case "filename":
					fileName, _, err = w.OptStr()
				case "file_id":
					sawFileID = true
					_, _, err = w.OptStr()
					if err == nil {
						err = w.Fail(ruleFileDataID)
					}
				default:
					err = w.Unknown()
				}
				return err
			})
		default:
			err = w.Unknown()
		}
		return err
	})
	if err != nil {
		return contentPart{}, err
	}
	need, known := partTypes[typ]
	switch {
	case typ == "":
		return contentPart{}, w.FailAt("type", ruleRequired)
	case !known:
		return contentPart{}, w.FailAt("type", rulePartType)
	}
	if extra := seen &^ need; extra != 0 {
		for i, name := range partMembers {
			if extra&(1<<i) != 0 {
				return contentPart{}, w.FailAt(name, ruleNotForPart)
			}
		}
	}
	if seen&need == 0 {
		return contentPart{}, w.FailAt(partMembers[bitIndex(need)], ruleRequired)
	}
	// where refuses member of the part's object (image_url, input_audio, file) with rule.
	where := func(object, member, rule string) (contentPart, error) {
		w.Enter(object)
		defer w.Leave()
		return contentPart{}, w.FailAt(member, rule)
	}
	var p protocol.Part
	switch typ {
	case "text":
		p = protocol.Part{Type: protocol.PartText, Text: text}
	case "refusal":
		p = protocol.Part{Type: protocol.PartText, Text: refusal}
	case "image_url":
		if !sawURL {
			return where("image_url", "url", ruleRequired)
		}
		var rule string
		if p, rule = imagePart(url); rule != "" {
			return where("image_url", "url", rule)
		}
	case "input_audio":
		switch {
		case !sawData:
			return where("input_audio", "data", ruleRequired)
		case !sawFormat:
			return where("input_audio", "format", ruleRequired)
		}
		var field, rule string
		if p, field, rule = audioPart(audioData, audioFormat); rule != "" {
			return where("input_audio", field, rule)
		}
	case "file":
		if !sawFileData || sawFileID {
			return where("file", "file_data", ruleRequired)
		}
		var field, rule string
		if p, field, rule = filePart(fileData, fileName); rule != "" {
			return where("file", field, rule)
		}
	}
	return contentPart{typ: typ, part: p}, nil
}

// members reads an object with member.
func (d *chatDecoder) members(member func(key string) error) error {
	return d.w.Members(member)
}

// bitIndex is the position of the single bit set in b.
func bitIndex(b uint8) int {
	i := 0
	for b > 1 {
		b >>= 1
		i++
	}
	return i
}

// toolCalls reads an assistant message's tool_calls: function calls.
func (d *chatDecoder) toolCalls(m *message) error {
	w := d.w
	if null, err := w.Null(); null || err != nil {
		return err
	}
	return w.Array(func(int) error {
		var id, typ, name, arguments string
		var sawID, sawArgs bool
		if err := w.Members(func(key string) (err error) {
			switch key {
			case "id":
				sawID = true
				id, err = w.Str()
			case "type":
				typ, err = w.Str()
			case "function":
				err = d.members(func(key string) (err error) {
					switch key {
					case "name":
						name, err = w.Str()
					case "arguments":
						sawArgs = true
						arguments, err = w.Str()
					default:
						err = w.Unknown()
					}
					return err
				})
			default:
				err = w.Unknown()
			}
			return err
		}); err != nil {
			return err
		}
		switch {
		case !sawID:
			return w.FailAt("id", ruleRequired)
		case !validCallID(id):
			return w.FailAt("id", ruleCallID)
		case typ != "function":
			return w.FailAt("type", ruleFunctionType)
		}
		w.Enter("function")
		defer w.Leave()
		switch {
		case !toolNameRE.MatchString(name):
			return w.FailAt("name", ruleToolName)
		case !sawArgs:
			return w.FailAt("arguments", ruleRequired)
		}
		m.toolCalls = append(m.toolCalls, protocol.Part{
			Type: protocol.PartToolCall, Role: protocol.RoleAssistant, CallID: id, Name: name, Arguments: arguments,
		})
		return nil
	})
}
