package engine_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
)

// TestEmitterIsTyped: adapters record events through one method per event type they
// may emit, each taking that type's data; there is no untyped path that takes any value
// and checks it at run time.
func TestEmitterIsTyped(t *testing.T) {
	want := []string{"Progress", "RemoteJob", "Result", "Text", "ToolArgs", "ToolStarted", "Usage"}
	typ := reflect.TypeFor[engine.Emitter]()
	var got []string
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		got = append(got, m.Name)
		for j := range m.Type.NumIn() {
			if in := m.Type.In(j); in.Kind() == reflect.Interface {
				t.Errorf("Emitter.%s takes %s, an interface", m.Name, in)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Emitter methods %v, want %v", got, want)
	}
}
