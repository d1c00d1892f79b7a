package v1alpha1

// Condition types.
const (
	// ConditionCredentialsResolved is True when the referenced Secret key holds a value.
	ConditionCredentialsResolved = "CredentialsResolved"
	// ConditionRoutable is True when the spec, credentials and policies allow routing to
	// the model. Its message says capabilities are declared, not verified.
	ConditionRoutable = "Routable"
	// ConditionReady is the summary: True exactly when the object is in the live routing
	// table (ModelDeployment) or is being enforced (CapabilityPolicy).
	ConditionReady = "Ready"
)

// Reasons of CredentialsResolved.
const (
	ReasonResolved       = "Resolved"
	ReasonSecretNotFound = "SecretNotFound"
	ReasonKeyNotFound    = "KeyNotFound"
	ReasonKeyEmpty       = "KeyEmpty"
)

// Reasons of Routable. Ready=False repeats the reason that keeps the model out of the
// table.
const (
	ReasonDeclared              = "Declared"
	ReasonSuspended             = "Suspended"
	ReasonCredentialsUnresolved = "CredentialsUnresolved"
	ReasonNoAbilities           = "NoAbilities"
	ReasonPolicyDenied          = "PolicyDenied"
	ReasonInvalidSpec           = "InvalidSpec"
)

// Reasons of Ready.
const (
	// ReasonRouted: the ModelDeployment is in the live routing table.
	ReasonRouted = "Routed"
	// ReasonEnforced: the CapabilityPolicy is applied to the models it selects.
	ReasonEnforced = "Enforced"
	// ReasonInvalidSelector: the CapabilityPolicy's selector cannot be evaluated.
	ReasonInvalidSelector = "InvalidSelector"
)

// Event reasons that are not condition reasons.
const (
	// ReasonCredentialsRotated: the referenced Secret changed; new attempts use the new
	// value.
	ReasonCredentialsRotated = "CredentialsRotated"
)
