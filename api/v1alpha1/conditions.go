package v1alpha1

// Condition types.
const (
	// ConditionCredentialsResolved is True when the referenced Secret is eligible and its
	// key holds a value.
	ConditionCredentialsResolved = "CredentialsResolved"
	// ConditionRoutable is True when the spec, credentials and policies allow routing to
	// the model. Its message says capabilities are declared, not verified.
	ConditionRoutable = "Routable"
	// ConditionReady is the summary: True exactly when the object is in the live routing
	// table (ModelDeployment) or is being enforced (CapabilityPolicy, Budget).
	ConditionReady = "Ready"
	// ConditionExhausted is True while a limit of a Budget is reached: with action Block,
	// the governed deployments take no more executions of its subjects until the window
	// resets.
	ConditionExhausted = "Exhausted"
)

// Reasons of CredentialsResolved.
const (
	// ReasonResolved: the referenced Secret key holds a value (or no credentials are
	// configured).
	ReasonResolved = "Resolved"
	// ReasonSecretNotFound: the referenced Secret does not exist.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretNotEligible: the referenced Secret exists but does not opt in to being
	// a model credential (in a cluster, the label CredentialLabel with the value
	// CredentialLabelValue). Its content is not read, and nothing tells whether it holds
	// the key.
	ReasonSecretNotEligible = "SecretNotEligible"
	// ReasonKeyNotFound: the Secret is eligible but has no such key.
	ReasonKeyNotFound = "KeyNotFound"
	// ReasonKeyEmpty: the Secret key of an eligible Secret holds only whitespace.
	ReasonKeyEmpty = "KeyEmpty"
)

// Reasons of Routable. Ready=False repeats the reason that keeps the model out of the
// table.
const (
	// ReasonDeclared: routable with the declared capabilities (declared, not verified).
	ReasonDeclared = "Declared"
	// ReasonSuspended: spec.suspend is true.
	ReasonSuspended = "Suspended"
	// ReasonCredentialsUnresolved: CredentialsResolved is False.
	ReasonCredentialsUnresolved = "CredentialsUnresolved"
	// ReasonNoAbilities: spec.abilities is empty.
	ReasonNoAbilities = "NoAbilities"
	// ReasonPolicyDenied: the selecting policies leave no input or no output modality.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonPolicyInvalid: a CapabilityPolicy of the namespace is invalid. An invalid
	// policy governs every ModelDeployment of its namespace and keeps each out of the
	// routing table until it is fixed or deleted: policies fail closed.
	ReasonPolicyInvalid = "PolicyInvalid"
	// ReasonInvalidSpec: the spec fails validation (also a CapabilityPolicy Ready reason
	// for a spec problem outside its selector).
	ReasonInvalidSpec = "InvalidSpec"
)

// Reasons of Ready.
const (
	// ReasonRouted: the ModelDeployment is in the live routing table.
	ReasonRouted = "Routed"
	// ReasonEnforced: the CapabilityPolicy is applied to the models it selects.
	ReasonEnforced = "Enforced"
	// ReasonInvalidSelector: the CapabilityPolicy's selector cannot be evaluated; the
	// policy governs every ModelDeployment of its namespace (PolicyInvalid).
	ReasonInvalidSelector = "InvalidSelector"
)

// Reasons of a Budget's Ready. Every False reason keeps the governed deployments out of
// routing for the Budget's subjects (Budgets fail closed, spec/budgets.md); Enforced and
// InvalidSpec are shared with CapabilityPolicy.
const (
	// ReasonNoPricing: the Budget has a cost limit and a governed ModelDeployment
	// declares no spec.pricing.
	ReasonNoPricing = "NoPricing"
	// ReasonNoOutputCap: the Budget has a cost or tokens limit and a governed
	// ModelDeployment sets no spec.limits.maxOutputTokens, so no worst case can be
	// reserved.
	ReasonNoOutputCap = "NoOutputCap"
	// ReasonCurrencyMismatch: the governed ModelDeployments are not all priced in one
	// currency.
	ReasonCurrencyMismatch = "CurrencyMismatch"
)

// Reasons of Exhausted.
const (
	// ReasonWithinLimits: every limit of the Budget can still take executions.
	ReasonWithinLimits = "WithinLimits"
	// ReasonLimitReached: a limit of the Budget is used up until its window resets.
	ReasonLimitReached = "LimitReached"
)

// Event reasons that are not condition reasons.
const (
	// ReasonCredentialsRotated: the referenced Secret changed; new attempts use the new
	// value.
	ReasonCredentialsRotated = "CredentialsRotated"
	// ReasonBudgetExhausted: a Budget's Exhausted condition became True.
	ReasonBudgetExhausted = "BudgetExhausted"
	// ReasonBudgetRestored: a Budget's Exhausted condition became False again (a window
	// reset or a limit was raised).
	ReasonBudgetRestored = "BudgetRestored"
)
