package anthropic

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Content blocks, the system prompt, tools and messages. A block's members come in any
// order and its type decides which are allowed, so a block is read in one pass into
// every member a block may have, then checked against its type and mapped to a part.
// A message's role may come after its content too (the Go SDK writes content first),
// so the rules that depend on the role are applied once the message is read.

var (
	toolNameRE  = regexp.MustCompile(protocol.ToolNamePattern)
	mediaTypeRE = regexp.MustCompile(protocol.MediaTypePattern)
	uriRE       = regexp.MustCompile(protocol.URIPattern)
)

// Block members, by bit.
const (
	mText uint32 = 1 << iota
	mSource
	mTitle
	mID
	mName
	mInput
	mToolUseID
	mContent
	mIsError
	numMembers = iota
)

// memberNames are the members' names, by bit number.
var memberNames = [numMembers]string{"text", "source", "title", "id", "name", "input", "tool_use_id", "content", "is_error"}

// blockRules says which members each supported block type allows and requires, besides
// type and cache_control, which every block may carry.
var blockRules = map[string]struct{ allowed, required uint32 }{
	"text":        {mText, mText},
	"image":       {mSource, mSource},
	"document":    {mSource | mTitle, mSource},
	"tool_use":    {mID | mName | mInput, mID | mName | mInput},
	"tool_result": {mToolUseID | mContent | mIsError, mToolUseID},
}

// Block types of the Messages API the runtime has no mapping for, refused by name;
// members of supported types likewise. Other types and members are refused unnamed.
var (
	unsupportedBlockTypes = []string{
		"thinking", "redacted_thinking", "server_tool_use", "search_result", "container_upload",
		"web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
		"bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
		"tool_search_tool_result", "mcp_tool_use", "mcp_tool_result", "tool_reference",
	}
	unsupportedBlockMembers = []string{"citations", "transformations", "context", "caller", "toolset_name"}
)

const ruleBlockType = "must be one of text, image, document, tool_use, tool_result"

// block is every member a content block may carry, as read.
type block struct {
	seen                                  uint32
	typ, text, title, id, name, toolUseID string
	input                                 []byte
	src                                   source
	content                               *protocol.ToolContent
	// cached is true when the block carried cache_control, with ttl; for a
	// tool_result also when one of its content blocks did (the breakpoint is the
	// result's: a content block is no part of its own).
	cached bool
	ttl    string
	// unknown is true when the block had a member of no block type; unsupported names
	// the first member of a block type the runtime does not support. Both are refused
	// once the block's type is known to be supported, so that a block of a type the
	// runtime lacks is refused for its type.
	unknown     bool
	unsupported string
}

// source is an image or document source, as read.
type source struct {
	typ, mediaType, data, url string
	hasMediaType, hasData     bool
	hasURL                    bool
}

// readBlock reads the content block at the current location; nested is true inside a
// tool_result's content, where blocks have no content of their own.
func (d *decoder) readBlock(nested bool) (*block, error) {
	b := &block{}
	hasType := false
	str := func(bit uint32, dst *string) func() error {
		return func() error {
			b.seen |= bit
			s, err := d.Str()
			*dst = s
			return err
		}
	}
	err := d.Object(func(key string) error {
		switch key {
		case "type":
			hasType = true
			return d.Member(key, func() error {
				s, err := d.Str()
				b.typ = s
				return err
			})
		case "text":
			return d.Member(key, str(mText, &b.text))
		case "id":
			return d.Member(key, str(mID, &b.id))
		case "name":
			return d.Member(key, str(mName, &b.name))
		case "tool_use_id":
			return d.Member(key, str(mToolUseID, &b.toolUseID))
		case "title":
			return d.Member(key, func() error {
				if null, err := d.Null(); null || err != nil {
					return err
				}
				return str(mTitle, &b.title)()
			})
		case "source":
			b.seen |= mSource
			return d.Member(key, func() error { return d.source(&b.src) })
		case "input":
			b.seen |= mInput
			return d.Member(key, func() error {
				raw, err := d.RawObject(true)
				b.input = raw
				return err
			})
		case "is_error":
			return d.Member(key, func() error {
				if null, err := d.Null(); null || err != nil {
					return err
				}
				b.seen |= mIsError
				_, err := d.Bool()
				return err
			})
		case "cache_control":
			return d.Member(key, func() error {
				ttl, present, err := d.cacheControl()
				if present {
					b.cached, b.ttl = true, longer(b.ttl, ttl)
				}
				return err
			})
		case "content":
			if nested {
				break // no block inside a tool_result has content
			}
			b.seen |= mContent
			return d.Member(key, func() error { return d.resultContent(b) })
		}
		for _, name := range unsupportedBlockMembers {
			if key == name {
				// Absent when null, as Anthropic reads it; anything else asks for a
				// feature the runtime does not have.
				if null, err := d.Null(); null || err != nil {
					return err
				}
				if b.unsupported == "" {
					b.unsupported = name
				}
				return d.Skip()
			}
		}
		b.unknown = true
		return d.Skip()
	})
	if err != nil {
		return nil, err
	}
	if !hasType {
		d.Enter("type")
		return nil, d.Fail(ruleRequired)
	}
	return b, nil
}

// source reads an image or document source; the block's type checks it.
func (d *decoder) source(s *source) error {
	hasType := false
	err := d.Object(func(key string) error {
		switch key {
		case "type":
			hasType = true
			return d.Member(key, func() error {
				v, err := d.Str()
				s.typ = v
				return err
			})
		case "media_type":
			s.hasMediaType = true
			return d.Member(key, func() error {
				v, err := d.Str()
				s.mediaType = v
				return err
			})
		case "data":
			s.hasData = true
			return d.Member(key, func() error {
				v, err := d.Str()
				s.data = v
				return err
			})
		case "url":
			s.hasURL = true
			return d.Member(key, func() error {
				v, err := d.Str()
				s.url = v
				return err
			})
		}
		return d.unknown(key, []string{"file_id", "content"})
	})
	if err != nil {
		return err
	}
	if !hasType {
		d.Enter("type")
		return d.Fail(ruleRequired)
	}
	return nil
}

// resultContent reads a tool_result's content: a string, or text, image and document
// blocks.
func (d *decoder) resultContent(b *block) error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	if d.Kind() == '"' {
		s, err := d.Str()
		b.content = &protocol.ToolContent{Text: &s}
		return err
	}
	if d.Kind() != '[' {
		return d.Fail(ruleStringOrList)
	}
	parts := []protocol.Part{}
	err := d.Array(func(i int) error {
		if i == protocol.MaxContentParts {
			d.Leave()
			return d.Fail("must hold at most " + strconv.Itoa(protocol.MaxContentParts) + " blocks")
		}
		inner, err := d.readBlock(true)
		if err != nil {
			return err
		}
		if inner.typ == "tool_use" || inner.typ == "tool_result" {
			d.Enter("type")
			return d.Fail("must be text, image or document inside tool_result content")
		}
		p, err := d.part(inner)
		if err != nil {
			return err
		}
		if inner.cached {
			b.cached, b.ttl = true, longer(b.ttl, inner.ttl)
		}
		parts = append(parts, p)
		return nil
	})
	b.content = &protocol.ToolContent{Parts: parts}
	return err
}

// part checks a block against its type and maps it to a part, without a role (the
// message's role is applied after). The walker is at the block.
func (d *decoder) part(b *block) (protocol.Part, error) {
	rule, ok := blockRules[b.typ]
	if !ok {
		d.Enter("type")
		if contains(unsupportedBlockTypes, b.typ) {
			return protocol.Part{}, d.Fail(ruleUnsupported)
		}
		return protocol.Part{}, d.Fail(ruleBlockType)
	}
	if b.unknown {
		return protocol.Part{}, d.Fail(ruleUnknown)
	}
	if b.unsupported != "" {
		d.Enter(b.unsupported)
		return protocol.Part{}, d.Fail(ruleUnsupported)
	}
	if extra := b.seen &^ rule.allowed; extra != 0 {
		d.Enter(memberNames[lowestBit(extra)])
		return protocol.Part{}, d.Fail("not allowed for this block type")
	}
	if missing := rule.required &^ b.seen; missing != 0 {
		d.Enter(memberNames[lowestBit(missing)])
		return protocol.Part{}, d.Fail(ruleRequired)
	}
	switch b.typ {
	case "text":
		return protocol.Part{Type: protocol.PartText, Text: b.text}, nil
	case "image":
		return d.media(b, protocol.PartImage)
	case "document":
		p, err := d.media(b, protocol.PartFile)
		if err != nil || b.seen&mTitle == 0 || b.title == "" {
			return p, err
		}
		// The title names the document: the file part's name, under its rules.
		if n := utf8.RuneCountInString(b.title); n > protocol.MaxFileNameLength || strings.ContainsFunc(b.title, isControl) {
			d.Enter("title")
			return protocol.Part{}, d.Fail("must be at most " + strconv.Itoa(protocol.MaxFileNameLength) + " characters without control characters")
		}
		p.Name = b.title
		return p, nil
	case "tool_use":
		if err := d.callID(b.id, "id"); err != nil {
			return protocol.Part{}, err
		}
		if !toolNameRE.MatchString(b.name) {
			d.Enter("name")
			return protocol.Part{}, d.Fail("must match " + protocol.ToolNamePattern)
		}
		return protocol.Part{Type: protocol.PartToolCall, Role: protocol.RoleAssistant, CallID: b.id, Name: b.name, Arguments: string(b.input)}, nil
	}
	// tool_result
	if err := d.callID(b.toolUseID, "tool_use_id"); err != nil {
		return protocol.Part{}, err
	}
	content := b.content
	if content == nil {
		empty := ""
		content = &protocol.ToolContent{Text: &empty}
	}
	return protocol.Part{Type: protocol.PartToolResult, CallID: b.toolUseID, Content: content}, nil
}

// callID checks a tool call id, in member name.
func (d *decoder) callID(id, name string) error {
	if n := utf8.RuneCountInString(id); n < 1 || n > protocol.MaxCallIDLength {
		d.Enter(name)
		return d.Fail("must be 1 to " + strconv.Itoa(protocol.MaxCallIDLength) + " characters")
	}
	return nil
}

// media maps an image or document block's source to a part of type t: base64 data, or
// a URL the runtime never fetches. A document must be a PDF.
func (d *decoder) media(b *block, t protocol.PartType) (protocol.Part, error) {
	s := &b.src
	d.Enter("source")
	defer d.Leave()
	p := protocol.Part{Type: t}
	switch s.typ {
	case "base64":
		if s.hasURL {
			d.Enter("url")
			return p, d.Fail("not allowed for base64 sources")
		}
		if !s.hasMediaType {
			d.Enter("media_type")
			return p, d.Fail(ruleRequired)
		}
		if !s.hasData {
			d.Enter("data")
			return p, d.Fail(ruleRequired)
		}
		if err := d.mediaType(s.mediaType, t); err != nil {
			return p, err
		}
		if !protocol.CanonicalBase64(s.data) {
			d.Enter("data")
			return p, d.Fail("must be non-empty canonical standard base64 (padded, no line breaks)")
		}
		p.MediaType, p.Data = s.mediaType, s.data
		return p, nil
	case "url":
		if s.hasMediaType || s.hasData {
			d.Enter(map[bool]string{true: "media_type", false: "data"}[s.hasMediaType])
			return p, d.Fail("not allowed for url sources")
		}
		if !s.hasURL {
			d.Enter("url")
			return p, d.Fail(ruleRequired)
		}
		if !isWebURL(s.url) {
			d.Enter("url")
			return p, d.Fail("must be an http or https URL of printable ASCII, at most " + strconv.Itoa(protocol.MaxURILength) + " characters")
		}
		p.URI = s.url
		p.MediaType = "application/pdf"
		if t == protocol.PartImage {
			p.MediaType = imageTypeOf(s.url)
		}
		return p, nil
	}
	d.Enter("type")
	if t == protocol.PartFile {
		return p, d.Fail("must be base64 or url: only PDF documents are supported by this runtime")
	}
	return p, d.Fail("must be base64 or url")
}

// mediaType checks a base64 source's media type for a part of type t.
func (d *decoder) mediaType(mt string, t protocol.PartType) error {
	d.Enter("media_type")
	defer d.Leave()
	if t == protocol.PartFile {
		if mt != "application/pdf" {
			return d.Fail("must be application/pdf")
		}
		return nil
	}
	if len(mt) > protocol.MaxMediaTypeLength || !mediaTypeRE.MatchString(mt) || !strings.HasPrefix(mt, "image/") {
		return d.Fail("must be an image media type such as image/png")
	}
	return nil
}

// systemPrompt reads system: a string or text blocks, each a system text part.
func (d *decoder) systemPrompt() error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	if d.Kind() == '"' {
		s, err := d.Str()
		if err == nil && s != "" {
			d.system = append(d.system, protocol.Part{Type: protocol.PartText, Role: protocol.RoleSystem, Text: s})
		}
		return err
	}
	if d.Kind() != '[' {
		return d.Fail("must be a string or an array of text blocks")
	}
	return d.Array(func(int) error {
		b, err := d.readBlock(true)
		if err != nil {
			return err
		}
		if b.typ != "text" {
			d.Enter("type")
			return d.Fail("must be text")
		}
		p, err := d.part(b)
		if err != nil {
			return err
		}
		if b.cached {
			d.breakpoints = append(d.breakpoints, breakpoint{group: groupSystem, index: len(d.system), ttl: b.ttl})
		}
		p.Role = protocol.RoleSystem
		d.system = append(d.system, p)
		return nil
	})
}

// toolList reads tools: custom tools only, each a tool part.
func (d *decoder) toolList() error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	return d.Array(func(int) error {
		p := protocol.Part{Type: protocol.PartTool}
		var ttl string
		var cached, hasName, hasSchema bool
		err := d.Object(func(key string) error {
			switch key {
			case "type":
				return d.Member(key, func() error {
					if null, err := d.Null(); null || err != nil {
						return err
					}
					s, err := d.Str()
					if err == nil && s != "custom" {
						return d.Fail("only custom tools are supported by this runtime")
					}
					return err
				})
			case "name":
				hasName = true
				return d.Member(key, func() error {
					s, err := d.Str()
					if err == nil && !toolNameRE.MatchString(s) {
						return d.Fail("must match " + protocol.ToolNamePattern)
					}
					p.Name = s
					return err
				})
			case "description":
				return d.Member(key, func() error {
					if null, err := d.Null(); null || err != nil {
						return err
					}
					s, err := d.Str()
					p.Description = s
					return err
				})
			case "input_schema":
				hasSchema = true
				return d.Member(key, func() error {
					raw, err := d.RawObject(true)
					p.Parameters = raw
					return err
				})
			case "cache_control":
				return d.Member(key, func() error {
					var err error
					ttl, cached, err = d.cacheControl()
					return err
				})
			}
			return d.unknown(key, unsupportedTool)
		})
		if err != nil {
			return err
		}
		switch {
		case !hasName:
			d.Enter("name")
			return d.Fail(ruleRequired)
		case !hasSchema:
			d.Enter("input_schema")
			return d.Fail(ruleRequired)
		}
		if cached {
			d.breakpoints = append(d.breakpoints, breakpoint{group: groupTools, index: len(d.tools), ttl: ttl})
		}
		d.tools = append(d.tools, p)
		d.toolNames = append(d.toolNames, p.Name)
		return nil
	})
}

// messages reads messages: each block a part, in order, with the message's role.
func (d *decoder) messages() error {
	return d.Array(func(int) error {
		var role string
		var parts []protocol.Part
		var types []string     // each part's block type, for the role rules
		var marks []breakpoint // indices into parts
		contentSeen := false
		err := d.Object(func(key string) error {
			switch key {
			case "role":
				return d.Member(key, func() error {
					s, err := d.Str()
					if err == nil && s != "user" && s != "assistant" {
						return d.Fail("must be user or assistant")
					}
					role = s
					return err
				})
			case "content":
				contentSeen = true
				return d.Member(key, func() error {
					if d.Kind() == '"' {
						s, err := d.Str()
						parts, types = append(parts, protocol.Part{Type: protocol.PartText, Text: s}), append(types, "text")
						return err
					}
					if d.Kind() != '[' {
						return d.Fail(ruleStringOrList)
					}
					return d.Array(func(int) error {
						b, err := d.readBlock(false)
						if err != nil {
							return err
						}
						p, err := d.part(b)
						if err != nil {
							return err
						}
						if b.cached {
							marks = append(marks, breakpoint{group: groupTurns, index: len(parts), ttl: b.ttl})
						}
						parts, types = append(parts, p), append(types, b.typ)
						return nil
					})
				})
			}
			return d.unknown(key, nil)
		})
		if err != nil {
			return err
		}
		switch {
		case role == "":
			d.Enter("role")
			return d.Fail(ruleRequired)
		case !contentSeen:
			d.Enter("content")
			return d.Fail(ruleRequired)
		}
		for i, t := range types {
			var rule string
			switch {
			case role == "user" && t == "tool_use":
				rule = "tool_use blocks belong to assistant messages"
			case role == "assistant" && t != "text" && t != "tool_use":
				rule = t + " blocks belong to user messages" // t is a supported type: ours
			}
			if rule != "" {
				d.Enter("content")
				d.EnterIndex(i)
				return d.Fail(rule)
			}
			if role == "assistant" {
				parts[i].Role = protocol.RoleAssistant
			}
		}
		for _, m := range marks {
			m.index += len(d.turns)
			d.breakpoints = append(d.breakpoints, m)
		}
		d.turns = append(d.turns, parts...)
		return nil
	})
}

// cacheControl reads a cache_control member: {type: ephemeral, ttl?: 5m | 1h}, or null
// for none. present reports a breakpoint.
func (d *decoder) cacheControl() (ttl string, present bool, err error) {
	if null, err := d.Null(); null || err != nil {
		return "", false, err
	}
	typed := false
	err = d.Object(func(key string) error {
		switch key {
		case "type":
			typed = true
			return d.Member(key, func() error {
				s, err := d.Str()
				if err == nil && s != "ephemeral" {
					return d.Fail("must be ephemeral")
				}
				return err
			})
		case "ttl":
			return d.Member(key, func() error {
				if null, err := d.Null(); null || err != nil {
					return err
				}
				s, err := d.Str()
				if err == nil && s != "5m" && s != "1h" {
					return d.Fail("must be 5m or 1h")
				}
				ttl = s
				return err
			})
		}
		return d.unknown(key, nil)
	})
	if err != nil {
		return "", false, err
	}
	if !typed {
		d.Enter("type")
		return "", false, d.Fail(ruleRequired)
	}
	return ttl, true, nil
}

// longer is the longer of two cache TTLs ("" is the default, 5m).
func longer(a, b string) string {
	if a == "1h" || b == "1h" {
		return "1h"
	}
	return "5m"
}

// isWebURL reports whether s is an http or https URL the native decoder accepts as a
// part's uri.
func isWebURL(s string) bool {
	lower := strings.ToLower(s[:min(len(s), 8)])
	return (strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")) &&
		len(s) <= protocol.MaxURILength && uriRE.MatchString(s)
}

// imageTypeOf is the media type of the image at url, which an image part must state
// and an Anthropic url source does not: the one its file extension names, else
// image/jpeg. Providers that take image URLs fetch and sniff the content themselves;
// the type only tells routing that the part is an image.
func imageTypeOf(url string) string {
	path := url
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	ext := strings.ToLower(path[strings.LastIndexByte(path, '.')+1:])
	switch ext {
	case "png", "gif", "webp", "heic", "heif":
		return "image/" + ext
	}
	return "image/jpeg"
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// lowestBit is the number of the lowest set bit of m.
func lowestBit(m uint32) int {
	i := 0
	for m&1 == 0 {
		m >>= 1
		i++
	}
	return i
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
