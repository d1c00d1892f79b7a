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
			s, err := d.str()
			*dst = s
			return err
		}
	}
	err := d.object(func(key string) error {
		switch key {
		case "type":
			hasType = true
			return d.member(key, func() error {
				s, err := d.str()
				b.typ = s
				return err
			})
		case "text":
			return d.member(key, str(mText, &b.text))
		case "id":
			return d.member(key, str(mID, &b.id))
		case "name":
			return d.member(key, str(mName, &b.name))
		case "tool_use_id":
			return d.member(key, str(mToolUseID, &b.toolUseID))
		case "title":
			return d.member(key, func() error {
				if null, err := d.null(); null || err != nil {
					return err
				}
				return str(mTitle, &b.title)()
			})
		case "source":
			b.seen |= mSource
			return d.member(key, func() error { return d.source(&b.src) })
		case "input":
			b.seen |= mInput
			return d.member(key, func() error {
				raw, err := d.rawObject()
				b.input = raw
				return err
			})
		case "is_error":
			return d.member(key, func() error {
				if null, err := d.null(); null || err != nil {
					return err
				}
				b.seen |= mIsError
				_, err := d.boolean()
				return err
			})
		case "cache_control":
			return d.member(key, func() error {
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
			return d.member(key, func() error { return d.resultContent(b) })
		}
		for _, name := range unsupportedBlockMembers {
			if key == name {
				// Absent when null, as Anthropic reads it; anything else asks for a
				// feature the runtime does not have.
				if null, err := d.null(); null || err != nil {
					return err
				}
				if b.unsupported == "" {
					b.unsupported = name
				}
				return d.skip()
			}
		}
		b.unknown = true
		return d.skip()
	})
	if err != nil {
		return nil, err
	}
	if !hasType {
		d.enter("type")
		return nil, d.fail(ruleRequired)
	}
	return b, nil
}

// source reads an image or document source; the block's type checks it.
func (d *decoder) source(s *source) error {
	hasType := false
	err := d.object(func(key string) error {
		switch key {
		case "type":
			hasType = true
			return d.member(key, func() error {
				v, err := d.str()
				s.typ = v
				return err
			})
		case "media_type":
			s.hasMediaType = true
			return d.member(key, func() error {
				v, err := d.str()
				s.mediaType = v
				return err
			})
		case "data":
			s.hasData = true
			return d.member(key, func() error {
				v, err := d.str()
				s.data = v
				return err
			})
		case "url":
			s.hasURL = true
			return d.member(key, func() error {
				v, err := d.str()
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
		d.enter("type")
		return d.fail(ruleRequired)
	}
	return nil
}

// resultContent reads a tool_result's content: a string, or text, image and document
// blocks.
func (d *decoder) resultContent(b *block) error {
	if null, err := d.null(); null || err != nil {
		return err
	}
	if d.kind() == '"' {
		s, err := d.str()
		b.content = &protocol.ToolContent{Text: &s}
		return err
	}
	if d.kind() != '[' {
		return d.fail(ruleStringOrList)
	}
	parts := []protocol.Part{}
	err := d.array(func(i int) error {
		if i == protocol.MaxContentParts {
			d.leave()
			return d.fail("must hold at most " + strconv.Itoa(protocol.MaxContentParts) + " blocks")
		}
		inner, err := d.readBlock(true)
		if err != nil {
			return err
		}
		if inner.typ == "tool_use" || inner.typ == "tool_result" {
			d.enter("type")
			return d.fail("must be text, image or document inside tool_result content")
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
		d.enter("type")
		if contains(unsupportedBlockTypes, b.typ) {
			return protocol.Part{}, d.fail(ruleUnsupported)
		}
		return protocol.Part{}, d.fail(ruleBlockType)
	}
	if b.unknown {
		return protocol.Part{}, d.fail(ruleUnknown)
	}
	if b.unsupported != "" {
		d.enter(b.unsupported)
		return protocol.Part{}, d.fail(ruleUnsupported)
	}
	if extra := b.seen &^ rule.allowed; extra != 0 {
		d.enter(memberNames[lowestBit(extra)])
		return protocol.Part{}, d.fail("not allowed for this block type")
	}
	if missing := rule.required &^ b.seen; missing != 0 {
		d.enter(memberNames[lowestBit(missing)])
		return protocol.Part{}, d.fail(ruleRequired)
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
			d.enter("title")
			return protocol.Part{}, d.fail("must be at most " + strconv.Itoa(protocol.MaxFileNameLength) + " characters without control characters")
		}
		p.Name = b.title
		return p, nil
	case "tool_use":
		if err := d.callID(b.id, "id"); err != nil {
			return protocol.Part{}, err
		}
		if !toolNameRE.MatchString(b.name) {
			d.enter("name")
			return protocol.Part{}, d.fail("must match " + protocol.ToolNamePattern)
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
		d.enter(name)
		return d.fail("must be 1 to " + strconv.Itoa(protocol.MaxCallIDLength) + " characters")
	}
	return nil
}

// media maps an image or document block's source to a part of type t: base64 data, or
// a URL the runtime never fetches. A document must be a PDF.
func (d *decoder) media(b *block, t protocol.PartType) (protocol.Part, error) {
	s := &b.src
	d.enter("source")
	defer d.leave()
	p := protocol.Part{Type: t}
	switch s.typ {
	case "base64":
		if s.hasURL {
			d.enter("url")
			return p, d.fail("not allowed for base64 sources")
		}
		if !s.hasMediaType {
			d.enter("media_type")
			return p, d.fail(ruleRequired)
		}
		if !s.hasData {
			d.enter("data")
			return p, d.fail(ruleRequired)
		}
		if err := d.mediaType(s.mediaType, t); err != nil {
			return p, err
		}
		if !canonicalBase64(s.data) {
			d.enter("data")
			return p, d.fail("must be non-empty canonical standard base64 (padded, no line breaks)")
		}
		p.MediaType, p.Data = s.mediaType, s.data
		return p, nil
	case "url":
		if s.hasMediaType || s.hasData {
			d.enter(map[bool]string{true: "media_type", false: "data"}[s.hasMediaType])
			return p, d.fail("not allowed for url sources")
		}
		if !s.hasURL {
			d.enter("url")
			return p, d.fail(ruleRequired)
		}
		if !isWebURL(s.url) {
			d.enter("url")
			return p, d.fail("must be an http or https URL of printable ASCII, at most " + strconv.Itoa(protocol.MaxURILength) + " characters")
		}
		p.URI = s.url
		p.MediaType = "application/pdf"
		if t == protocol.PartImage {
			p.MediaType = imageTypeOf(s.url)
		}
		return p, nil
	}
	d.enter("type")
	if t == protocol.PartFile {
		return p, d.fail("must be base64 or url: only PDF documents are supported by this runtime")
	}
	return p, d.fail("must be base64 or url")
}

// mediaType checks a base64 source's media type for a part of type t.
func (d *decoder) mediaType(mt string, t protocol.PartType) error {
	d.enter("media_type")
	defer d.leave()
	if t == protocol.PartFile {
		if mt != "application/pdf" {
			return d.fail("must be application/pdf")
		}
		return nil
	}
	if len(mt) > protocol.MaxMediaTypeLength || !mediaTypeRE.MatchString(mt) || !strings.HasPrefix(mt, "image/") {
		return d.fail("must be an image media type such as image/png")
	}
	return nil
}

// systemPrompt reads system: a string or text blocks, each a system text part.
func (d *decoder) systemPrompt() error {
	if null, err := d.null(); null || err != nil {
		return err
	}
	if d.kind() == '"' {
		s, err := d.str()
		if err == nil && s != "" {
			d.system = append(d.system, protocol.Part{Type: protocol.PartText, Role: protocol.RoleSystem, Text: s})
		}
		return err
	}
	if d.kind() != '[' {
		return d.fail("must be a string or an array of text blocks")
	}
	return d.array(func(int) error {
		b, err := d.readBlock(true)
		if err != nil {
			return err
		}
		if b.typ != "text" {
			d.enter("type")
			return d.fail("must be text")
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
	if null, err := d.null(); null || err != nil {
		return err
	}
	return d.array(func(int) error {
		p := protocol.Part{Type: protocol.PartTool}
		var ttl string
		var cached, hasName, hasSchema bool
		err := d.object(func(key string) error {
			switch key {
			case "type":
				return d.member(key, func() error {
					if null, err := d.null(); null || err != nil {
						return err
					}
					s, err := d.str()
					if err == nil && s != "custom" {
						return d.fail("only custom tools are supported by this runtime")
					}
					return err
				})
			case "name":
				hasName = true
				return d.member(key, func() error {
					s, err := d.str()
					if err == nil && !toolNameRE.MatchString(s) {
						return d.fail("must match " + protocol.ToolNamePattern)
					}
					p.Name = s
					return err
				})
			case "description":
				return d.member(key, func() error {
					if null, err := d.null(); null || err != nil {
						return err
					}
					s, err := d.str()
					p.Description = s
					return err
				})
			case "input_schema":
				hasSchema = true
				return d.member(key, func() error {
					raw, err := d.rawObject()
					p.Parameters = raw
					return err
				})
			case "cache_control":
				return d.member(key, func() error {
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
			d.enter("name")
			return d.fail(ruleRequired)
		case !hasSchema:
			d.enter("input_schema")
			return d.fail(ruleRequired)
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
	return d.array(func(int) error {
		var role string
		var parts []protocol.Part
		var types []string     // each part's block type, for the role rules
		var marks []breakpoint // indices into parts
		contentSeen := false
		err := d.object(func(key string) error {
			switch key {
			case "role":
				return d.member(key, func() error {
					s, err := d.str()
					if err == nil && s != "user" && s != "assistant" {
						return d.fail("must be user or assistant")
					}
					role = s
					return err
				})
			case "content":
				contentSeen = true
				return d.member(key, func() error {
					if d.kind() == '"' {
						s, err := d.str()
						parts, types = append(parts, protocol.Part{Type: protocol.PartText, Text: s}), append(types, "text")
						return err
					}
					if d.kind() != '[' {
						return d.fail(ruleStringOrList)
					}
					return d.array(func(int) error {
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
			d.enter("role")
			return d.fail(ruleRequired)
		case !contentSeen:
			d.enter("content")
			return d.fail(ruleRequired)
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
				d.enter("content")
				d.enterIndex(i)
				return d.fail(rule)
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
	if null, err := d.null(); null || err != nil {
		return "", false, err
	}
	typed := false
	err = d.object(func(key string) error {
		switch key {
		case "type":
			typed = true
			return d.member(key, func() error {
				s, err := d.str()
				if err == nil && s != "ephemeral" {
					return d.fail("must be ephemeral")
				}
				return err
			})
		case "ttl":
			return d.member(key, func() error {
				if null, err := d.null(); null || err != nil {
					return err
				}
				s, err := d.str()
				if err == nil && s != "5m" && s != "1h" {
					return d.fail("must be 5m or 1h")
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
		d.enter("type")
		return "", false, d.fail(ruleRequired)
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

// canonicalBase64 reports whether s is non-empty canonical standard base64: padded, of
// the standard alphabet only, with zero padding bits (protocol.Base64Pattern), so that
// the native decoder accepts it too.
func canonicalBase64(s string) bool {
	if s == "" || len(s)%4 != 0 {
		return false
	}
	body, last := s[:len(s)-4], s[len(s)-4:]
	for i := 0; i < len(body); i++ {
		if !isBase64(body[i]) {
			return false
		}
	}
	switch {
	case last[3] != '=':
		return isBase64(last[0]) && isBase64(last[1]) && isBase64(last[2]) && isBase64(last[3])
	case last[2] == '=':
		return isBase64(last[0]) && strings.IndexByte("AQgw", last[1]) >= 0
	default:
		return isBase64(last[0]) && isBase64(last[1]) && strings.IndexByte("AEIMQUYcgkosw048", last[2]) >= 0
	}
}

func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/'
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
