package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Budget syntax, written without backslashes so the same text serves the CEL rules and
// the Go validator.
const (
	// timeZoneRegex: the shape of an IANA time zone name ("UTC", "Europe/Berlin",
	// "America/Argentina/Buenos_Aires", "Etc/GMT+1"). Whether the name exists is checked
	// by the runtime, which loads it.
	timeZoneRegex = `^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`
	// dnsLabelRegex: a namespace name.
	dnsLabelRegex = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// dnsSubdomainRegex: a ServiceAccount name.
	dnsSubdomainRegex = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
)

// Messages of the Budget rules: the CEL rules below repeat them verbatim.
const (
	msgSubjectNamespaceRequired  = "namespace is required for a ServiceAccount subject"
	msgSubjectNamespaceForbidden = "namespace is only allowed for a ServiceAccount subject"
	msgServiceAccountName        = "the name of a ServiceAccount subject must be a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	msgLimitUnit                 = "a limit needs at least one of cost, tokens or requests"
	msgCostPositive              = "cost must be greater than 0"
	msgTimeZone                  = "timeZone must be an IANA time zone name such as UTC or Europe/Berlin"
	msgLimitsRepeat              = "limits must not repeat a window in the same time zone"
	msgLimitsEmpty               = "limits must not be empty: a Budget needs 1 to 8 limits"
)

// BudgetSubjectKind is the kind of principal a Budget subject names.
// +kubebuilder:validation:Enum=ServiceAccount;Group;User
type BudgetSubjectKind string

const (
	// BudgetSubjectServiceAccount is a Kubernetes ServiceAccount, named by namespace and
	// name.
	BudgetSubjectServiceAccount BudgetSubjectKind = "ServiceAccount"
	// BudgetSubjectGroup is a group the caller's authentication reports, for example
	// "system:serviceaccounts:search".
	BudgetSubjectGroup BudgetSubjectKind = "Group"
	// BudgetSubjectUser is a user name the caller's authentication reports. Static-mode
	// principals (spec/authentication.md) are Users.
	BudgetSubjectUser BudgetSubjectKind = "User"
)

// BudgetSubjectKinds lists every subject kind, in the order of the CRD's enum.
var BudgetSubjectKinds = []BudgetSubjectKind{BudgetSubjectServiceAccount, BudgetSubjectGroup, BudgetSubjectUser}

// BudgetSubject names a principal whose executions a Budget counts, in the shape of an
// RBAC subject.
// +kubebuilder:validation:XValidation:rule="self.kind != 'ServiceAccount' || has(self.__namespace__)",message="namespace is required for a ServiceAccount subject"
// +kubebuilder:validation:XValidation:rule="self.kind == 'ServiceAccount' || !has(self.__namespace__)",message="namespace is only allowed for a ServiceAccount subject"
// +kubebuilder:validation:XValidation:rule="self.kind != 'ServiceAccount' || self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="the name of a ServiceAccount subject must be a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
type BudgetSubject struct {
	// kind is ServiceAccount, Group or User (case-sensitive).
	// +required
	Kind BudgetSubjectKind `json:"kind"`

	// namespace is the namespace of a ServiceAccount subject: required for
	// ServiceAccount, refused for Group and User.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`

	// name is the ServiceAccount's name, or the group or user name exactly as the
	// caller's authentication reports it (1..253 characters).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// BudgetWindow is the period a limit counts over. Windows are calendar-aligned in the
// limit's time zone: they start at the top of a minute, hour or day, on a Monday (ISO
// weeks) or on the first of a month (a real calendar month, not 30 days).
// +kubebuilder:validation:Enum=Minute;Hour;Day;Week;Month
type BudgetWindow string

const (
	// BudgetWindowMinute counts from the start of each minute.
	BudgetWindowMinute BudgetWindow = "Minute"
	// BudgetWindowHour counts from the start of each hour.
	BudgetWindowHour BudgetWindow = "Hour"
	// BudgetWindowDay counts from each midnight.
	BudgetWindowDay BudgetWindow = "Day"
	// BudgetWindowWeek counts from each Monday's midnight (ISO 8601 weeks).
	BudgetWindowWeek BudgetWindow = "Week"
	// BudgetWindowMonth counts from the first day of each calendar month at midnight.
	BudgetWindowMonth BudgetWindow = "Month"
)

// BudgetWindows lists every window, shortest first, in the order of the CRD's enum.
var BudgetWindows = []BudgetWindow{BudgetWindowMinute, BudgetWindowHour, BudgetWindowDay, BudgetWindowWeek, BudgetWindowMonth}

// BudgetLimit is what may be used in one window: a cost, a number of tokens, a number of
// requests, or several of them, each of which must hold.
// +kubebuilder:validation:XValidation:rule="has(self.cost) || has(self.tokens) || has(self.requests)",message="a limit needs at least one of cost, tokens or requests"
// +kubebuilder:validation:XValidation:rule="!has(self.cost) || !self.cost.matches('^0([.]0+)?$')",message="cost must be greater than 0"
type BudgetLimit struct {
	// window is the calendar period the limit counts over: Minute, Hour, Day, Week
	// (ISO, from Monday) or Month (a calendar month).
	// +required
	Window BudgetWindow `json:"window"`

	// timeZone is the IANA time zone the window is aligned in, for example
	// Europe/Berlin: a Day then starts at midnight in Berlin, including across daylight
	// saving changes. Omitted: UTC. A name the runtime cannot load makes the Budget
	// Ready=False, InvalidSpec.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$')",message="timeZone must be an IANA time zone name such as UTC or Europe/Berlin"
	TimeZone string `json:"timeZone,omitempty"`

	// cost is the most that may be spent in the window, in the currency of the governed
	// deployments' pricing, as a decimal string such as "500.00" (greater than 0, at most
	// 6 decimals). It
	// needs pricing and limits.maxOutputTokens on every governed ModelDeployment.
	// +optional
	Cost *Price `json:"cost,omitempty"`

	// tokens is the most tokens (input, output and reasoning together) that may be used
	// in the window, at least 1. It needs limits.maxOutputTokens on every governed
	// ModelDeployment.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Tokens *int64 `json:"tokens,omitempty"`

	// requests is the most executions that may be admitted in the window, at least 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Requests *int64 `json:"requests,omitempty"`
}

// BudgetAction is what a Budget does when a limit would be exceeded.
// +kubebuilder:validation:Enum=Block;Audit
type BudgetAction string

const (
	// BudgetActionBlock refuses executions the Budget cannot take: routing falls back
	// to another eligible model with budget left, or the request gets 429
	// quota_exhausted.
	BudgetActionBlock BudgetAction = "Block"
	// BudgetActionAudit counts and reports (status, metrics, Events) but never refuses.
	BudgetActionAudit BudgetAction = "Audit"
)

// BudgetSpec says which executions a Budget counts and how much they may use.
type BudgetSpec struct {
	// selector selects, by label, the ModelDeployments of this namespace whose
	// executions the Budget counts (matchLabels and matchExpressions, as in a Kubernetes
	// label selector). Empty or omitted: every ModelDeployment of the namespace.
	// +optional
	Selector *LabelSelector `json:"selector,omitempty"`

	// subjects lists the principals whose executions count (at most 64). Empty or
	// omitted: every caller.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Subjects []BudgetSubject `json:"subjects,omitempty"`

	// perSubject gives each principal the whole of every limit separately, instead of
	// one limit shared by all of them. Default false.
	// +optional
	PerSubject bool `json:"perSubject,omitempty"`

	// limits are what may be used per window, 1 to 8 entries, at most one per window
	// and time zone; every one must hold. An execution is admitted only when each
	// limit can take its worst case (spec/budgets.md, "Enforcement").
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="size(self) >= 1",message="limits must not be empty: a Budget needs 1 to 8 limits"
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y.window == x.window && (has(y.timeZone) ? y.timeZone : 'UTC') == (has(x.timeZone) ? x.timeZone : 'UTC')))",message="limits must not repeat a window in the same time zone"
	Limits []BudgetLimit `json:"limits"`

	// action is Block (default): refuse what the Budget cannot take; or Audit: count and
	// report, never refuse.
	// +optional
	// +kubebuilder:default=Block
	Action BudgetAction `json:"action,omitempty"`
}

// BudgetAmounts is a quantity per unit of a limit. Only the units the limit names are
// written.
type BudgetAmounts struct {
	// cost is an amount of money in the Budget's currency, as a decimal string with at
	// most 6 decimals, for example "123.456789".
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Cost string `json:"cost,omitempty"`

	// tokens is a number of tokens.
	// +optional
	Tokens *int64 `json:"tokens,omitempty"`

	// requests is a number of admitted executions.
	// +optional
	Requests *int64 `json:"requests,omitempty"`
}

// BudgetWindowStatus is the state of one limit in its current window.
type BudgetWindowStatus struct {
	// window is the limit's window.
	// +required
	Window BudgetWindow `json:"window"`

	// timeZone is the limit's time zone; omitted for UTC.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TimeZone string `json:"timeZone,omitempty"`

	// start is when the current window began.
	// +required
	Start metav1.Time `json:"start"`

	// resetAt is when the current window ends and its counters start again from zero.
	// +required
	ResetAt metav1.Time `json:"resetAt"`

	// used is what was used in the current window, reserved executions included.
	// +required
	Used BudgetAmounts `json:"used"`

	// limit repeats the limit, in the same units.
	// +required
	Limit BudgetAmounts `json:"limit"`

	// percent is used over limit in percent, rounded down; with several units, the
	// highest of them. It may pass 100 under action Audit.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Percent int32 `json:"percent"`
}

// BudgetStatus is the observed state of a Budget, written by the leader from the shared
// counters.
type BudgetStatus struct {
	// observedGeneration is the generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions holds Ready (True/Enforced; False/InvalidSpec, NoPricing, NoOutputCap
	// or CurrencyMismatch, which keep the governed deployments out of routing for the
	// Budget's subjects) and Exhausted (False/WithinLimits, True/LimitReached).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// windows holds the state of each limit in its current window, in the order of
	// spec.limits. With perSubject, the totals of every principal together.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Windows []BudgetWindowStatus `json:"windows,omitempty"`

	// window is the window of the limit closest to being reached (the highest
	// percent), for display.
	// +optional
	Window BudgetWindow `json:"window,omitempty"`

	// used is what that limit has used, for display, for example "123.45 USD" or
	// "4500 tokens".
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Used string `json:"used,omitempty"`

	// limit is that limit, for display, for example "500 USD" or "200000 tokens".
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Limit string `json:"limit,omitempty"`

	// percent is that limit's percent used, for display.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Percent int32 `json:"percent"`
}

// Budget limits what the executions of a namespace's models may cost or use per calendar
// window: money (from each ModelDeployment's pricing), tokens or requests, for every
// caller or for chosen ServiceAccounts, groups and users. The runtime reserves each
// execution's worst case before the call and settles it to the actual usage at the end,
// across all replicas, so a Budget never admits more than its limit (spec/budgets.md).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=budget,categories=switchboard
// +kubebuilder:printcolumn:name="Window",type=string,JSONPath=`.status.window`
// +kubebuilder:printcolumn:name="Used",type=string,JSONPath=`.status.used`
// +kubebuilder:printcolumn:name="Limit",type=string,JSONPath=`.status.limit`
// +kubebuilder:printcolumn:name="Percent",type=integer,JSONPath=`.status.percent`
// +kubebuilder:printcolumn:name="Exhausted",type=string,JSONPath=`.status.conditions[?(@.type=="Exhausted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Budget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which executions the Budget counts and its limits.
	// +required
	Spec BudgetSpec `json:"spec"`

	// status is the observed state, written by the controller.
	// +optional
	Status BudgetStatus `json:"status,omitempty"`
}

// BudgetList is a list of Budgets.
// +kubebuilder:object:root=true
type BudgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Budget `json:"items"`
}
