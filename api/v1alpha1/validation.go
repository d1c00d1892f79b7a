package v1alpha1

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// This file mirrors the CRD schema and CEL rules in Go, for objects that never pass an API
// server (standalone mode reads them from files) and as a defensive check in the
// controllers. The CEL messages are repeated verbatim so both paths read the same; a shared
// manifest table runs against envtest and against these functions and they must agree.

var (
	abilityPattern   = regexp.MustCompile(`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`)
	dnsSubdomain     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	secretKeyPattern = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	extensionPattern = regexp.MustCompile(`^[a-z][a-z0-9-]*\.(\*|[a-z][a-z0-9_.-]*\*?)$`)
)

// Validate checks spec against the ModelDeployment schema and its CEL rules.
func (s *ModelDeploymentSpec) Validate() error {
	return s.validate(field.NewPath("spec")).ToAggregate()
}

func (s *ModelDeploymentSpec) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch s.Provider {
	case ProviderOpenAI, ProviderOpenAICompatible, ProviderAnthropic, ProviderReplicate:
	case "":
		errs = append(errs, field.Required(p.Child("provider"), ""))
	default:
		errs = append(errs, field.NotSupported(p.Child("provider"), s.Provider,
			[]Provider{ProviderOpenAI, ProviderOpenAICompatible, ProviderAnthropic, ProviderReplicate}))
	}
	errs = append(errs, length(p.Child("model"), s.Model, 1, 256)...)
	if s.Endpoint != "" {
		ep := p.Child("endpoint")
		errs = append(errs, length(ep, s.Endpoint, 0, 2048)...)
		if u, err := url.Parse(s.Endpoint); err != nil || !u.IsAbs() || u.Host == "" ||
			(u.Scheme != "https" && u.Scheme != "http") {
			errs = append(errs, field.Invalid(ep, s.Endpoint, "endpoint must be an absolute http(s) URL"))
		}
		if strings.ContainsAny(s.Endpoint, "@?#") {
			errs = append(errs, field.Invalid(ep, s.Endpoint, "endpoint must not carry user info, a query or a fragment"))
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
	if s.Provider == ProviderOpenAICompatible && s.Endpoint == "" {
		errs = append(errs, field.Invalid(p, "", "endpoint is required for provider openai-compatible"))
	}
	if s.Provider != ProviderOpenAICompatible && s.Credentials == nil {
		errs = append(errs, field.Invalid(p, "", "credentials.secretRef is required for every provider except openai-compatible"))
	}
	if s.Endpoint != "" && !strings.HasPrefix(s.Endpoint, "https://") && !s.AllowInsecureEndpoint {
		errs = append(errs, field.Invalid(p, "", "endpoint must use https unless allowInsecureEndpoint is true"))
	}
	if s.Provider == ProviderReplicate {
		if s.Capabilities == nil || s.Capabilities.Input == nil || s.Capabilities.Output == nil {
			errs = append(errs, field.Invalid(p, "", "provider replicate must declare capabilities.input and capabilities.output"))
		}
		if s.Capabilities != nil && s.Capabilities.Streaming {
			errs = append(errs, field.Invalid(p, "", "provider replicate cannot declare capabilities.streaming: true"))
		}
	}
	return errs
}

// Validate checks spec against the CapabilityPolicy schema and its CEL rules.
func (s *CapabilityPolicySpec) Validate() error {
	p := field.NewPath("spec")
	var errs field.ErrorList
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
