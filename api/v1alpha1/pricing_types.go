package v1alpha1

// Pricing and the output cap of a ModelDeployment (spec/budgets.md, "Pricing"). The API
// only declares them; the runtime turns prices into integer micro-units and applies the
// defaults documented below, so that no floating point ever touches money.

// Price syntax, written without backslashes so the same text serves the CEL rules and the
// Go validator.
const (
	// priceRegex: a non-negative decimal without sign, exponent or leading zeros, with
	// 1..12 digits before an optional point and 1..6 after it.
	priceRegex = `^(0|[1-9][0-9]{0,11})([.][0-9]{1,6})?$`
	// zeroPriceRegex matches the prices that are zero ("0", "0.0", ... "0.000000").
	zeroPriceRegex = `^0([.]0+)?$`
	// currencyRegex: three upper-case letters (ISO 4217 codes such as USD or EUR).
	currencyRegex = `^[A-Z]{3}$`
)

// Messages of the pricing rules: the CEL rules below repeat them verbatim.
const (
	msgPrice    = "must be a decimal number such as 2.50: no sign, exponent or leading zeros, at most 12 digits before the point and at most 6 after it (money is counted in micro-units)"
	msgCurrency = "currency must be an ISO 4217 code of three upper-case letters, such as USD or EUR"
)

// Price is an amount of money in the currency of its context, written as a decimal
// string such as "2.50", "0.15" or "40000": no sign, no exponent, no leading zeros, at
// most 12 digits before the point and at most 6 after it. Six decimals because the
// runtime counts money in integer micro-units (millionths of the currency unit); a
// finer price could not be represented and is refused rather than rounded. A string,
// not a number, so that no JSON or YAML decoder turns it into a float on the way.
// +kubebuilder:validation:MaxLength=20
// +kubebuilder:validation:XValidation:rule="self.matches('^(0|[1-9][0-9]{0,11})([.][0-9]{1,6})?$')",message="must be a decimal number such as 2.50: no sign, exponent or leading zeros, at most 12 digits before the point and at most 6 after it (money is counted in micro-units)"
type Price string

// Pricing is what one configured model costs, as the operator knows it from the
// provider's price list: the runtime never guesses a price. Every price is per 1,000,000
// units (tokens, images or seconds) in currency. A Budget with a cost limit governs only
// deployments that declare pricing in its one currency (spec/budgets.md).
type Pricing struct {
	// currency is the ISO 4217 code of every price below, for example USD or EUR. The
	// Budgets of a namespace count in one currency: a deployment priced in another is
	// not routed for a Budget with a cost limit (Ready=False, CurrencyMismatch).
	// +required
	// +kubebuilder:validation:MaxLength=3
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Z]{3}$')",message="currency must be an ISO 4217 code of three upper-case letters, such as USD or EUR"
	Currency string `json:"currency"`

	// inputTokens is the price of 1,000,000 input (prompt) tokens, for example "2.50".
	// +required
	InputTokens Price `json:"inputTokens"`

	// outputTokens is the price of 1,000,000 output (completion) tokens, for example
	// "10.00".
	// +required
	OutputTokens Price `json:"outputTokens"`

	// cacheReadTokens is the price of 1,000,000 input tokens read from the provider's
	// prompt cache. Omitted: inputTokens. Where a provider counts cached tokens inside
	// its input count, the cached ones are priced here and only the rest at inputTokens:
	// every token is priced once.
	// +optional
	CacheReadTokens Price `json:"cacheReadTokens,omitempty"`

	// cacheWriteTokens is the price of 1,000,000 input tokens written to the provider's
	// prompt cache. Omitted: inputTokens.
	// +optional
	CacheWriteTokens Price `json:"cacheWriteTokens,omitempty"`

	// reasoningTokens is the price of 1,000,000 reasoning (thinking) tokens the
	// provider reports apart from the output. Omitted: outputTokens.
	// +optional
	ReasoningTokens Price `json:"reasoningTokens,omitempty"`

	// images is the price of 1,000,000 generated images: "40000" is 0.04 per image.
	// Omitted: images cost nothing.
	// +optional
	Images Price `json:"images,omitempty"`

	// mediaSeconds is the price of 1,000,000 seconds of generated audio or video.
	// Omitted: media seconds cost nothing.
	// +optional
	MediaSeconds Price `json:"mediaSeconds,omitempty"`
}

// DeploymentLimits bounds what one execution may ask of a configured model.
type DeploymentLimits struct {
	// maxOutputTokens caps the output of one attempt (1..1000000): it is sent to the
	// provider as its output cap, and a caller may only lower it (a higher request is
	// clamped, not refused). A Budget with a cost or tokens limit reserves this worst
	// case before each call, so every deployment it governs must set it; otherwise the
	// Budget is Ready=False, NoOutputCap and keeps the model out of routing for its
	// subjects. Omitted: the provider's own default applies.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxOutputTokens *int32 `json:"maxOutputTokens,omitempty"`
}
