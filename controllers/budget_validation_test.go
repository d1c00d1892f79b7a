package controllers

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-dev/switchboard/api/v1alpha1"
)

// Budgets and ModelDeployment pricing: every rule refuses a bad manifest with its human
// message on the named field, and the contract's examples are accepted. As in
// validation_test.go, one table runs against the API server (envtest), the Go validator
// and the standalone manifest loader, which must reach the same verdict.

// Messages the API server and the Go validator share (api/v1alpha1).
const (
	msgPrice    = "must be a decimal number such as 2.50: no sign, exponent or leading zeros, at most 12 digits before the point and at most 6 after it (money is counted in micro-units)"
	msgCurrency = "currency must be an ISO 4217 code of three upper-case letters, such as USD or EUR"
)

type budgetCase struct {
	opts    []budgetOption
	field   string // the path the error names; "" = not checked
	message string // "" = valid
}

// limit is a Budget limit for the table: window, then cost, tokens and requests where
// given (cost "" and 0 mean absent).
func limit(window v1alpha1.BudgetWindow, cost v1alpha1.Price, tokens, requests int64) v1alpha1.BudgetLimit {
	l := v1alpha1.BudgetLimit{Window: window}
	if cost != "" {
		l.Cost = &cost
	}
	if tokens != 0 {
		l.Tokens = &tokens
	}
	if requests != 0 {
		l.Requests = &requests
	}
	return l
}

func costLimit(cost v1alpha1.Price) budgetOption {
	return withBudgetLimits(limit(v1alpha1.BudgetWindowDay, cost, 0, 0))
}

func nLimits(n int) budgetOption {
	return func(b *v1alpha1.Budget) {
		b.Spec.Limits = nil
		for i := range n {
			b.Spec.Limits = append(b.Spec.Limits, v1alpha1.BudgetLimit{Window: v1alpha1.BudgetWindowDay,
				TimeZone: []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Etc/GMT+1",
					"America/Argentina/Buenos_Aires", "Australia/Sydney", "Africa/Nairobi", "Europe/Paris"}[i],
				Requests: ptr[int64](100)})
		}
	}
}

var budgetCases = []TableEntry{
	Entry("the contract's example", budgetCase{opts: []budgetOption{contractBudget()}}),
	Entry("a minimal Budget: 600 requests a minute for everyone", budgetCase{}),
	Entry("every window, audited, per subject", budgetCase{opts: []budgetOption{func(b *v1alpha1.Budget) {
		b.Spec.Action, b.Spec.PerSubject = v1alpha1.BudgetActionAudit, true
		b.Spec.Limits = []v1alpha1.BudgetLimit{limit("Minute", "", 0, 10), limit("Hour", "0.000001", 0, 0),
			limit("Day", "999999999999.999999", 1, 1), limit("Week", "", 5000, 0), limit("Month", "12", 0, 0)}
	}}}),
	Entry("one window in two time zones", budgetCase{opts: []budgetOption{func(b *v1alpha1.Budget) {
		berlin := limit("Day", "10", 0, 0)
		berlin.TimeZone = "Europe/Berlin"
		b.Spec.Limits = []v1alpha1.BudgetLimit{limit("Day", "10", 0, 0), berlin}
	}}}),
	Entry("8 limits", budgetCase{opts: []budgetOption{nLimits(8)}}),

	// Decimal prices.
	Entry("a cost with two points", budgetCase{opts: []budgetOption{costLimit("2.5.0")},
		field: "spec.limits[0].cost", message: msgPrice}),
	Entry("a negative cost", budgetCase{opts: []budgetOption{costLimit("-1")},
		field: "spec.limits[0].cost", message: msgPrice}),
	Entry("a cost with an exponent", budgetCase{opts: []budgetOption{costLimit("1e3")},
		field: "spec.limits[0].cost", message: msgPrice}),
	Entry("a cost with 7 decimals", budgetCase{opts: []budgetOption{costLimit("0.1234567")},
		field: "spec.limits[0].cost", message: msgPrice}),
	Entry("a cost with a leading zero", budgetCase{opts: []budgetOption{costLimit("01.5")},
		field: "spec.limits[0].cost", message: msgPrice}),
	Entry("a cost with 13 digits", budgetCase{opts: []budgetOption{costLimit("1000000000000")},
		field: "spec.limits[0].cost", message: msgPrice}),
	Entry("a zero cost", budgetCase{opts: []budgetOption{costLimit("0")},
		field: "spec.limits[0]", message: "cost must be greater than 0"}),
	Entry("a zero cost with decimals", budgetCase{opts: []budgetOption{costLimit("0.000000")},
		field: "spec.limits[0]", message: "cost must be greater than 0"}),

	// Limits.
	Entry("a limit with no unit", budgetCase{opts: []budgetOption{withBudgetLimits(limit("Hour", "", 0, 0))},
		field: "spec.limits[0]", message: "a limit needs at least one of cost, tokens or requests"}),
	Entry("tokens 0", budgetCase{opts: []budgetOption{withBudgetLimits(v1alpha1.BudgetLimit{Window: "Hour", Tokens: ptr[int64](0)})},
		field: "spec.limits[0].tokens", message: "should be greater than or equal to 1"}),
	Entry("requests -1", budgetCase{opts: []budgetOption{withBudgetLimits(limit("Hour", "", 0, -1))},
		field: "spec.limits[0].requests", message: "should be greater than or equal to 1"}),
	Entry("an unknown window", budgetCase{opts: []budgetOption{withBudgetLimits(limit("Year", "", 0, 1))},
		field:   "spec.limits[0].window",
		message: `Unsupported value: "Year": supported values: "Minute", "Hour", "Day", "Week", "Month"`}),
	Entry("a time zone that is not a zone name", budgetCase{opts: []budgetOption{func(b *v1alpha1.Budget) {
		b.Spec.Limits[0].TimeZone = "Europe Berlin"
	}}, field: "spec.limits[0].timeZone", message: "timeZone must be an IANA time zone name such as UTC or Europe/Berlin"}),
	Entry("no limits", budgetCase{opts: []budgetOption{nLimits(0)},
		field: "spec.limits", message: "Required value"}),
	Entry("an empty list of limits", budgetCase{opts: []budgetOption{withBudgetLimits([]v1alpha1.BudgetLimit{}...)},
		field: "spec.limits", message: "limits must not be empty: a Budget needs 1 to 8 limits"}),
	Entry("9 limits", budgetCase{opts: []budgetOption{nLimits(9)},
		field: "spec.limits", message: "Too many: 9: must have at most 8 items"}),
	Entry("one window twice in UTC", budgetCase{opts: []budgetOption{func(b *v1alpha1.Budget) {
		utc := limit("Month", "", 1000, 0)
		utc.TimeZone = "UTC"
		b.Spec.Limits = []v1alpha1.BudgetLimit{limit("Month", "5", 0, 0), utc}
	}}, field: "spec.limits", message: "limits must not repeat a window in the same time zone"}),
	Entry("an unknown action", budgetCase{opts: []budgetOption{func(b *v1alpha1.Budget) { b.Spec.Action = "Warn" }},
		field: "spec.action", message: `Unsupported value: "Warn": supported values: "Block", "Audit"`}),

	// Subjects.
	Entry("a ServiceAccount subject without namespace", budgetCase{
		opts:  []budgetOption{withSubjects(v1alpha1.BudgetSubject{Kind: v1alpha1.BudgetSubjectServiceAccount, Name: "indexer"})},
		field: "spec.subjects[0]", message: "namespace is required for a ServiceAccount subject"}),
	Entry("a Group subject with a namespace", budgetCase{
		opts:  []budgetOption{withSubjects(v1alpha1.BudgetSubject{Kind: v1alpha1.BudgetSubjectGroup, Namespace: "search", Name: "admins"})},
		field: "spec.subjects[0]", message: "namespace is only allowed for a ServiceAccount subject"}),
	Entry("a User subject with a namespace", budgetCase{
		opts: []budgetOption{withSubjects(v1alpha1.BudgetSubject{Kind: v1alpha1.BudgetSubjectUser, Name: "alice"},
			v1alpha1.BudgetSubject{Kind: v1alpha1.BudgetSubjectUser, Namespace: "search", Name: "bob"})},
		field: "spec.subjects[1]", message: "namespace is only allowed for a ServiceAccount subject"}),
	Entry("a ServiceAccount name that is not one", budgetCase{
		opts: []budgetOption{withSubjects(v1alpha1.BudgetSubject{Kind: v1alpha1.BudgetSubjectServiceAccount,
			Namespace: "search", Name: "system:serviceaccount:search:indexer"})},
		field: "spec.subjects[0]", message: "the name of a ServiceAccount subject must be a DNS subdomain"}),
	Entry("a subject of an unknown kind", budgetCase{
		opts:  []budgetOption{withSubjects(v1alpha1.BudgetSubject{Kind: "Team", Name: "search"})},
		field: "spec.subjects[0].kind", message: `Unsupported value: "Team": supported values: "ServiceAccount", "Group", "User"`}),
	Entry("a subject without a name", budgetCase{
		opts:  []budgetOption{withSubjects(v1alpha1.BudgetSubject{Kind: v1alpha1.BudgetSubjectUser})},
		field: "spec.subjects[0].name"}),
	Entry("a bad selector", budgetCase{
		opts: []budgetOption{func(b *v1alpha1.Budget) {
			b.Spec.Selector = &v1alpha1.LabelSelector{MatchExpressions: []v1alpha1.LabelSelectorRequirement{
				{Key: "tier", Operator: v1alpha1.LabelSelectorOpIn}}}
		}},
		field: "spec.selector.matchExpressions[0]", message: "values must not be empty when operator is In or NotIn"}),
}

// pricingCases are ModelDeployment manifests with pricing and an output cap.
var pricingCases = []TableEntry{
	Entry("the contract's pricing block and output cap", mdCase{opts: []mdOption{
		withPricing(contractPricing()), withMaxOutputTokens(4096)}}),
	Entry("pricing with the required prices only, free input", mdCase{opts: []mdOption{
		withPricing(v1alpha1.Pricing{Currency: "EUR", InputTokens: "0", OutputTokens: "0.000001"})}}),
	Entry("the largest output cap", mdCase{opts: []mdOption{withMaxOutputTokens(1000000)}}),
	Entry("an input price with two points", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.InputTokens = "2.5.0" })},
		message: "spec.pricing.inputTokens: Invalid value"}),
	Entry("a negative output price", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.OutputTokens = "-1" })},
		message: msgPrice}),
	Entry("an output price with an exponent", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.OutputTokens = "1e3" })},
		message: msgPrice}),
	Entry("a cache price with 7 decimals", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.CacheReadTokens = "0.1234567" })},
		message: "spec.pricing.cacheReadTokens: Invalid value"}),
	Entry("an image price with a comma", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.Images = "0,04" })},
		message: msgPrice}),
	Entry("a lower-case currency", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.Currency = "usd" })},
		message: msgCurrency}),
	Entry("a currency name", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.Currency = "Dollar" })},
		message: "spec.pricing.currency"}),
	Entry("a two-letter currency", mdCase{opts: []mdOption{editPricing(func(p *v1alpha1.Pricing) { p.Currency = "US" })},
		message: msgCurrency}),
	Entry("an output cap of 0", mdCase{opts: []mdOption{withMaxOutputTokens(0)},
		message: "should be greater than or equal to 1"}),
	Entry("an output cap over 1000000", mdCase{opts: []mdOption{withMaxOutputTokens(1000001)},
		message: "should be less than or equal to 1000000"}),
}

// editPricing sets the contract's pricing, changed by edit.
func editPricing(edit func(*v1alpha1.Pricing)) mdOption {
	p := contractPricing()
	edit(&p)
	return withPricing(p)
}

// expectVerdict checks err against a case: no error for a valid one, else an error
// naming the field (when given) and carrying the message.
func expectVerdict(err error, field, message string) {
	GinkgoHelper()
	if field == "" && message == "" {
		Expect(err).NotTo(HaveOccurred())
		return
	}
	Expect(err).To(HaveOccurred())
	if field != "" {
		Expect(err.Error()).To(ContainSubstring(field + ": "))
	}
	Expect(err.Error()).To(ContainSubstring(message))
}

var _ = Describe("Budget and pricing validation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	DescribeTable("Budget through the API server",
		func(c budgetCase) {
			b := newBudget(ns, "budget", c.opts...)
			expectVerdict(k8s.Create(suiteCtx, b), c.field, c.message)
		}, budgetCases)

	DescribeTable("Budget through the Go validator",
		func(c budgetCase) {
			expectVerdict(newBudget(ns, "budget", c.opts...).Spec.Validate(), c.field, c.message)
		}, budgetCases)

	DescribeTable("Budget through the standalone manifest loader",
		func(c budgetCase) {
			b := newBudget(ns, "budget", c.opts...)
			b.APIVersion, b.Kind = v1alpha1.GroupVersion.String(), "Budget"
			_, err := LoadManifests(manifestDir(b))
			expectVerdict(err, c.field, c.message)
		}, budgetCases)

	It("defaults action to Block on both paths", func() {
		b := newBudget(ns, "defaulted")
		Expect(k8s.Create(suiteCtx, b)).To(Succeed())
		Expect(b.Spec.Action).To(Equal(v1alpha1.BudgetActionBlock))

		b = newBudget(ns, "defaulted")
		b.APIVersion, b.Kind = v1alpha1.GroupVersion.String(), "Budget"
		m, err := LoadManifests(manifestDir(b))
		Expect(err).NotTo(HaveOccurred())
		Expect(m.Budgets).To(HaveLen(1))
		Expect(m.Budgets[0].Spec.Action).To(Equal(v1alpha1.BudgetActionBlock))
	})

	It("keeps status apart from spec: the status subresource writes it", func() {
		b := newBudget(ns, "status")
		Expect(k8s.Create(suiteCtx, b)).To(Succeed())
		b.Status.Window, b.Status.Used, b.Status.Limit, b.Status.Percent = v1alpha1.BudgetWindowMinute, "6 requests", "600 requests", 1
		Expect(k8s.Status().Update(suiteCtx, b)).To(Succeed())
		got := &v1alpha1.Budget{}
		Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(b), got)).To(Succeed())
		Expect(got.Status.Used).To(Equal("6 requests"))
		Expect(got.Generation).To(Equal(int64(1)))
	})

	DescribeTable("ModelDeployment pricing through the API server",
		func(c mdCase) {
			expectVerdict(k8s.Create(suiteCtx, newMD(ns, "model", c.opts...)), "", c.message)
		}, pricingCases)

	DescribeTable("ModelDeployment pricing through the Go validator",
		func(c mdCase) {
			expectVerdict(newMD(ns, "model", c.opts...).Spec.Validate(), "", c.message)
		}, pricingCases)

	DescribeTable("ModelDeployment pricing through the standalone manifest loader",
		func(c mdCase) {
			md := newMD(ns, "model", c.opts...)
			md.APIVersion, md.Kind = v1alpha1.GroupVersion.String(), "ModelDeployment"
			_, err := LoadManifests(manifestDir(md))
			expectVerdict(err, "", c.message)
		}, pricingCases)
})
