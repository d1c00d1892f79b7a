//go:build !race

package protocol

import "testing"

// Allocation counts of the folds' decoding and the engine's encoding of the events every
// execution records: a regression guard that counts instead of timing. The race
// detector changes the counts (it drops sync.Pool entries at random, and json.Valid
// takes its scanner from a pool), so this file is built only without it, and `make test`
// runs these tests in a run of their own without -race.

// TestDecodeDeltaAllocations: the engine's form of output.delta decodes without an
// allocation.
func TestDecodeDeltaAllocations(t *testing.T) {
	data := []byte(`{"index":0,"type":"text","text":"a few words of a streamed answer"}`)
	n := testing.AllocsPerRun(100, func() {
		if _, err := DecodeDelta(data); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// TestDecodeUsageAllocations: the usage the engine writes decodes with the allocations
// of its list only, the units and sources being the constants (6 before they were).
func TestDecodeUsageAllocations(t *testing.T) {
	data := []byte(`{"usage":[{"unit":"input_tokens","quantity":12,"source":"provider"},{"unit":"output_tokens","quantity":3,"source":"provider"}]}`)
	var d UsageReportedData
	n := testing.AllocsPerRun(100, func() {
		d = UsageReportedData{}
		if err := UnmarshalData(data, &d); err != nil {
			t.Fatal(err)
		}
	})
	if len(d.Usage) != 2 || d.Usage[1].Unit != UnitOutputTokens || d.Usage[1].Source != SourceProvider {
		t.Fatalf("decoded %+v", d)
	}
	if n > 2 {
		t.Errorf("%v allocations, want at most 2 (the list growing)", n)
	}
}

// TestAppendDeltaAllocations: encoding a delta into a large enough buffer allocates
// nothing.
func TestAppendDeltaAllocations(t *testing.T) {
	d := OutputDeltaData{Type: "text", Text: "a few words of a streamed answer"}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { buf = AppendDelta(buf[:0], d) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
