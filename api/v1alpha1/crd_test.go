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

// enumText is how the folded CRD text lists an enum's values, in order.
func enumText[T ~string](values []T) string {
	var b strings.Builder
	for i, v := range values {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("- " + string(v))
	}
	return b.String()
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
		"price regex":                "self.matches('" + priceRegex + "')",
		"price message":              msgPrice,
		"currency regex":             "self.matches('" + currencyRegex + "')",
		"currency message":           msgCurrency,
		"output cap bounds":          "maximum: 1000000 minimum: 1",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the ModelDeployment CRD has no %s %q", what, want)
		}
	}

	budget := crdText(t, "ai.switchboard.dev_budgets.yaml")
	for what, want := range map[string]string{
		"price regex":                 "self.matches('" + priceRegex + "')",
		"price message":               msgPrice,
		"zero price regex":            "!self.cost.matches('" + zeroPriceRegex + "')",
		"cost message":                msgCostPositive,
		"unit message":                msgLimitUnit,
		"time zone regex":             "self.matches('" + timeZoneRegex + "')",
		"time zone message":           msgTimeZone,
		"namespace pattern":           "pattern: " + dnsLabelRegex,
		"ServiceAccount name regex":   "self.name.matches('" + dnsSubdomainRegex + "')",
		"ServiceAccount name message": msgServiceAccountName,
		"namespace required message":  msgSubjectNamespaceRequired,
		"namespace forbidden message": msgSubjectNamespaceForbidden,
		"empty limits message":        msgLimitsEmpty,
		"repeated window message":     msgLimitsRepeat,
		"window enum values":          enumText(BudgetWindows),
		"action enum values":          "- Block - Audit",
		"selector label key message":  msgMatchLabelsKey,
		"selector values required":    msgValuesRequired,
		"limit count bound":           "maxItems: 8",
		"subject count bound":         "maxItems: 64",
		"action default":              "default: Block",
		"Exhausted printer column":    `.status.conditions[?(@.type=="Exhausted")].status`,
		"short name":                  "shortNames: - budget",
		"category":                    "categories: - switchboard",
		"status subresource":          "subresources: status: {}",
		"subject kind enum values":    enumText(BudgetSubjectKinds),
	} {
		// YAML may quote a message and double its apostrophes.
		if !strings.Contains(budget, want) && !strings.Contains(budget, strings.ReplaceAll(want, "'", "''")) {
			t.Errorf("the Budget CRD has no %s %q", what, want)
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
