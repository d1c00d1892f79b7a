package providerhttp

import (
	"bytes"
	"encoding/json"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Marshal encodes an adapter's request body. Only raw JSON from the request (a json
// part, tool parameters) can fail to encode, and DecodeRequest lets none through that is
// not JSON; a failure is a refusal before anything was sent (engine.NotSent), so the
// engine tries the next candidate.
func Marshal(body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, engine.NotSent(protocol.NewError(protocol.CodeInvalidRequest, "the request could not be encoded for the provider"))
	}
	return b, nil
}

// DecodeChunk decodes one unit of a provider's stream — an SSE data field, an
// event-stream payload — into v, under encoding/json's rules: member names matched
// without regard to case, the last of a repeated member winning, unknown members ignored,
// invalid UTF-8 in a string replaced by U+FFFD (so every event stays valid UTF-8), and
// fields of v that data lacks kept as they were (reset v before reusing it).
//
// A stream has a unit per token, so this is the hottest decoding of an execution. It
// uses the v1 API of github.com/go-json-experiment/json — encoding/json's rules on the
// encoding/json/v2 engine, the mirror of what the standard library becomes in Go 1.27 —
// which decodes a typical chat chunk in about half the time of encoding/json and
// without allocating (BenchmarkDecodeChunk; spec/performance.md).
func DecodeChunk(data []byte, v any) error {
	return jsonv1.Unmarshal(data, v)
}

// CompactJSON removes the insignificant whitespace of validated JSON — a json part's
// value, a tool's parameters — so that the same value always reads the same to a model.
// Empty input gives nil; input that is not JSON (which DecodeRequest never admits) is
// returned as it is.
func CompactJSON(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// PartText is the text a part gives a model as text: a text part's text, a json part's
// value as compact JSON text.
func PartText(p *protocol.Part) string {
	if p.Type == protocol.PartJSON {
		return string(CompactJSON(p.JSON))
	}
	return p.Text
}

// ObjectText is a tool call's input received as a JSON object, as compact JSON text for
// the protocol's arguments: an absent or unreadable input is "{}", what a stream that
// sent no fragments amounts to.
func ObjectText(raw json.RawMessage) string {
	var buf bytes.Buffer
	if len(bytes.TrimSpace(raw)) == 0 || json.Compact(&buf, raw) != nil {
		return "{}"
	}
	return buf.String()
}

// AppendTurn adds item to the last of turns when that turn has role, else starts a turn
// of role with it: the APIs that take a conversation as turns (Anthropic's messages,
// Bedrock's Converse messages, Gemini's contents) take consecutive parts of one role as
// one turn. fields gives a turn's role and items, to read and to set.
func AppendTurn[T, I any](turns []T, role string, item I, fields func(*T) (*string, *[]I)) []T {
	if n := len(turns); n > 0 {
		if r, items := fields(&turns[n-1]); *r == role {
			*items = append(*items, item)
			return turns
		}
	}
	var t T
	r, items := fields(&t)
	*r, *items = role, []I{item}
	return append(turns, t)
}
