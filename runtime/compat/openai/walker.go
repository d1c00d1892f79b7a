package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The OpenAI request decoders read a body in one pass with a walker: token by token,
// strictly (a repeated key, a value of the wrong type and a field the door does not take
// are refused), keeping the location it is at so that every refusal names the OpenAI
// schema location it violated, as OpenAI's own param does: "messages[2].content[0].type".
//
// A location never holds caller content: array positions are counted by the walker, and
// a member name is written into it only when it is a name of OpenAI's request schema
// (schemaNames). A member the schema does not know is refused at its parent's location:
// "messages[2]: unknown field", never with its name, which the caller chose.

// fieldError is a refused request: a portable invalid_request error whose message starts
// with the location, and the location again as OpenAI's param. It unwraps to the
// portable error, so the server classifies it like any other.
type fieldError struct {
	param string
	err   *protocol.Error
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// refuse is the fieldError for location param violating rule, a fixed text.
func refuse(param, rule string) *fieldError {
	return &fieldError{param: param, err: protocol.NewError(protocol.CodeInvalidRequest, param+": "+rule)}
}

// withParam serves h, answering a refusal of its request with the refused location as
// the error's param, which OpenAI's SDKs expose; the server answers any other error.
func withParam(h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		err := h(w, r)
		var fe *fieldError
		if errors.As(err, &fe) {
			_, _ = w.Write(errorResponse(w, http.StatusBadRequest, fe.err, &fe.param))
			return nil
		}
		return err
	}
}

// errNotJSON refuses a body that is not one JSON document.
var errNotJSON = refuse("body", "not valid JSON")

// segment is one step of a location: a member name, or an array position (index ≥ 0).
type segment struct {
	key   string
	index int
}

// walker reads one JSON document with the tokenizer of encoding/json/v2 (jsontext),
// which reads strings in place and allocates little, and refuses invalid UTF-8. Tokens
// are handed out as encoding/json's: json.Delim, string, json.Number (so that integers
// keep every digit and ranges are checked on the literal's value), bool, and nil for
// null.
type walker struct {
	dec  *jsontext.Decoder
	path []segment
	// names are the member names the schema has (rendered in locations), each mapped
	// to itself.
	names map[string]string
}

func newWalker(body []byte, names map[string]string) *walker {
	// A bytes.Buffer is parsed in place; repeated names are the walker's to refuse,
	// with a message of its own.
	dec := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true))
	return &walker{dec: dec, path: make([]segment, 0, 8), names: names}
}

// loc renders the current location; "body" at the top. It stops before the first member
// name the schema does not know.
func (w *walker) loc() string {
	var b strings.Builder
	for _, s := range w.path {
		if s.index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
			continue
		}
		if _, known := w.names[s.key]; !known {
			break
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.key)
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

// fail refuses the current location with rule.
func (w *walker) fail(rule string) error { return refuse(w.loc(), rule) }

// failAt refuses the location of the current one's member key (a schema name).
func (w *walker) failAt(key, rule string) error {
	w.push(key)
	defer w.pop()
	return w.fail(rule)
}

// unknown refuses the member the walker is in: a name of OpenAI's schema the door does
// not take is named (loc renders it), any other is refused at its parent's location.
func (w *walker) unknown() error {
	if _, known := w.names[w.path[len(w.path)-1].key]; known {
		return w.fail("not supported by this front door")
	}
	return w.fail("unknown field")
}

func (w *walker) push(key string) { w.path = append(w.path, segment{key: key, index: -1}) }
func (w *walker) pushIndex(i int) { w.path = append(w.path, segment{index: i}) }
func (w *walker) pop()            { w.path = w.path[:len(w.path)-1] }

// token reads the next token: a json.Delim, string, json.Number, bool, or nil for null.
func (w *walker) token() (json.Token, error) {
	t, err := w.dec.ReadToken()
	if err != nil {
		return nil, errNotJSON
	}
	switch k := t.Kind(); k {
	case '{', '}', '[', ']':
		return json.Delim(k), nil
	case '"':
		return t.String(), nil
	case '0':
		return json.Number(t.String()), nil
	case 't', 'f':
		return t.Bool(), nil
	}
	return nil, nil // null
}

// name reads an object member's name: the schema's own string when it is one of its
// names, so that reading a request's names allocates nothing.
func (w *walker) name() (string, error) {
	v, err := w.dec.ReadValue() // a name is a string value; the decoder checks that
	if err != nil || v.Kind() != '"' {
		return "", errNotJSON
	}
	if bytes.IndexByte(v, '\\') < 0 {
		inner := v[1 : len(v)-1]
		if k, ok := w.names[string(inner)]; ok {
			return k, nil
		}
		return string(inner), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", errNotJSON
	}
	return s, nil
}

// more reports whether the object or array being read has another member or element.
// After an error it reports false, and the next token returns the error.
func (w *walker) more() bool {
	k := w.dec.PeekKind()
	return k != '}' && k != ']' && k != jsontext.KindInvalid
}

// end checks that nothing follows the document.
func (w *walker) end() error {
	if _, err := w.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return errNotJSON
	}
	return nil
}

// object reads the members of an object whose first token, already read, is tok: for
// each it calls member with the name, the walker's location inside the member; member
// reads the value. A repeated name is refused, without the name.
func (w *walker) object(tok json.Token, member func(key string) error) error {
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return w.fail("must be an object")
	}
	// Members are few: every name the schema does not take ends the walk, and free-form
	// objects (metadata) are bounded by their callers.
	var seen []string
	for w.more() {
		key, err := w.name()
		if err != nil {
			return err
		}
		for _, k := range seen {
			if k == key {
				return w.fail("repeats a member")
			}
		}
		seen = append(seen, key)
		w.push(key)
		err = member(key)
		w.pop()
		if err != nil {
			return err
		}
	}
	_, err := w.token() // '}'
	return err
}

// array reads the elements of an array whose first token, already read, is tok, calling
// elem for each with its position, the walker's location at the element; elem reads it.
func (w *walker) array(tok json.Token, elem func(i int) error) error {
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return w.fail("must be an array")
	}
	for i := 0; w.more(); i++ {
		w.pushIndex(i)
		err := elem(i)
		w.pop()
		if err != nil {
			return err
		}
	}
	_, err := w.token() // ']'
	return err
}

// isArray reports whether tok opens an array.
func isArray(tok json.Token) bool { d, ok := tok.(json.Delim); return ok && d == '[' }

// read reads the next token, which must be of kind (or null, when nullable).
func (w *walker) read(kind jsontext.Kind, nullable bool, rule string) (t jsontext.Token, null bool, err error) {
	t, err = w.dec.ReadToken()
	if err != nil {
		return t, false, errNotJSON
	}
	switch k := t.Kind(); {
	case k == kind, kind == 't' && k == 'f':
		return t, false, nil
	case k == 'n' && nullable:
		return t, true, nil
	}
	return t, false, w.fail(rule)
}

// str reads a string.
func (w *walker) str() (string, error) {
	t, _, err := w.read('"', false, "must be a string")
	if err != nil {
		return "", err
	}
	return t.String(), nil
}

// optStr reads a string or null (ok false).
func (w *walker) optStr() (s string, ok bool, err error) {
	t, null, err := w.read('"', true, "must be a string")
	if err != nil || null {
		return "", false, err
	}
	return t.String(), true, nil
}

// optBool reads a boolean, or null (false).
func (w *walker) optBool() (bool, error) {
	t, null, err := w.read('t', true, "must be a boolean")
	if err != nil || null {
		return false, err
	}
	return t.Bool(), nil
}

// optNumber reads a number or null (ok false).
func (w *walker) optNumber() (n json.Number, ok bool, err error) {
	t, null, err := w.read('0', true, "must be a number")
	if err != nil || null {
		return "", false, err
	}
	return json.Number(t.String()), true, nil
}

// optObject reads an object with member, or null (false).
func (w *walker) optObject(member func(key string) error) (bool, error) {
	t, err := w.token()
	if err != nil || t == nil {
		return false, err
	}
	return true, w.object(t, member)
}

// rawObject reads a JSON object whole (a schema), or null (nil).
func (w *walker) rawObject() (json.RawMessage, error) {
	v, err := w.dec.ReadValue()
	if err != nil {
		return nil, errNotJSON
	}
	switch v.Kind() {
	case 'n':
		return nil, nil
	case '{':
		return append(json.RawMessage(nil), v...), nil // v is the decoder's until its next read
	}
	return nil, w.fail("must be an object")
}
