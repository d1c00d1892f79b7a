package compat

import (
	"errors"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// walkItems reads {"items":[{"name":s,"flag":b,"n":x,"raw":{...}}]} with the walker,
// refusing any other member with Unknown.
func walkItems(w *Walker) error {
	err := w.Members(func(key string) error {
		if key != "items" {
			return w.Unknown()
		}
		return w.Array(func(int) error {
			return w.Members(func(key string) error {
				var err error
				switch key {
				case "name":
					_, err = w.Str()
				case "flag":
					_, err = w.OptBool()
				case "n":
					_, _, err = w.OptNumber()
				case "raw":
					_, err = w.RawObject(false)
				default:
					err = w.Unknown()
				}
				return err
			})
		})
	})
	if err == nil {
		err = w.End()
	}
	return err
}

func TestWalkerRefusals(t *testing.T) {
	const secret = "SECRET"
	names := map[string]string{"items": "items", "name": "name", "flag": "flag", "n": "n", "raw": "raw", "other": "other"}
	shallow := &WalkOptions{Names: names, Duplicate: "repeats a member", Unsupported: "not supported"}
	deep := &WalkOptions{Names: names, Duplicate: "repeats a member", DeepDuplicates: true, Unsupported: "not supported"}
	for _, tc := range []struct {
		name, body string
		opts       *WalkOptions
		loc, rule  string // loc "" when the body is accepted
	}{
		{"accepted", `{"items":[{"name":"a","flag":null,"n":1.5,"raw":{"a":1,"a":2}}]}`, shallow, "", ""},
		{"wrong type", `{"items":[{"name":"a"},{"name":1}]}`, shallow, "items[1].name", RuleString},
		{"not an array", `{"items":{}}`, shallow, "items", RuleArray},
		{"a number", `{"items":[{"n":"` + secret + `"}]}`, shallow, "items[0].n", RuleNumber},
		{"a boolean", `{"items":[{"flag":0}]}`, shallow, "items[0].flag", RuleBool},
		{"raw object", `{"items":[{"raw":[]}]}`, shallow, "items[0].raw", RuleObject},
		{"schema name", `{"other":1}`, shallow, "other", "not supported"},
		{"caller's name", `{"items":[{"` + secret + `":1}]}`, shallow, "items[0]", RuleUnknown},
		{"repeat", `{"items":[{"name":"a","name":"` + secret + `"}]}`, shallow, "items[0]", "repeats a member"},
		{"deep repeat", `{"items":[{"raw":{"a":1,"a":2}}]}`, deep, "items[0].raw", "repeats a member"},
		{"not JSON", `{"items":[` + secret, shallow, "body", RuleNotJSON},
		{"trailing", `{"items":[]} {}`, shallow, "body", RuleNotJSON},
		{"invalid UTF-8", "{\"items\":[{\"name\":\"\xff\"}]}", shallow, "body", RuleNotJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := walkItems(NewWalker([]byte(tc.body), tc.opts))
			if tc.loc == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *Refusal
			if !errors.As(err, &re) {
				t.Fatalf("error %v, want a refusal", err)
			}
			if re.Loc != tc.loc || re.Err.Message != tc.loc+": "+tc.rule || re.Err.Code != protocol.CodeInvalidRequest {
				t.Errorf("refusal %q at %q, want %q", re.Err.Message, re.Loc, tc.loc+": "+tc.rule)
			}
		})
	}
}

func TestWalkerLocWithoutNames(t *testing.T) {
	w := NewWalker([]byte(`{}`), &WalkOptions{})
	w.EnterIndex(2)
	w.Enter("content")
	w.EnterIndex(0)
	w.Enter("type")
	if got := w.Loc(); got != "[2].content[0].type" {
		t.Errorf("Loc %q", got)
	}
	w.Top()
	if got := w.Loc(); got != "body" {
		t.Errorf("Loc at the top %q", got)
	}
}

func TestWalkerRawValue(t *testing.T) {
	w := NewWalker([]byte(`{"a": [1, {"b": null}], "c": "x"}`), &WalkOptions{Duplicate: "repeats a member"})
	var got []string
	if err := w.Object(func(string) error {
		v, err := w.RawValue()
		got = append(got, string(v))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != `[1, {"b": null}]` || got[1] != `"x"` {
		t.Errorf("values %q", got)
	}
}
