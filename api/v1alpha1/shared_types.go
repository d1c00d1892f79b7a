package v1alpha1

// AbilityName names a task a model serves, such as "chat" or "summarize". Requests ask for
// an ability; only models listing it are eligible. Same grammar as the request's "ability".
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9]*([._-][a-z0-9]+)*$`
type AbilityName string

// InputModality is a kind of input part a model accepts.
// +kubebuilder:validation:Enum=text;json;image;audio;video;file
type InputModality string

const (
	// InputText: text parts.
	InputText InputModality = "text"
	// InputJSON: json parts (data for the model, never provider parameters).
	InputJSON InputModality = "json"
	// InputImage: image parts.
	InputImage InputModality = "image"
	// InputAudio: audio parts.
	InputAudio InputModality = "audio"
	// InputVideo: video parts.
	InputVideo InputModality = "video"
	// InputFile: file parts (documents).
	InputFile InputModality = "file"
)

// OutputModality is a kind of output a model produces.
// +kubebuilder:validation:Enum=text;json;image;audio;video
type OutputModality string

const (
	// OutputText: text output.
	OutputText OutputModality = "text"
	// OutputJSON: JSON output.
	OutputJSON OutputModality = "json"
	// OutputImage: images (as artifacts or in the provider's result).
	OutputImage OutputModality = "image"
	// OutputAudio: audio.
	OutputAudio OutputModality = "audio"
	// OutputVideo: video.
	OutputVideo OutputModality = "video"
)

// Capabilities is what one configured model accepts and produces. Capabilities are
// declared by the platform team, not probed: the router trusts them and never sends a
// model a request that needs more.
type Capabilities struct {
	// input lists the input modalities the model accepts. When omitted, the text providers
	// (openai, openai-compatible, anthropic) accept [text, json]; replicate must declare it.
	// What an adapter can never send is refused: video on openai and openai-compatible;
	// anything but text, json and image on anthropic.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=6
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="capabilities.input must not repeat a modality"
	Input []InputModality `json:"input,omitempty"`

	// output lists the output modalities the model produces. When omitted, the text
	// providers produce [text]; replicate must declare it. The text providers (openai,
	// openai-compatible, anthropic) can declare only text and json.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y == x))",message="capabilities.output must not repeat a modality"
	Output []OutputModality `json:"output,omitempty"`

	// tools declares that the model supports tool calling. Default false: requests with
	// tool, tool_call or tool_result parts are never routed to it. Not for replicate.
	// +optional
	Tools bool `json:"tools,omitempty"`

	// streaming declares that the model streams output incrementally. Default false: the
	// adapter makes one non-streaming call and emits the whole output as one delta. Not
	// for replicate.
	// +optional
	Streaming bool `json:"streaming,omitempty"`

	// structuredOutput declares schema-enforced JSON output. Default false. Not for
	// replicate.
	// +optional
	StructuredOutput bool `json:"structuredOutput,omitempty"`
}

// EffectiveCapabilities is what routing uses for a model: its declared capabilities, with
// the provider's defaults filled in, narrowed by every CapabilityPolicy that selects it.
// Every field is always written.
type EffectiveCapabilities struct {
	// input lists the input modalities the model may receive.
	// +optional
	// +kubebuilder:validation:MaxItems=6
	Input []InputModality `json:"input"`

	// output lists the output modalities the model may produce.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	Output []OutputModality `json:"output"`

	// tools is true when tool calling is declared and no policy disables it.
	// +optional
	Tools bool `json:"tools"`

	// streaming is true when incremental output is declared.
	// +optional
	Streaming bool `json:"streaming"`

	// structuredOutput is true when schema-enforced JSON output is declared.
	// +optional
	StructuredOutput bool `json:"structuredOutput"`
}
