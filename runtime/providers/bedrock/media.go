package bedrock

import (
	"strconv"
	"strings"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Converse names a media block's format rather than its media type. These tables map
// the media types a part may carry to the documented format values (ImageBlock,
// VideoBlock and DocumentBlock "format"); any other media type is refused before
// sending, as the API would refuse the block.
var (
	imageFormats = map[string]string{
		"image/png":  "png",
		"image/jpeg": "jpeg",
		"image/gif":  "gif",
		"image/webp": "webp",
	}
	videoFormats = map[string]string{
		"video/mp4":        "mp4",
		"video/quicktime":  "mov",
		"video/x-matroska": "mkv",
		"video/webm":       "webm",
		"video/x-flv":      "flv",
		"video/mpeg":       "mpeg",
		"video/x-ms-wmv":   "wmv",
		"video/3gpp":       "three_gp",
	}
	documentFormats = map[string]string{
		"application/pdf":    "pdf",
		"text/csv":           "csv",
		"application/msword": "doc",
		"application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
		"application/vnd.ms-excel": "xls",
		"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
		"text/html":     "html",
		"text/plain":    "txt",
		"text/markdown": "md",
	}
)

func imageFormat(mediaType string) (string, bool)    { return formatOf(imageFormats, mediaType) }
func videoFormat(mediaType string) (string, bool)    { return formatOf(videoFormats, mediaType) }
func documentFormat(mediaType string) (string, bool) { return formatOf(documentFormats, mediaType) }

// formatOf looks up a media type without its parameters ("text/plain; charset=utf-8" is
// text/plain); the decoder has already made it lower case.
func formatOf(table map[string]string, mediaType string) (string, bool) {
	essence, _, _ := strings.Cut(mediaType, ";")
	f, ok := table[strings.ToLower(strings.TrimSpace(essence))]
	return f, ok
}

// s3Scheme is the only URI scheme Converse can reference media by (s3Location).
const s3Scheme = "s3://"

// sourceOf is a media part's source: its base64 data as the bytes member (the part's
// data is already canonical base64, which is how the JSON protocol carries a blob), or
// an s3:// URI as s3Location. Any other URI — https:// included — has no Converse form
// (the runtime never fetches URIs), so ok is false.
func sourceOf(p *protocol.Part) (mediaSource, bool) {
	if p.URI == "" {
		return mediaSource{Bytes: p.Data}, true
	}
	if len(p.URI) > len(s3Scheme) && strings.EqualFold(p.URI[:len(s3Scheme)], s3Scheme) {
		return mediaSource{S3Location: &s3Location{URI: s3Scheme + p.URI[len(s3Scheme):]}}, true
	}
	return mediaSource{}, false
}

// Bounds of a DocumentBlock name: 1 to 200 characters of letters, digits, single
// spaces, hyphens, parentheses and square brackets.
const (
	maxDocumentName = 200
	// nameRoom is left for a " (n)" suffix that keeps names unique.
	nameRoom = 12
)

// documentNamer gives each document of one request a name Bedrock accepts and no other
// document of the request has. The API requires a name and restricts its characters, and
// AWS recommends a neutral one because the model reads it: the part's file name is kept
// as far as it fits (its extension dropped — the format says it — and every other
// character replaced by a hyphen), a part without one is "document", and a repeated name
// gets " (2)", " (3)", ….
type documentNamer struct {
	used map[string]bool
}

func newDocumentNamer() *documentNamer { return &documentNamer{used: map[string]bool{}} }

func (n *documentNamer) name(fileName string) string {
	base := sanitizeDocumentName(fileName)
	if base == "" {
		base = "document"
	}
	name := base
	for k := 2; n.used[name]; k++ {
		name = base + " (" + strconv.Itoa(k) + ")"
	}
	n.used[name] = true
	return name
}

// sanitizeDocumentName maps a file name to the documented character set.
func sanitizeDocumentName(s string) string {
	if i := strings.LastIndexByte(s, '.'); i > 0 {
		s = s[:i]
	}
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case r == ' ' || r == '\t':
			space = b.Len() > 0
			continue
		case r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '(' || r == ')' || r == '[' || r == ']'):
		default:
			r = '-'
		}
		if b.Len()+2 > maxDocumentName-nameRoom {
			break
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}
