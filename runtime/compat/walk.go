package compat

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The front doors decode their vendor's request in one pass with a Walker (spec/compat.md):
// token by token, strictly — a repeated key, a value of the wrong type and a field the
// door does not take are refused — keeping the location it is at, so that every refusal
// names the vendor schema location it violated ("messages[2].content[0].type") with a
// fixed rule, and never what the caller sent: not a value, and not a member name either,
// since a name is caller data too. Only names of the vendor's own schema are ever
// rendered in a location.

// Rules a Walker refuses with; a door may use them for its own refusals too.
const (
	RuleNotJSON = "not valid JSON"
	RuleObject  = "must be an object"
	RuleArray   = "must be an array"
	RuleString  = "must be a string"
	RuleBool    = "must be a boolean"
	RuleNumber  = "must be a number"
	RuleUnknown = "unknown field"
)

// Refusal is a refused request: a portable invalid_request error whose message is
// "<location>: <rule>", with the location kept apart so that a door can render it its
// own way (OpenAI also answers it as the error's param). It unwraps to the portable
// error, so the server classifies it like any other.
type Refusal struct {
	// Loc is the refused location: "body" for the document itself.
	Loc string
	// Err is the portable error.
	Err *protocol.Error
}

// Error is the portable error's message.
func (e *Refusal) Error() string { return e.Err.Error() }

// Unwrap is the portable error.
func (e *Refusal) Unwrap() error { return e.Err }

// Refuse is the Refusal of location loc for rule, a fixed text.
func Refuse(loc, rule string) *Refusal {
	return &Refusal{Loc: loc, Err: protocol.NewError(protocol.CodeInvalidRequest, loc+": "+rule)}
}

// WalkOptions are what differs between the doors' schemas and wording.
type WalkOptions struct {
	// Names are the member names of the vendor's schema, each mapped to itself. When set,
	// a location is rendered up to the first name that is not one of them, so a walker
	// may enter any member (Members does); and a member name that is one is read as the
	// map's own string, without allocating. When nil, every name entered is rendered:
	// the door enters only names of its schema.
	Names map[string]string
	// Duplicate is the rule for a repeated member name.
	Duplicate string
	// DeepDuplicates refuses a repeated name at any depth, in values read whole
	// (RawObject) or skipped too, as the JSON decoder finds it. Otherwise only the
	// objects walked member by member are checked, and a value read whole is passed on
	// as sent.
	DeepDuplicates bool
	// Unsupported is the rule for a member of the schema the door does not take
	// (Unknown).
	Unsupported string
}

// segment is one step of a location: a member name, or an array position (index ≥ 0).
type segment struct {
	name  string
	index int
}

// Walker reads one JSON document with the tokenizer of encoding/json/v2 (jsontext), which
// reads strings in place, allocates little and refuses invalid UTF-8, and knows where it
// is in it.
type Walker struct {
	dec  *jsontext.Decoder
	path []segment
	opts *WalkOptions
}

// NewWalker is a Walker over body; opts is kept, not copied.
func NewWalker(body []byte, opts *WalkOptions) *Walker {
	// A bytes.Buffer is parsed in place.
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(!opts.DeepDuplicates))
	return &Walker{dec: dec, path: make([]segment, 0, 8), opts: opts}
}

// Loc renders the current location: "body" at the top.
func (w *Walker) Loc() string {
	var b strings.Builder
	for _, s := range w.path {
		if s.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
			continue
		}
		if w.opts.Names != nil {
			if _, known := w.opts.Names[s.name]; !known {
				break
			}
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.name)
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

// Fail refuses the current location with rule.
func (w *Walker) Fail(rule string) error { return Refuse(w.Loc(), rule) }

// FailAt refuses the location of the current one's member name.
func (w *Walker) FailAt(name, rule string) error {
	w.Enter(name)
	defer w.Leave()
	return w.Fail(rule)
}

// Unknown refuses the member the walker is in (with WalkOptions.Names): a name of the
// schema is named, with the Unsupported rule; any other is refused at its parent's
// location as an unknown field.
func (w *Walker) Unknown() error {
	if _, known := w.opts.Names[w.path[len(w.path)-1].name]; known {
		return w.Fail(w.opts.Unsupported)
	}
	return w.Fail(RuleUnknown)
}

// Enter, EnterIndex and Leave move into and out of a member or an element.
func (w *Walker) Enter(name string) { w.path = append(w.path, segment{name: name, index: -1}) }
func (w *Walker) EnterIndex(i int)  { w.path = append(w.path, segment{index: i}) }
func (w *Walker) Leave()            { w.path = w.path[:len(w.path)-1] }

// Top moves back to the top of the document, as locations go.
func (w *Walker) Top() { w.path = w.path[:0] }

// syntax maps an error of the JSON decoder: a repeated name where it was met, anything
// else as invalid JSON. The decoder's own text, which quotes the input, is dropped.
func (w *Walker) syntax(err error) error {
	if errors.Is(err, jsontext.ErrDuplicateName) {
		return w.Fail(w.opts.Duplicate)
	}
	return Refuse("body", RuleNotJSON)
}

// Kind peeks at the next value's kind; jsontext.KindInvalid on an error, which the next
// read returns.
func (w *Walker) Kind() jsontext.Kind { return w.dec.PeekKind() }

// expect checks that the next value is of kind (true standing for both booleans),
// refusing it with rule when it is not.
func (w *Walker) expect(kind jsontext.Kind, rule string) error {
	switch k := w.dec.PeekKind(); {
	case k == kind, kind == 't' && k == 'f':
		return nil
	case k == jsontext.KindInvalid:
		return w.syntax(w.dec.SkipValue())
	}
	return w.Fail(rule)
}

// token reads the next token, of a kind already peeked.
func (w *Walker) token() (jsontext.Token, error) {
	t, err := w.dec.ReadToken()
	if err != nil {
		return t, w.syntax(err)
	}
	return t, nil
}

// name reads an object member's name: the schema's own string when it is one of its
// names, so that reading a request's names allocates nothing.
func (w *Walker) name() (string, error) {
	v, err := w.dec.ReadValue() // a name is a string value; the decoder checks that
	if err != nil || v.Kind() != '"' {
		return "", w.syntax(err)
	}
	if bytes.IndexByte(v, '\\') < 0 {
		inner := v[1 : len(v)-1]
		if k, ok := w.opts.Names[string(inner)]; ok {
			return k, nil
		}
		return string(inner), nil
	}
	s, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return "", w.syntax(err)
	}
	return string(s), nil
}

// Object reads an object, calling member for each name with the walker where it was;
// member reads the value, entering the name if it is to be located. The name is the
// caller's: member may compare it with the schema's, never put it in an error.
func (w *Walker) Object(member func(name string) error) error {
	return w.object(false, member)
}

// Members reads an object as Object does, with the walker inside each member (which
// WalkOptions.Names renders only when it is a schema name).
func (w *Walker) Members(member func(name string) error) error {
	return w.object(true, member)
}

func (w *Walker) object(enter bool, member func(name string) error) error {
	if err := w.expect('{', RuleObject); err != nil {
		return err
	}
	if _, err := w.token(); err != nil {
		return err
	}
	// Members are few: every name the schema does not take ends the walk, and free-form
	// objects (metadata) are bounded by their callers.
	var seen []string
	for {
		switch w.dec.PeekKind() {
		case '}':
			_, err := w.token()
			return err
		case jsontext.KindInvalid:
			return w.syntax(w.dec.SkipValue())
		}
		name, err := w.name()
		if err != nil {
			return err
		}
		if !w.opts.DeepDuplicates {
			for _, k := range seen {
				if k == name {
					return w.Fail(w.opts.Duplicate)
				}
			}
			seen = append(seen, name)
		}
		if enter {
			w.Enter(name)
		}
		if err := member(name); err != nil {
			return err
		}
		if enter {
			w.Leave()
		}
	}
}

// OptMembers reads an object with Members, or null (false).
func (w *Walker) OptMembers(member func(name string) error) (bool, error) {
	if null, err := w.Null(); null || err != nil {
		return false, err
	}
	return true, w.Members(member)
}

// Member reads the value of the member name (of the schema) with read, the walker
// inside it.
func (w *Walker) Member(name string, read func() error) error {
	w.Enter(name)
	if err := read(); err != nil {
		return err
	}
	w.Leave()
	return nil
}

// Array reads an array, calling element for each element with its position, the walker
// inside it; element reads it.
func (w *Walker) Array(element func(i int) error) error {
	if err := w.expect('[', RuleArray); err != nil {
		return err
	}
	if _, err := w.token(); err != nil {
		return err
	}
	for i := 0; ; i++ {
		switch w.dec.PeekKind() {
		case ']':
			_, err := w.token()
			return err
		case jsontext.KindInvalid:
			return w.syntax(w.dec.SkipValue())
		}
		w.EnterIndex(i)
		if err := element(i); err != nil {
			return err
		}
		w.Leave()
	}
}

// Null consumes a null and reports true, or consumes nothing and reports false.
func (w *Walker) Null() (bool, error) {
	if w.dec.PeekKind() != 'n' {
		return false, nil
	}
	_, err := w.token()
	return err == nil, err
}

// Str reads a string.
func (w *Walker) Str() (string, error) {
	if err := w.expect('"', RuleString); err != nil {
		return "", err
	}
	t, err := w.token()
	return t.String(), err
}

// OptStr reads a string, or null (ok false).
func (w *Walker) OptStr() (s string, ok bool, err error) {
	if null, err := w.Null(); null || err != nil {
		return "", false, err
	}
	s, err = w.Str()
	return s, err == nil, err
}

// Bool reads true or false.
func (w *Walker) Bool() (bool, error) {
	if err := w.expect('t', RuleBool); err != nil {
		return false, err
	}
	t, err := w.token()
	return err == nil && t.Bool(), err
}

// OptBool reads a boolean, or null (false).
func (w *Walker) OptBool() (bool, error) {
	if null, err := w.Null(); null || err != nil {
		return false, err
	}
	return w.Bool()
}

// Number reads a number and returns its literal as sent: every digit is kept, so ranges
// are checked on the value sent, and the literal is valid JSON to copy as is.
func (w *Walker) Number() (string, error) {
	if err := w.expect('0', RuleNumber); err != nil {
		return "", err
	}
	t, err := w.token()
	return t.String(), err
}

// OptNumber reads a number, or null (ok false).
func (w *Walker) OptNumber() (n string, ok bool, err error) {
	if null, err := w.Null(); null || err != nil {
		return "", false, err
	}
	n, err = w.Number()
	return n, err == nil, err
}

// Skip consumes the next value.
func (w *Walker) Skip() error {
	if err := w.dec.SkipValue(); err != nil {
		return w.syntax(err)
	}
	return nil
}

// RawObject reads an object whole (a schema, a tool's input), copied out of the body;
// compacted (insignificant whitespace dropped) when compact.
func (w *Walker) RawObject(compact bool) ([]byte, error) {
	if err := w.expect('{', RuleObject); err != nil {
		return nil, err
	}
	v, err := w.dec.ReadValue()
	if err != nil {
		return nil, w.syntax(err)
	}
	v = v.Clone() // v is the decoder's until its next read
	if compact {
		if err := v.Compact(); err != nil {
			return nil, w.syntax(err)
		}
	}
	return v, nil
}

// RawValue reads the next value whole, of any kind: the decoder's bytes, valid until the
// walker's next read (copy them to keep them).
func (w *Walker) RawValue() ([]byte, error) {
	v, err := w.dec.ReadValue()
	if err != nil {
		return nil, w.syntax(err)
	}
	return v, nil
}

// End checks that nothing but whitespace follows the document.
func (w *Walker) End() error {
	if _, err := w.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return Refuse("body", RuleNotJSON)
	}
	return nil
}
