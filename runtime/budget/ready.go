package budget

import "github.com/switchboard-dev/switchboard/runtime/routing"

// Reasons a Budget cannot count a deployment it governs (spec/budgets.md, "Fail
// closed"): the deployment is then taken out of routing for the Budget's subjects, and
// the Budget is Ready=False with the reason.
const (
	ReasonInvalidSpec      = "InvalidSpec"
	ReasonNoPricing        = "NoPricing"
	ReasonNoOutputCap      = "NoOutputCap"
	ReasonCurrencyMismatch = "CurrencyMismatch"
)

// Check returns why b cannot count d, or "" when it can: b is Invalid, a cost limit over a
// deployment without prices (NoPricing), a cost or token limit over one without an
// output cap (NoOutputCap), or a cost limit over deployments priced in more than one
// currency (CurrencyMismatch), as currency reports, the Budget's currency over every
// deployment it governs (see Currency).
func Check(b *Budget, d *routing.Deployment, currency string) string {
	switch {
	case b.Invalid:
		return ReasonInvalidSpec
	case b.NeedsPricing() && d.Pricing == nil:
		return ReasonNoPricing
	case b.NeedsOutputCap() && d.MaxOutputTokens <= 0:
		return ReasonNoOutputCap
	case b.NeedsPricing() && currency == mixedCurrencies:
		return ReasonCurrencyMismatch
	}
	return ""
}

// mixedCurrencies is Currency's answer for a Budget that governs deployments priced in
// more than one currency.
const mixedCurrencies = "*"

// Currency returns the one currency of the priced deployments b governs in t, "" when
// none is priced, and "*" when they use more than one.
func Currency(b *Budget, t *routing.Table) string {
	cur := ""
	for _, d := range t.Deployments() {
		if d.Pricing == nil || !b.Governs(d) {
			continue
		}
		switch {
		case cur == "":
			cur = d.Pricing.Currency
		case cur != d.Pricing.Currency:
			return mixedCurrencies
		}
	}
	return cur
}

// governance is the currency of every Budget of one set over one table, computed once
// per pair: tables and sets change rarely, admissions often.
type governance struct {
	table    *routing.Table
	set      *Set
	currency map[*Budget]string
}

// Readiness returns why b cannot count d in the current table (Check), or "".
func (e *Enforcer) Readiness(b *Budget, d *routing.Deployment) string {
	if !b.NeedsPricing() {
		return Check(b, d, "")
	}
	t, set := e.table.Load(), e.budgets.Load()
	e.governedMu.Lock()
	g := e.governed
	if g == nil || g.table != t || g.set != set {
		g = &governance{table: t, set: set, currency: map[*Budget]string{}}
		e.governed = g
	}
	cur, ok := g.currency[b]
	if !ok {
		cur = Currency(b, t)
		g.currency[b] = cur
	}
	e.governedMu.Unlock()
	return Check(b, d, cur)
}
