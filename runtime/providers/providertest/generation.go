package providertest

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// GenerationCase is one request with generation options (spec/http-api.md, "Generation
// options") and what the adapter must make of it: the members of the body it sends, or
// its refusal.
type GenerationCase struct {
	// Name describes the case in failures.
	Name string
	// Extensions are the request's extension members, without braces.
	Extensions string
	// Tool adds a tool part named get_weather to the request.
	Tool bool
	// Caps are the deployment's capabilities; zero means TextJSON (plus tools with Tool).
	Caps routing.CapSet
	// Provider, when set, replaces the deployment's provider (an adapter serving several).
	Provider string
	// Parameters are the deployment's spec.allowedParameters.
	Parameters []string
	// MaxOutputTokens is the deployment's output cap (spec.limits.maxOutputTokens); 0
	// for none.
	MaxOutputTokens int64
	// Want is a JSON object: each of its members must be in the body sent, with exactly
	// this value (compact, in the adapter's member order). Absent lists members the body
	// must not have.
	Want   string
	Absent []string
	// Refused is the code of the expected refusal (nothing is sent); Message, when set,
	// its exact message.
	Refused protocol.Code
	Message string
}

// Request is the case's request body.
func (c GenerationCase) Request() string {
	input := `{"type":"text","text":"Hello"}`
	if c.Tool {
		input += `,{"type":"tool","name":"get_weather","parameters":{"type":"object"}}`
	}
	return `{"ability":"chat","input":[` + input + `],"extensions":{` + c.Extensions + `}}`
}

// CheckGeneration runs each case through s: a refused case is refused by CanEncode with
// the expected code (and message) and sends nothing; any other is sent, and the body
// holds every member of Want exactly and none of Absent.
func CheckGeneration(t *testing.T, s Subject, cases []GenerationCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			caps := c.Caps
			if caps == 0 {
				caps = TextJSON
				if c.Tool {
					caps |= routing.CapsOf(protocol.CapTools)
				}
			}
			req := decode(t, c.Request())
			u := NewUpstream(t)
			d := s.deployment(u, caps, c.Parameters)
			if c.Provider != "" {
				d.Provider = c.Provider
			}
			d.MaxOutputTokens = c.MaxOutputTokens
			refusal := s.CanEncode(req, d)
			_ = s.Execute(t, u, d, req)
			reqs := u.Requests()
			if c.Refused != "" {
				if refusal == nil || refusal.Code != c.Refused || (c.Message != "" && refusal.Message != c.Message) {
					t.Fatalf("CanEncode = %v, want %s %q", refusal, c.Refused, c.Message)
				}
				if len(reqs) != 0 {
					t.Fatalf("a refused request was sent %d times", len(reqs))
				}
				return
			}
			if refusal != nil || len(reqs) != 1 {
				t.Fatalf("CanEncode = %v and %d requests sent, want the request sent once", refusal, len(reqs))
			}
			checkMembers(t, reqs[0].Body, c.Want, c.Absent)
		})
	}
}

// checkMembers checks that body holds want's members with the same compact values, and
// none of absent.
func checkMembers(t *testing.T, body []byte, want string, absent []string) {
	t.Helper()
	var got, expected map[string]json.RawMessage
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("the body sent is not a JSON object: %v", err)
	}
	if err := json.Unmarshal([]byte(want), &expected); err != nil {
		t.Fatalf("Want is not a JSON object: %v", err)
	}
	for name, v := range expected {
		g, ok := got[name]
		if !ok {
			t.Errorf("the body has no %q member; it is %s", name, body)
			continue
		}
		if a, b := compact(t, g), compact(t, v); !bytes.Equal(a, b) {
			t.Errorf("member %q:\n got %s\nwant %s", name, a, b)
		}
	}
	for _, name := range absent {
		if v, ok := got[name]; ok {
			t.Errorf("the body has a %q member (%s), want none", name, v)
		}
	}
}

func compact(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
