package v1alpha1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Go validator mirrors the CRD's CEL rules. Where both hold the same list or regular
// expression, this test reads the generated CRD and checks that the text is the same, so
// one cannot change without the other.

func crdText(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", name))
	if err != nil {
		t.Fatal(err)
	}
	// YAML folds long scalars at spaces; undo it.
	return strings.Join(strings.Fields(string(data)), " ")
}

func TestCRDRulesMatchTheGoValidator(t *testing.T) {
	md := crdText(t, "ai.switchboard.dev_modeldeployments.yaml")
	quoted := make([]string, len(ReservedParameters))
	for i, n := range ReservedParameters {
		quoted[i] = "'" + n + "'"
	}
	for what, want := range map[string]string{
		"reserved parameter list":    "x.lowerAscii() in [" + strings.Join(quoted, ", ") + "]",
		"reserved parameter message": msgReservedParameter,
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the ModelDeployment CRD has no %s %q", what, want)
		}
	}

	cp := crdText(t, "ai.switchboard.dev_capabilitypolicies.yaml")
	for what, want := range map[string]string{
		"label key regex":      "'" + labelKeyRegex + "'",
		"label value regex":    "'" + labelValueRegex + "'",
		"label key message":    msgLabelKey,
		"label value message":  msgLabelValue,
		"matchLabels message":  msgMatchLabelsKey,
		"values required":      msgValuesRequired,
		"values forbidden":     msgValuesForbidden,
		"operator enum values": "- In - NotIn - Exists - DoesNotExist",
	} {
		// YAML may quote a message and double its apostrophes.
		if !strings.Contains(cp, want) && !strings.Contains(cp, strings.ReplaceAll(want, "'", "''")) {
			t.Errorf("the CapabilityPolicy CRD has no %s %q", what, want)
		}
	}
}

func TestAsLabelSelector(t *testing.T) {
	var nilSel *LabelSelector
	if nilSel.AsLabelSelector() != nil {
		t.Error("nil selector converted to non-nil")
	}
	s := &LabelSelector{
		MatchLabels:      map[string]LabelValue{"tier": "standard"},
		MatchExpressions: []LabelSelectorRequirement{{Key: "stage", Operator: LabelSelectorOpNotIn, Values: []LabelValue{"canary"}}},
	}
	got := s.AsLabelSelector()
	if got.MatchLabels["tier"] != "standard" || len(got.MatchExpressions) != 1 ||
		got.MatchExpressions[0].Key != "stage" || got.MatchExpressions[0].Operator != "NotIn" ||
		got.MatchExpressions[0].Values[0] != "canary" {
		t.Errorf("AsLabelSelector = %+v", got)
	}
}
