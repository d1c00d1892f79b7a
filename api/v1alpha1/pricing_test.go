package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The edges of the price syntax, through the Go validator (the envtest tables in
// controllers/ hold the same rule against the API server).
func TestPriceSyntax(t *testing.T) {
	for _, v := range []Price{"0", "0.0", "0.5", "2.50", "3.125", "40000", "0.000001", "999999999999.999999"} {
		if errs := v.validate(field.NewPath("p")); len(errs) > 0 {
			t.Errorf("%q refused: %v", v, errs.ToAggregate())
		}
	}
	for _, v := range []Price{"", ".5", "5.", "00", "01", "1..0", "+1", "-0", " 1", "1 ", "1e3", "1E3", "0x10",
		"1,5", "0.1234567", "1000000000000", "NaN", "Infinity", "٣"} {
		errs := v.validate(field.NewPath("p"))
		if len(errs) != 1 || !strings.Contains(errs.ToAggregate().Error(), msgPrice) {
			t.Errorf("%q: errors %v, want one with %q", v, errs.ToAggregate(), msgPrice)
		}
	}
}

// A zero cost limit is refused; a zero price on a deployment is a free model.
func TestZeroCostLimit(t *testing.T) {
	for _, v := range []Price{"0", "0.0", "0.000000"} {
		b := BudgetSpec{Limits: []BudgetLimit{{Window: BudgetWindowDay, Cost: &v}}}
		if err := b.Validate(); err == nil || !strings.Contains(err.Error(), msgCostPositive) {
			t.Errorf("cost %q: error %v, want %q", v, err, msgCostPositive)
		}
		md := ModelDeploymentSpec{Provider: ProviderOpenAI, Model: "m", Abilities: []AbilityName{"chat"},
			Credentials: &Credentials{SecretRef: SecretKeyReference{Name: "s", Key: "k"}},
			Pricing:     &Pricing{Currency: "USD", InputTokens: v, OutputTokens: v}}
		if err := md.Validate(); err != nil {
			t.Errorf("pricing %q refused: %v", v, err)
		}
	}
}
