package anthropic

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// A strict walker over the caller's JSON, for the request decoder (request.go). It reads
// the body once, token by token, with the JSON decoder the protocol package already
// depends on, which refuses invalid UTF-8 and duplicate object keys at any depth — a
// body must not mean one thing here and another to a proxy. It tracks where in the
// Messages schema it is, so every error names the location (messages[0].content[2].
// source.data) with a fixed rule, and never what the caller sent: not a value, and not
// an unknown key either, since a key is caller data too; only keys from our own closed
// lists are ever named.

// segment is one step of a location: an object member (name) or an array element.
type segment struct {
	name  string // a name from the Messages schema, never a caller's key
	index int    // the element's index when name is empty
}

// walker reads one JSON document and knows where it is.
type walker struct {
	dec  *jsontext.Decoder
	path []segment
}

func newWalker(body []byte) *walker {
	return &walker{dec: jsontext.NewDecoder(bytes.NewReader(body))}
}

// where renders the current location: "body" at the top, else the path.
func (w *walker) where() string {
	if len(w.path) == 0 {
		return "body"
	}
	var b strings.Builder
	for i, s := range w.path {
		switch {
		case s.name == "":
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		case i > 0:
			b.WriteByte('.')
			b.WriteString(s.name)
		default:
			b.WriteString(s.name)
		}
	}
	return b.String()
}

// fail is the invalid_request error "<location>: <rule>". rule is a fixed text.
func (w *walker) fail(rule string) *protocol.Error {
	return protocol.NewError(protocol.CodeInvalidRequest, w.where()+": "+rule)
}

// Rules shared by many locations.
const (
	ruleNotJSON      = "not valid JSON"
	ruleObject       = "must be an object"
	ruleArray        = "must be an array"
	ruleString       = "must be a string"
	ruleBool         = "must be a boolean"
	ruleNumber       = "must be a number"
	ruleDuplicate    = "duplicate object key"
	ruleUnknown      = "unknown field"
	ruleRequired     = "required"
	ruleUnsupported  = "not supported by this runtime"
	ruleNonEmpty     = "must not be empty"
	ruleStringOrList = "must be a string or an array of content blocks"
)

// syntax maps an error of the JSON decoder: a duplicate key where it was met, anything
// else as invalid JSON. The decoder's own text (which quotes the input) is dropped.
func (w *walker) syntax(err error) *protocol.Error {
	if errors.Is(err, jsontext.ErrDuplicateName) {
		return w.fail(ruleDuplicate)
	}
	return protocol.NewError(protocol.CodeInvalidRequest, "body: "+ruleNotJSON)
}

// kind peeks at the next value's kind.
func (w *walker) kind() jsontext.Kind { return w.dec.PeekKind() }

// enter and leave move into and out of a member or an element.
func (w *walker) enter(name string) { w.path = append(w.path, segment{name: name}) }
func (w *walker) enterIndex(i int)  { w.path = append(w.path, segment{index: i}) }
func (w *walker) leave()            { w.path = w.path[:len(w.path)-1] }

// object reads an object, calling member for each key with the walker inside it
// (member must consume the value). The key is the caller's: member may compare it with
// known names, never put it in an error.
func (w *walker) object(member func(key string) error) error {
	if w.kind() != '{' {
		if w.kind() == jsontext.KindInvalid {
			return w.syntax(w.dec.SkipValue())
		}
		return w.fail(ruleObject)
	}
	if _, err := w.dec.ReadToken(); err != nil {
		return w.syntax(err)
	}
	for w.kind() != '}' {
		tok, err := w.dec.ReadToken()
		if err != nil {
			return w.syntax(err)
		}
		if err := member(tok.String()); err != nil {
			return err
		}
	}
	if _, err := w.dec.ReadToken(); err != nil {
		return w.syntax(err)
	}
	return nil
}

// member reads the value of a known member name with read, the walker inside it.
func (w *walker) member(name string, read func() error) error {
	w.enter(name)
	if err := read(); err != nil {
		return err
	}
	w.leave()
	return nil
}

// unknown refuses a member that has no mapping. A name of the Messages schema that the
// runtime does not support (supported, from a closed list) is named; any other key is
// not, as it is the caller's text.
func (w *walker) unknown(key string, known []string) error {
	for _, k := range known {
		if k == key {
			w.enter(k)
			return w.fail(ruleUnsupported)
		}
	}
	return w.fail(ruleUnknown)
}

// array reads an array, calling element for each element with the walker inside it.
func (w *walker) array(element func(i int) error) error {
	if w.kind() != '[' {
		if w.kind() == jsontext.KindInvalid {
			return w.syntax(w.dec.SkipValue())
		}
		return w.fail(ruleArray)
	}
	if _, err := w.dec.ReadToken(); err != nil {
		return w.syntax(err)
	}
	for i := 0; w.kind() != ']'; i++ {
		w.enterIndex(i)
		if err := element(i); err != nil {
			return err
		}
		w.leave()
	}
	if _, err := w.dec.ReadToken(); err != nil {
		return w.syntax(err)
	}
	return nil
}

// null consumes a null and reports true, or consumes nothing and reports false: an
// optional member sent as null is absent, as Anthropic's API treats it.
func (w *walker) null() (bool, error) {
	if w.kind() != 'n' {
		return false, nil
	}
	_, err := w.dec.ReadToken()
	if err != nil {
		return false, w.syntax(err)
	}
	return true, nil
}

// str reads a string.
func (w *walker) str() (string, error) {
	if w.kind() != '"' {
		if w.kind() == jsontext.KindInvalid {
			return "", w.syntax(w.dec.SkipValue())
		}
		return "", w.fail(ruleString)
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return "", w.syntax(err)
	}
	return tok.String(), nil
}

// boolean reads true or false.
func (w *walker) boolean() (bool, error) {
	switch w.kind() {
	case 't', 'f':
		tok, err := w.dec.ReadToken()
		if err != nil {
			return false, w.syntax(err)
		}
		return tok.Bool(), nil
	case jsontext.KindInvalid:
		return false, w.syntax(w.dec.SkipValue())
	}
	return false, w.fail(ruleBool)
}

// number reads a number and returns its literal as sent (valid JSON, so a caller may
// copy it into the native request as is).
func (w *walker) number() (string, error) {
	if w.kind() != '0' {
		if w.kind() == jsontext.KindInvalid {
			return "", w.syntax(w.dec.SkipValue())
		}
		return "", w.fail(ruleNumber)
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return "", w.syntax(err)
	}
	return tok.String(), nil
}

// skip consumes the next value.
func (w *walker) skip() error {
	if err := w.dec.SkipValue(); err != nil {
		return w.syntax(err)
	}
	return nil
}

// rawObject reads an object whole, compacted (insignificant whitespace dropped).
func (w *walker) rawObject() ([]byte, error) {
	if w.kind() != '{' {
		if w.kind() == jsontext.KindInvalid {
			return nil, w.syntax(w.dec.SkipValue())
		}
		return nil, w.fail(ruleObject)
	}
	v, err := w.dec.ReadValue()
	if err != nil {
		return nil, w.syntax(err)
	}
	v = v.Clone()
	if err := v.Compact(); err != nil {
		return nil, w.syntax(err)
	}
	return v, nil
}

// end checks that nothing but whitespace follows the document.
func (w *walker) end() error {
	if _, err := w.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return protocol.NewError(protocol.CodeInvalidRequest, "body: "+ruleNotJSON)
	}
	return nil
}
