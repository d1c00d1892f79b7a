package openai

import (
	"bytes"
	"encoding/json"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Translation of OpenAI request pieces into protocol parts and options, shared by the
// endpoints of this door (spec/compat.md): media given as data: URLs, http(s) URLs or
// base64, function tools, tool choices and metadata. Each function checks what it
// translates with the native API's own grammar, so that a refusal names the OpenAI
// location (the caller's param) rather than the native field the request would have
// failed on later; DecodeRequest still checks everything again.

// Fixed rules of the translations' refusals.
const (
	ruleImageURL   = "must be an http(s) URL or a data: URL with base64 image content"
	ruleDataURL    = "must be a data: URL with base64 content and a media type"
	ruleBase64     = "must be non-empty canonical standard base64 (padded, no line breaks)"
	ruleAudioFmt   = "must be wav or mp3"
	ruleFileName   = "must be 1 to 255 characters without control characters"
	ruleToolName   = "must match " + protocol.ToolNamePattern
	ruleSchema     = "must be a JSON Schema object"
	ruleCallID     = "must be 1 to 256 characters"
	ruleMetaCount  = "must hold at most 16 entries, user included"
	ruleMetaKey    = "keys must match " + protocol.MetadataKeyPattern
	ruleMetaValue  = "values must be strings of at most 256 characters"
	ruleMediaType  = "must name a media type such as image/png"
	ruleURILength  = "must be an absolute URL of printable ASCII, at most 8192 characters"
	ruleFileDataID = "file_id is not supported: send the file inline as file_data"
)

var (
	mediaTypeRE   = regexp.MustCompile(protocol.MediaTypePattern)
	toolNameRE    = regexp.MustCompile(protocol.ToolNamePattern)
	metadataKeyRE = regexp.MustCompile(protocol.MetadataKeyPattern)
	uriRE         = regexp.MustCompile(protocol.URIPattern)
)

// parseDataURL splits a data: URL with base64 content (RFC 2397) into its media type,
// lower-cased and without parameters, and its content; ok is false for anything else. A
// URL that names no media type has none ("").
func parseDataURL(s string) (mediaType, data string, ok bool) {
	if len(s) < 5 || !strings.EqualFold(s[:5], "data:") {
		return "", "", false
	}
	header, data, found := strings.Cut(s[5:], ",")
	if !found {
		return "", "", false
	}
	params := strings.Split(header, ";")
	if len(params) < 2 || !strings.EqualFold(strings.TrimSpace(params[len(params)-1]), "base64") {
		return "", "", false
	}
	return strings.ToLower(strings.TrimSpace(params[0])), data, true
}

// imageExtensions give an image referenced by URL its media type, from the extension of
// the URL's path.
var imageExtensions = map[string]string{
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
	".webp": "image/webp", ".heic": "image/heic", ".heif": "image/heif", ".bmp": "image/bmp",
}

// defaultImageType is the media type of an image URL whose path has no known image
// extension: the native API needs one, the runtime never fetches the URL to sniff it,
// and JPEG is what such URLs (CDN and photo links) mostly serve. Providers that read the
// image themselves (every bundled one but Gemini) ignore it.
const defaultImageType = "image/jpeg"

// imagePart translates an image URL (image_url.url, input_image.image_url): a data: URL
// is an image part with its data and media type, an http(s) URL one with the URL as uri
// (passed to the provider, never fetched by the runtime). It returns the rule refused.
func imagePart(url string) (protocol.Part, string) {
	if mt, data, ok := parseDataURL(url); ok {
		if !strings.HasPrefix(mt, "image/") || !mediaTypeRE.MatchString(mt) {
			return protocol.Part{}, ruleImageURL
		}
		if !protocol.CanonicalBase64(data) {
			return protocol.Part{}, ruleBase64
		}
		return protocol.Part{Type: protocol.PartImage, MediaType: mt, Data: data}, ""
	}
	lower := strings.ToLower(url[:min(len(url), 8)])
	if !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "http://") {
		return protocol.Part{}, ruleImageURL
	}
	if len(url) > protocol.MaxURILength || !uriRE.MatchString(url) {
		return protocol.Part{}, ruleURILength
	}
	p := url
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	mt := imageExtensions[strings.ToLower(path.Ext(p))]
	if mt == "" {
		mt = defaultImageType
	}
	return protocol.Part{Type: protocol.PartImage, MediaType: mt, URI: url}, ""
}

// audioFormats are the input_audio formats OpenAI documents, with their media types.
var audioFormats = map[string]string{"wav": "audio/wav", "mp3": "audio/mpeg"}

// audioPart translates input_audio: base64 data in a named format. rule names the field
// refused, "data" or "format", with its rule.
func audioPart(data, format string) (p protocol.Part, field, rule string) {
	mt := audioFormats[format]
	if mt == "" {
		return protocol.Part{}, "format", ruleAudioFmt
	}
	if !protocol.CanonicalBase64(data) {
		return protocol.Part{}, "data", ruleBase64
	}
	return protocol.Part{Type: protocol.PartAudio, MediaType: mt, Data: data}, "", ""
}

// fileExtensions give a file sent as bare base64 its media type, from its file name.
var fileExtensions = map[string]string{
	".pdf": "application/pdf", ".txt": "text/plain", ".md": "text/markdown", ".csv": "text/csv",
	".json": "application/json", ".html": "text/html", ".xml": "application/xml",
}

// defaultFileType is the media type of bare base64 file data whose name says nothing.
// OpenAI takes PDF files as file inputs; the name usually says so.
const defaultFileType = "application/octet-stream"

// filePart translates an inline file (file.file_data with file.filename, input_file): a
// data: URL gives its media type, bare base64 takes the type its file name's extension
// implies. field names the member refused ("file_data", "filename") with its rule.
func filePart(fileData, filename string) (p protocol.Part, field, rule string) {
	if filename != "" && (utf8.RuneCountInString(filename) > protocol.MaxFileNameLength || strings.ContainsFunc(filename, isControl)) {
		return protocol.Part{}, "filename", ruleFileName
	}
	mt, data, ok := parseDataURL(fileData)
	switch {
	case ok:
		if !mediaTypeRE.MatchString(mt) || len(mt) > protocol.MaxMediaTypeLength {
			return protocol.Part{}, "file_data", ruleMediaType
		}
	case strings.HasPrefix(strings.ToLower(fileData), "data:"):
		return protocol.Part{}, "file_data", ruleDataURL
	default:
		data = fileData
		mt = fileExtensions[strings.ToLower(path.Ext(filename))]
		if mt == "" {
			mt = defaultFileType
		}
	}
	if !protocol.CanonicalBase64(data) {
		return protocol.Part{}, "file_data", ruleBase64
	}
	return protocol.Part{Type: protocol.PartFile, MediaType: mt, Data: data, Name: filename}, "", ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// emptyParameters is the input schema of a function declared without one: OpenAI's
// "no parameters", which the native tool part spells out.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// toolPart translates a function tool. parameters is nil when the function declared
// none. field names the member refused ("name") with its rule.
func toolPart(name, description string, parameters json.RawMessage) (p protocol.Part, field, rule string) {
	if !toolNameRE.MatchString(name) {
		return protocol.Part{}, "name", ruleToolName
	}
	if parameters == nil {
		parameters = emptyParameters
	}
	return protocol.Part{Type: protocol.PartTool, Name: name, Description: description, Parameters: parameters}, "", ""
}

// validCallID reports whether id can be a tool call's id natively.
func validCallID(id string) bool {
	return id != "" && utf8.RuneCountInString(id) <= protocol.MaxCallIDLength
}

// metadataRule is the rule metadata m breaks as execution metadata, or "". OpenAI's own
// limits are looser (64-character keys of any form, 512-character values); the door
// takes what the native API stores, and says so.
func metadataRule(m map[string]string) string {
	if len(m) > protocol.MaxMetadataEntries {
		return ruleMetaCount
	}
	for k, v := range m {
		if !metadataKeyRE.MatchString(k) {
			return ruleMetaKey
		}
		if utf8.RuneCountInString(v) > protocol.MaxMetadataValueLength {
			return ruleMetaValue
		}
	}
	return ""
}

// toolChoiceValue is the generation.tool_choice of an OpenAI tool choice: a mode, or
// "tool:<name>" for a named function.
func toolChoiceValue(mode, function string) string {
	if function != "" {
		return "tool:" + function
	}
	return mode
}

// schemaMetadata are the members of a JSON Schema's root that only describe the
// schema document (its dialect and its own URI). Schema generators put them there
// (zod-to-json-schema writes "$schema"), providers do not need them, and their URL
// values would be refused by the extension registry, which lets no URL reach a provider.
var schemaMetadata = []string{"$schema", "$id"}

// upstreamSchema is schema, a JSON object, without its root's schemaMetadata members.
// A schema without them, the usual case, is returned as it is.
func upstreamSchema(schema json.RawMessage) json.RawMessage {
	if !bytes.Contains(schema, []byte(`"$schema"`)) && !bytes.Contains(schema, []byte(`"$id"`)) {
		return schema
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(schema, &members); err != nil {
		return schema // not an object: the native decoder refuses it with its location
	}
	for _, k := range schemaMetadata {
		delete(members, k)
	}
	out, err := json.Marshal(members)
	if err != nil {
		return schema
	}
	return out
}
