package v1alpha1

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// This file mirrors the CRD schema and CEL rules in Go, for objects that never pass an API
// server (standalone mode reads them from files) and as a defensive check in the
// controllers. The CEL messages are repeated verbatim so both paths read the same; a shared
// manifest table runs against envtest and against these functions and they must agree.

var (
	abilityPattern    = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)
	dnsSubdomain      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	secretKeyPattern  = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	extensionPattern  = regexp.MustCompile(`^[a-z][a-z0-9-]*\.(\*|[a-z][a-z0-9_.-]*\*?)$`)
	parameterPattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	regionPattern     = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	projectPattern    = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)
	labelKeyPattern   = regexp.MustCompile(labelKeyRegex)
	labelValuePattern = regexp.MustCompile(labelValueRegex)
	pricePattern      = regexp.MustCompile(priceRegex)
	zeroPricePattern  = regexp.MustCompile(zeroPriceRegex)
	currencyPattern   = regexp.MustCompile(currencyRegex)
	timeZonePattern   = regexp.MustCompile(timeZoneRegex)
	dnsLabelPattern   = regexp.MustCompile(dnsLabelRegex)
	saNamePattern     = regexp.MustCompile(dnsSubdomainRegex)
)

// omit stands for a value an error must not repeat: endpoint and model may carry a secret
// (user info, a query-string key, a token pasted into the wrong field), and an error
// reaches status conditions, Kubernetes Events and logs.
var omit = field.OmitValueType{}

// ReservedParameters are the input names allowedParameters refuses, in any letter case:
// prompt, media, tool, model, version, webhook and streaming inputs, which only the
// request's parts, the declared capabilities and the ModelDeployment itself may set.
var ReservedParameters = []string{
	"prompt", "system_prompt", "messages",
	"image", "images", "input_image", "mask",
	"audio", "input_audio", "video", "input_video", "file", "files",
	"model", "version",
	"tools", "tool_choice", "functions", "function_call",
	"webhook", "webhook_events_filter", "stream",
}

// msgReservedParameter is the message of the CEL rule that lists the same names.
var msgReservedParameter = "allowedParameters must not name a prompt, media, tool, model or version input: " +
	strings.Join(ReservedParameters[:len(ReservedParameters)-1], ", ") + " and " +
	ReservedParameters[len(ReservedParameters)-1] + " are reserved in any letter case"

// Validate checks spec against the ModelDeployment schema and its CEL rules.
func (s *ModelDeploymentSpec) Validate() error {
	return s.validate(field.NewPath("spec")).ToAggregate()
}

func (s *ModelDeploymentSpec) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case s.Provider == "":
		errs = append(errs, field.Required(p.Child("provider"), ""))
	case !slices.Contains(Providers, s.Provider):
		errs = append(errs, field.NotSupported(p.Child("provider"), s.Provider, Providers))
	}
	if s.Region != "" {
		errs = append(errs, patterned(p.Child("region"), s.Region, 1, 64, regionPattern)...)
	}
	if s.Project != "" && !projectPattern.MatchString(s.Project) {
		errs = append(errs, field.Invalid(p.Child("project"), s.Project, "must match "+projectPattern.String()))
	}
	if n := len(s.Model); n < 1 || n > 256 {
		errs = append(errs, field.Invalid(p.Child("model"), omit, "must be 1..256 characters"))
	}
	if s.Endpoint != "" {
		ep := p.Child("endpoint")
		if len(s.Endpoint) > 2048 {
			errs = append(errs, field.Invalid(ep, omit, "must be 0..2048 characters"))
		}
		if u, err := url.Parse(s.Endpoint); err != nil || !u.IsAbs() || u.Host == "" ||
			(u.Scheme != "https" && u.Scheme != "http") {
			// url.Parse errors quote the input: never surface err.
			errs = append(errs, field.Invalid(ep, omit, "endpoint must be an absolute http(s) URL"))
		}
		if strings.ContainsAny(s.Endpoint, "@?#") {
			errs = append(errs, field.Invalid(ep, omit, "endpoint must not carry user info, a query or a fragment"))
		}
	}
	if s.Credentials != nil {
		ref := p.Child("credentials", "secretRef")
		errs = append(errs, patterned(ref.Child("name"), s.Credentials.SecretRef.Name, 1, 253, dnsSubdomain)...)
		errs = append(errs, patterned(ref.Child("key"), s.Credentials.SecretRef.Key, 1, 253, secretKeyPattern)...)
	}
	ab := p.Child("abilities")
	if len(s.Abilities) == 0 {
		errs = append(errs, field.Required(ab, ""))
	} else if len(s.Abilities) > 32 {
		errs = append(errs, field.TooMany(ab, len(s.Abilities), 32))
	}
	for i, a := range s.Abilities {
		errs = append(errs, patterned(ab.Index(i), string(a), 1, 64, abilityPattern)...)
	}
	if !unique(s.Abilities) {
		errs = append(errs, field.Invalid(ab, s.Abilities, "abilities must not repeat a name"))
	}
	if c := s.Capabilities; c != nil {
		cp := p.Child("capabilities")
		errs = append(errs, modalities(cp.Child("input"), c.Input, c.Input != nil, 6, validInput,
			"capabilities.input must not repeat a modality")...)
		errs = append(errs, modalities(cp.Child("output"), c.Output, c.Output != nil, 5, validOutput,
			"capabilities.output must not repeat a modality")...)
	}
	errs = append(errs, s.validateParameters(p.Child("allowedParameters"))...)
	if r := s.Routing; r != nil && r.Weight != 0 && (r.Weight < 1 || r.Weight > 10000) {
		errs = append(errs, field.Invalid(p.Child("routing", "weight"), r.Weight, "must be between 1 and 10000"))
	}
	if s.AttemptTimeout != nil {
		if d := s.AttemptTimeout.Duration; d < time.Second || d > time.Hour {
			errs = append(errs, field.Invalid(p.Child("attemptTimeout"), s.AttemptTimeout.String(),
				"attemptTimeout must be between 1s and 1h"))
		}
	}

	// Cross-field rules (the CEL rules on spec).
	if (s.Provider == ProviderOpenAICompatible || s.Provider == ProviderAzureOpenAI) && s.Endpoint == "" {
		errs = append(errs, field.Invalid(p, omit, "endpoint is required for provider "+string(s.Provider)))
	}
	regional := s.Provider == ProviderBedrock || s.Provider == ProviderVertex
	if regional && s.Region == "" {
		errs = append(errs, field.Invalid(p, omit, "region is required for provider "+string(s.Provider)))
	}
	if !regional && s.Region != "" {
		errs = append(errs, field.Invalid(p, omit, "region is only allowed for providers bedrock and vertex"))
	}
	if s.Provider == ProviderVertex && s.Project == "" {
		errs = append(errs, field.Invalid(p, omit, "project is required for provider vertex"))
	}
	if s.Provider != ProviderVertex && s.Project != "" {
		errs = append(errs, field.Invalid(p, omit, "project is only allowed for provider vertex"))
	}
	if s.Provider != ProviderOpenAICompatible && s.Credentials == nil {
		errs = append(errs, field.Invalid(p, omit, "credentials.secretRef is required for every provider except openai-compatible"))
	}
	if s.Endpoint != "" && !strings.HasPrefix(s.Endpoint, "https://") && !s.AllowInsecureEndpoint {
		errs = append(errs, field.Invalid(p, omit, "endpoint must use https unless allowInsecureEndpoint is true"))
	}
	if s.Provider == ProviderReplicate {
		if s.Capabilities == nil || s.Capabilities.Input == nil || s.Capabilities.Output == nil {
			errs = append(errs, field.Invalid(p, omit, "provider replicate must declare capabilities.input and capabilities.output"))
		}
	} else if len(s.AllowedParameters) > 0 {
		errs = append(errs, field.Invalid(p, omit, "allowedParameters is only allowed for provider replicate"))
	}
	errs = append(errs, s.validateAdapterLimits(p)...)
	errs = append(errs, s.Pricing.validate(p.Child("pricing"))...)
	if l := s.Limits; l != nil && l.MaxOutputTokens != nil {
		errs = append(errs, bounded(p.Child("limits", "maxOutputTokens"), int64(*l.MaxOutputTokens), 1, 1000000)...)
	}
	return errs
}

// validate checks a ModelDeployment's pricing: the currency code and every price. A nil
// pricing (no price declared) is valid.
func (pr *Pricing) validate(p *field.Path) field.ErrorList {
	if pr == nil {
		return nil
	}
	var errs field.ErrorList
	if len(pr.Currency) > 3 || !currencyPattern.MatchString(pr.Currency) {
		errs = append(errs, field.Invalid(p.Child("currency"), pr.Currency, msgCurrency))
	}
	for _, price := range []struct {
		name     string
		v        Price
		required bool
	}{
		{"inputTokens", pr.InputTokens, true},
		{"outputTokens", pr.OutputTokens, true},
		{"cacheReadTokens", pr.CacheReadTokens, false},
		{"cacheWriteTokens", pr.CacheWriteTokens, false},
		{"reasoningTokens", pr.ReasoningTokens, false},
		{"images", pr.Images, false},
		{"mediaSeconds", pr.MediaSeconds, false},
	} {
		switch {
		case price.v == "" && price.required:
			errs = append(errs, field.Required(p.Child(price.name), ""))
		case price.v != "":
			errs = append(errs, price.v.validate(p.Child(price.name))...)
		}
	}
	return errs
}

// validate checks the syntax of a price: a decimal with at most 6 decimals.
func (v Price) validate(p *field.Path) field.ErrorList {
	if len(v) > 20 || !pricePattern.MatchString(string(v)) {
		return field.ErrorList{field.Invalid(p, string(v), msgPrice)}
	}
	return nil
}

// Validate checks spec against the Budget schema and its CEL rules, selector included.
// An empty action is valid: it defaults to Block.
func (s *BudgetSpec) Validate() error {
	p := field.NewPath("spec")
	errs := s.Selector.validate(p.Child("selector"))
	sp := p.Child("subjects")
	if len(s.Subjects) > 64 {
		errs = append(errs, field.TooMany(sp, len(s.Subjects), 64))
	}
	for i := range s.Subjects {
		errs = append(errs, s.Subjects[i].validate(sp.Index(i))...)
	}
	lp := p.Child("limits")
	switch n := len(s.Limits); {
	case s.Limits == nil:
		errs = append(errs, field.Required(lp, ""))
	case n == 0:
		errs = append(errs, field.Invalid(lp, omit, msgLimitsEmpty))
	case n > 8:
		errs = append(errs, field.TooMany(lp, n, 8))
	}
	windows := make(map[[2]string]bool, len(s.Limits))
	repeated := false
	for i := range s.Limits {
		l := &s.Limits[i]
		errs = append(errs, l.validate(lp.Index(i))...)
		tz := l.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		key := [2]string{string(l.Window), tz}
		repeated = repeated || windows[key]
		windows[key] = true
	}
	if repeated {
		errs = append(errs, field.Invalid(lp, omit, msgLimitsRepeat))
	}
	switch s.Action {
	case "", BudgetActionBlock, BudgetActionAudit:
	default:
		errs = append(errs, field.NotSupported(p.Child("action"), s.Action, []BudgetAction{BudgetActionBlock, BudgetActionAudit}))
	}
	return errs.ToAggregate()
}

// validate checks one Budget subject: its kind, and a namespace for and only for a
// ServiceAccount.
func (sub *BudgetSubject) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case sub.Kind == "":
		errs = append(errs, field.Required(p.Child("kind"), ""))
	case !slices.Contains(BudgetSubjectKinds, sub.Kind):
		errs = append(errs, field.NotSupported(p.Child("kind"), sub.Kind, BudgetSubjectKinds))
	}
	if sub.Namespace != "" {
		errs = append(errs, patterned(p.Child("namespace"), sub.Namespace, 1, 63, dnsLabelPattern)...)
	}
	errs = append(errs, length(p.Child("name"), sub.Name, 1, 253)...)
	if sub.Kind == BudgetSubjectServiceAccount {
		if sub.Namespace == "" {
			errs = append(errs, field.Invalid(p, omit, msgSubjectNamespaceRequired))
		}
		if !saNamePattern.MatchString(sub.Name) {
			errs = append(errs, field.Invalid(p, omit, msgServiceAccountName))
		}
	} else if sub.Namespace != "" {
		errs = append(errs, field.Invalid(p, omit, msgSubjectNamespaceForbidden))
	}
	return errs
}

// validate checks one Budget limit: its window and time zone, and at least one unit,
// each at least 1 (a cost greater than 0).
func (l *BudgetLimit) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case l.Window == "":
		errs = append(errs, field.Required(p.Child("window"), ""))
	case !slices.Contains(BudgetWindows, l.Window):
		errs = append(errs, field.NotSupported(p.Child("window"), l.Window, BudgetWindows))
	}
	if l.TimeZone != "" && (len(l.TimeZone) > 64 || !timeZonePattern.MatchString(l.TimeZone)) {
		errs = append(errs, field.Invalid(p.Child("timeZone"), l.TimeZone, msgTimeZone))
	}
	if l.Cost != nil {
		errs = append(errs, l.Cost.validate(p.Child("cost"))...)
		if zeroPricePattern.MatchString(string(*l.Cost)) {
			errs = append(errs, field.Invalid(p, omit, msgCostPositive))
		}
	}
	if l.Tokens != nil {
		errs = append(errs, bounded(p.Child("tokens"), *l.Tokens, 1, 0)...)
	}
	if l.Requests != nil {
		errs = append(errs, bounded(p.Child("requests"), *l.Requests, 1, 0)...)
	}
	if l.Cost == nil && l.Tokens == nil && l.Requests == nil {
		errs = append(errs, field.Invalid(p, omit, msgLimitUnit))
	}
	return errs
}

// bounded checks lo <= v and, when hi > 0, v <= hi, in the words of the API server's
// minimum and maximum checks.
func bounded(p *field.Path, v, lo, hi int64) field.ErrorList {
	switch {
	case v < lo:
		return field.ErrorList{field.Invalid(p, v, fmt.Sprintf("should be greater than or equal to %d", lo))}
	case hi > 0 && v > hi:
		return field.ErrorList{field.Invalid(p, v, fmt.Sprintf("should be less than or equal to %d", hi))}
	}
	return nil
}

// validateAdapterLimits refuses capability declarations the provider's adapter can never
// honour (spec/modeldeployments.md, "Provider limits"): the router would send such a
// model requests that could only fail.
func (s *ModelDeploymentSpec) validateAdapterLimits(p *field.Path) field.ErrorList {
	c := s.Capabilities
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	invalid := func(msg string) { errs = append(errs, field.Invalid(p, omit, msg)) }
	switch s.Provider {
	case ProviderReplicate:
		if c.Streaming {
			invalid("provider replicate cannot declare capabilities.streaming: true")
		}
		if c.Tools {
			invalid("provider replicate cannot declare capabilities.tools: true")
		}
		if c.StructuredOutput {
			invalid("provider replicate cannot declare capabilities.structuredOutput: true")
		}
	default:
		switch s.Provider {
		case ProviderAnthropic:
			if !onlyModalities(c.Input, InputText, InputJSON, InputImage) {
				invalid("provider anthropic can declare only text, json and image in capabilities.input")
			}
		case ProviderOpenAI, ProviderOpenAICompatible, ProviderAzureOpenAI:
			if slices.Contains(c.Input, InputVideo) {
				invalid(fmt.Sprintf("provider %s cannot declare video in capabilities.input", s.Provider))
			}
		case ProviderBedrock:
			if slices.Contains(c.Input, InputAudio) {
				invalid("provider bedrock cannot declare audio in capabilities.input")
			}
		}
		if !onlyModalities(c.Output, OutputText, OutputJSON) {
			invalid(fmt.Sprintf("provider %s can declare only text and json in capabilities.output", s.Provider))
		}
	}
	return errs
}

func onlyModalities[M ~string](list []M, allowed ...M) bool {
	for _, m := range list {
		if !slices.Contains(allowed, m) {
			return false
		}
	}
	return true
}

// validateParameters checks allowedParameters: bounds, syntax, uniqueness and the
// reserved names.
func (s *ModelDeploymentSpec) validateParameters(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(s.AllowedParameters) > 64 {
		errs = append(errs, field.TooMany(p, len(s.AllowedParameters), 64))
	}
	reserved := false
	for i, name := range s.AllowedParameters {
		errs = append(errs, patterned(p.Index(i), string(name), 1, 64, parameterPattern)...)
		reserved = reserved || slices.Contains(ReservedParameters, strings.ToLower(string(name)))
	}
	if !unique(s.AllowedParameters) {
		errs = append(errs, field.Invalid(p, omit, "allowedParameters must not repeat a name"))
	}
	if reserved {
		errs = append(errs, field.Invalid(p, omit, msgReservedParameter))
	}
	return errs
}

// Validate checks spec against the CapabilityPolicy schema and its CEL rules, selector
// included.
func (s *CapabilityPolicySpec) Validate() error {
	p := field.NewPath("spec")
	errs := s.Selector.validate(p.Child("selector"))
	switch s.Tools {
	case "", ToolsAllowed, ToolsDisabled:
	default:
		errs = append(errs, field.NotSupported(p.Child("tools"), s.Tools, []ToolsPolicy{ToolsAllowed, ToolsDisabled}))
	}
	errs = append(errs, modalities(p.Child("allowedInputs"), s.AllowedInputs, false, 6, validInput,
		"allowedInputs must not repeat a modality")...)
	errs = append(errs, modalities(p.Child("allowedOutputs"), s.AllowedOutputs, false, 5, validOutput,
		"allowedOutputs must not repeat a modality")...)
	ext := p.Child("allowedExtensions")
	if len(s.AllowedExtensions) > 32 {
		errs = append(errs, field.TooMany(ext, len(s.AllowedExtensions), 32))
	}
	for i, e := range s.AllowedExtensions {
		errs = append(errs, patterned(ext.Index(i), string(e), 2, 128, extensionPattern)...)
	}
	if !unique(s.AllowedExtensions) {
		errs = append(errs, field.Invalid(ext, s.AllowedExtensions, "allowedExtensions must not repeat a pattern"))
	}
	if v := s.MaxDeadlineMs; v != nil && (*v < 1 || *v > 3600000) {
		errs = append(errs, field.Invalid(p.Child("maxDeadlineMs"), *v, "must be between 1 and 3600000"))
	}
	if v := s.MaxAttempts; v != nil && (*v < 1 || *v > 5) {
		errs = append(errs, field.Invalid(p.Child("maxAttempts"), *v, "must be between 1 and 5"))
	}
	return errs.ToAggregate()
}

// Validate checks the selector against the CRD schema and its CEL rules: every part it
// accepts can be evaluated by metav1.LabelSelectorAsSelector. Errors name paths under
// spec.selector. A nil selector (all ModelDeployments of the namespace) is valid.
func (s *LabelSelector) Validate() error {
	return s.validate(field.NewPath("spec", "selector")).ToAggregate()
}

func (s *LabelSelector) validate(p *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	ml := p.Child("matchLabels")
	if len(s.MatchLabels) > 16 {
		errs = append(errs, field.TooMany(ml, len(s.MatchLabels), 16))
	}
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic messages
	badKey := false
	for _, k := range keys {
		badKey = badKey || !validLabelKey(k)
		errs = append(errs, labelValue(ml.Key(k), s.MatchLabels[k])...)
	}
	if badKey {
		errs = append(errs, field.Invalid(ml, omit, msgMatchLabelsKey))
	}
	me := p.Child("matchExpressions")
	if len(s.MatchExpressions) > 16 {
		errs = append(errs, field.TooMany(me, len(s.MatchExpressions), 16))
	}
	for i, r := range s.MatchExpressions {
		rp := me.Index(i)
		if r.Key == "" {
			errs = append(errs, field.Required(rp.Child("key"), ""))
		} else if len(r.Key) > 317 || !validLabelKey(string(r.Key)) {
			errs = append(errs, field.Invalid(rp.Child("key"), string(r.Key), msgLabelKey))
		}
		switch r.Operator {
		case LabelSelectorOpIn, LabelSelectorOpNotIn:
			if len(r.Values) == 0 {
				errs = append(errs, field.Invalid(rp, omit, msgValuesRequired))
			}
		case LabelSelectorOpExists, LabelSelectorOpDoesNotExist:
			if len(r.Values) > 0 {
				errs = append(errs, field.Invalid(rp, omit, msgValuesForbidden))
			}
		case "":
			errs = append(errs, field.Required(rp.Child("operator"), ""))
		default:
			errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, []LabelSelectorOperator{
				LabelSelectorOpIn, LabelSelectorOpNotIn, LabelSelectorOpExists, LabelSelectorOpDoesNotExist}))
		}
		if len(r.Values) > 32 {
			errs = append(errs, field.TooMany(rp.Child("values"), len(r.Values), 32))
		}
		for j, v := range r.Values {
			errs = append(errs, labelValue(rp.Child("values").Index(j), v)...)
		}
	}
	return errs
}

// validLabelKey: a name of 1..63 characters after an optional DNS-subdomain prefix of at
// most 253 characters.
func validLabelKey(k string) bool {
	return len(k) <= 317 && strings.Index(k, "/") <= 253 && labelKeyPattern.MatchString(k)
}

func labelValue(p *field.Path, v LabelValue) field.ErrorList {
	if len(v) > 63 || !labelValuePattern.MatchString(string(v)) {
		return field.ErrorList{field.Invalid(p, string(v), msgLabelValue)}
	}
	return nil
}

func validInput(m InputModality) bool {
	switch m {
	case InputText, InputJSON, InputImage, InputAudio, InputVideo, InputFile:
		return true
	}
	return false
}

func validOutput(m OutputModality) bool {
	switch m {
	case OutputText, OutputJSON, OutputImage, OutputAudio, OutputVideo:
		return true
	}
	return false
}

// modalities checks a modality list: bounds, enum, uniqueness. nonEmpty requires ≥ 1 item
// when the list is present (the CRD's minItems).
func modalities[M ~string](p *field.Path, list []M, nonEmpty bool, maxItems int, valid func(M) bool, dupMsg string) field.ErrorList {
	var errs field.ErrorList
	if nonEmpty && len(list) == 0 {
		errs = append(errs, field.Invalid(p, list, "must have at least 1 item"))
	}
	if len(list) > maxItems {
		errs = append(errs, field.TooMany(p, len(list), maxItems))
	}
	for i, m := range list {
		if !valid(m) {
			errs = append(errs, field.NotSupported[string](p.Index(i), string(m), nil))
		}
	}
	if !unique(list) {
		errs = append(errs, field.Invalid(p, list, dupMsg))
	}
	return errs
}

func length(p *field.Path, v string, lo, hi int) field.ErrorList {
	if n := len(v); n < lo || n > hi {
		return field.ErrorList{field.Invalid(p, v, fmt.Sprintf("must be %d..%d characters", lo, hi))}
	}
	return nil
}

func patterned(p *field.Path, v string, lo, hi int, re *regexp.Regexp) field.ErrorList {
	if errs := length(p, v, lo, hi); errs != nil {
		return errs
	}
	if !re.MatchString(v) {
		return field.ErrorList{field.Invalid(p, v, "must match "+re.String())}
	}
	return nil
}

func unique[T comparable](list []T) bool {
	seen := make(map[T]struct{}, len(list))
	for _, v := range list {
		if _, dup := seen[v]; dup {
			return false
		}
		seen[v] = struct{}{}
	}
	return true
}
