package replicate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// status is a prediction's status as Replicate reports it.
type status string

// The documented prediction statuses. Replicate may add more; an unknown status is
// treated as still running (the attempt's deadline bounds the polling).
const (
	statusStarting   status = "starting"   // waiting for a worker (cold boot or queue)
	statusProcessing status = "processing" // the model's predict() is running
	statusSucceeded  status = "succeeded"
	statusFailed     status = "failed"   // the model raised an error on this input
	statusCanceled   status = "canceled" // cancelled by a user, or past a deadline after it started
	statusAborted    status = "aborted"  // past a deadline before it started; not billed
)

func (s status) terminal() bool {
	switch s {
	case statusSucceeded, statusFailed, statusCanceled, statusAborted:
		return true
	}
	return false
}

// prediction is the part of Replicate's prediction object the adapter reads. The input,
// the error text and the logs beyond their last line are never surfaced: they may hold
// the caller's content or, from a hostile upstream, anything at all.
type prediction struct {
	ID     string          `json:"id"`
	Status status          `json:"status"`
	Output json.RawMessage `json:"output"`
	Logs   string          `json:"logs"`
	// CompletedAt is kept as text: a malformed time only loses the artifacts' expiry.
	CompletedAt string         `json:"completed_at"`
	URLs        predictionURLs `json:"urls"`
	Metrics     struct {
		PredictTime *float64 `json:"predict_time"`
	} `json:"metrics"`
}

// predictionURLs are the absolute URLs Replicate names for a prediction: polling it and
// cancelling it. They are used only on the endpoint's origin (adapter.sameOrigin).
type predictionURLs struct {
	Get    string `json:"get"`
	Cancel string `json:"cancel,omitempty"`
}

// completedAt returns completed_at when it is a valid time.
func (p *prediction) completedAt() (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, p.CompletedAt)
	return t, err == nil
}

// fileLifetime is how long Replicate keeps the output files of API-created predictions
// ("automatically deleted after an hour"); artifacts expire that long after completion.
const fileLifetime = time.Hour

// maxProgressMessage bounds execution.progress messages, in characters.
const maxProgressMessage = 200

// progress returns the progress a prediction in status st with these logs reports:
// queued while starting, running while processing (with the last non-empty log line,
// cleaned and cut to maxProgressMessage characters). ok is false for other statuses.
func progress(st status, logs string, redact func(string) string) (d protocol.ProgressData, ok bool) {
	switch st {
	case statusStarting:
		return protocol.ProgressData{Stage: protocol.StageQueued}, true
	case statusProcessing:
		return protocol.ProgressData{Stage: protocol.StageRunning, Message: lastLogLine(logs, redact)}, true
	}
	return protocol.ProgressData{}, false
}

// lastLogLine returns the last non-blank line of logs. Carriage returns end lines too:
// progress bars (tqdm) redraw themselves with them, and the latest redraw is the news.
func lastLogLine(logs string, redact func(string) string) string {
	for {
		i := strings.LastIndexAny(logs, "\r\n")
		if line := cleanLine(redact(logs[i+1:])); line != "" {
			return line
		}
		if i < 0 {
			return ""
		}
		logs = logs[:i]
	}
}

// cleanLine makes a log line fit for a progress message: valid UTF-8, no control
// characters, trimmed, and at most maxProgressMessage characters.
func cleanLine(s string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > maxProgressMessage {
		s = strings.TrimSpace(string([]rune(s)[:maxProgressMessage]))
	}
	return s
}

// artifacts lists, in document order and without repeats, every string value anywhere
// in output that is an absolute http(s) URL: Replicate returns files as URLs, whether the
// output is one URL, a list of them or an object holding them. Each artifact's media type
// is guessed from the URL path's extension; it expires fileLifetime after completed
// (when known).
func artifacts(output json.RawMessage, completed time.Time, known bool) []protocol.Artifact {
	out := []protocol.Artifact{}
	var expires *time.Time
	if known {
		t := completed.Add(fileLifetime).UTC()
		expires = &t
	}
	seen := map[string]bool{}
	_ = walkStrings(output, func(s string) {
		u, ok := fileURL(s)
		if !ok || seen[s] {
			return
		}
		seen[s] = true
		out = append(out, protocol.Artifact{URI: s, MediaType: mediaTypeOf(u), ExpiresAt: expires})
	})
	return out
}

// walkStrings calls fn for every string value (not object key) in the JSON document b,
// in document order. It reads tokens rather than decoding into maps, which would lose
// the order.
func walkStrings(b []byte, fn func(string)) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	// frames records, per open container, whether it is an object and whether the next
	// token in it is a key.
	type frame struct{ object, wantKey bool }
	var frames []frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if n := len(frames); n > 0 && frames[n-1].object {
			top := &frames[n-1]
			if tok == json.Delim('}') {
				frames = frames[:n-1]
				continue
			}
			if top.wantKey {
				top.wantKey = false
				continue // tok is a key
			}
			top.wantKey = true // tok is (or opens) a value; a key follows it
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				frames = append(frames, frame{object: true, wantKey: true})
			case '[':
				frames = append(frames, frame{})
			case ']':
				frames = frames[:len(frames)-1]
			}
		case string:
			fn(t)
		}
	}
}

// fileURL reports whether s is an absolute http(s) URL fit to be an artifact.
func fileURL(s string) (*url.URL, bool) {
	if len(s) > protocol.MaxURILength || strings.ContainsFunc(s, unicode.IsSpace) {
		return nil, false
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, false
	}
	return u, true
}

// mediaTypeOf guesses a file URL's media type from its extension.
func mediaTypeOf(u *url.URL) string {
	if ext := path.Ext(u.Path); ext != "" {
		if mt := mime.TypeByExtension(ext); mt != "" {
			return mt
		}
	}
	return "application/octet-stream"
}
