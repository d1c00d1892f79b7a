package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Defaults shared by the flags and by newServer when a config field is zero.
const (
	defaultAddr          = "127.0.0.1:9090"
	defaultChunks        = 5
	defaultDelay         = 20 * time.Millisecond
	defaultSlowDelay     = 500 * time.Millisecond
	defaultJobDuration   = 1500 * time.Millisecond
	defaultPredictionTTL = 30 * time.Minute
)

// maxBodyBytes bounds a request body. It is above the runtime's own 8 MiB request limit
// because an adapter may re-encode inline media a little larger than it received it.
const maxBodyBytes = 16 << 20

// fallbackText is echoed when a request carries no text at all (e.g. an image only).
const fallbackText = "demoprovider: no text to echo"

// config is the server's behaviour. The zero value of every field selects its default,
// except APIKey (empty disables authentication) and Delay (zero means no pacing).
type config struct {
	// Chunks is how many pieces an echoed text is split into (fewer if it is shorter).
	Chunks int
	// Delay is the pause before each streamed piece (and, summed, before a
	// non-streaming answer).
	Delay time.Duration
	// SlowDelay replaces Delay for models whose name contains "slow".
	SlowDelay time.Duration
	// APIKey, when set, must be presented as the provider's credential header.
	APIKey string
	// JobDuration is how long a Replicate prediction takes from creation to its
	// terminal state.
	JobDuration time.Duration
	// PredictionTTL is how long a prediction is remembered after creation.
	PredictionTTL time.Duration
	// Now is the clock for Replicate progress; tests replace it. Pacing delays always
	// use real time.
	Now func() time.Time
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c config) withDefaults() config {
	if c.Chunks <= 0 {
		c.Chunks = defaultChunks
	}
	if c.SlowDelay <= 0 {
		c.SlowDelay = defaultSlowDelay
	}
	if c.JobDuration <= 0 {
		c.JobDuration = defaultJobDuration
	}
	if c.PredictionTTL <= 0 {
		c.PredictionTTL = defaultPredictionTTL
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// server holds the fake providers' state: a counter for deterministic ids, the
// Replicate predictions and the counters of GET /stats. Everything else is derived from
// each request.
type server struct {
	cfg         config
	seq         atomic.Uint64
	predictions *predictionStore
	stats       stats
}

// newServer returns the demo provider's handler. It is safe for concurrent use.
func newServer(cfg config) http.Handler {
	cfg = cfg.withDefaults()
	s := &server{cfg: cfg, predictions: newPredictionStore(cfg.PredictionTTL)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /stats", s.serveStats)
	mux.HandleFunc("POST /openai/v1/chat/completions", s.openAIChat)
	mux.HandleFunc("POST /anthropic/v1/messages", s.anthropicMessages)
	mux.HandleFunc("POST /replicate/v1/models/{owner}/{name}/predictions", s.replicateCreate)
	mux.HandleFunc("POST /replicate/v1/predictions", s.replicateCreate)
	mux.HandleFunc("GET /replicate/v1/predictions/{id}", s.replicateGet)
	mux.HandleFunc("POST /replicate/v1/predictions/{id}/cancel", s.replicateCancel)
	mux.HandleFunc("GET /replicate/files/{file}", s.replicateFile)
	// Gemini and Bedrock are reached at their real paths (no provider prefix): the
	// adapters build those paths themselves below a configurable base URL.
	mux.HandleFunc("POST /v1beta/models/{modelMethod}", s.geminiAPI)
	mux.HandleFunc("POST /v1/models/{modelMethod}", s.geminiAPI)
	mux.HandleFunc("POST /v1/projects/{project}/locations/{location}/publishers/google/models/{modelMethod}", s.vertexAI)
	mux.HandleFunc("POST /model/{modelId}/converse", s.bedrockConverse)
	mux.HandleFunc("POST /model/{modelId}/converse-stream", s.bedrockConverseStream)
	return mux
}

// nextID returns a process-unique, deterministic id with the given prefix.
func (s *server) nextID(prefix string) string {
	return fmt.Sprintf("%s%06d", prefix, s.seq.Add(1))
}

// authorized reports whether r carries the configured API key in header, after the
// optional scheme prefixes (e.g. "Bearer "). With no key configured every request passes.
func (s *server) authorized(r *http.Request, header string, schemes ...string) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	v := r.Header.Get(header)
	if len(schemes) > 0 {
		matched := false
		for _, scheme := range schemes {
			if len(v) > len(scheme) && strings.EqualFold(v[:len(scheme)], scheme) {
				v, matched = v[len(scheme):], true
				break
			}
		}
		if !matched {
			return false
		}
	}
	return subtle.ConstantTimeCompare([]byte(v), []byte(s.cfg.APIKey)) == 1
}

// scenario is the scripted behaviour a request selects through its model name.
type scenario struct {
	// status, when non-zero, is answered at once with the provider's error body.
	status int
	// slow paces pieces with SlowDelay instead of Delay (Replicate: a 5× longer job).
	slow bool
	// stall sends the first piece, then waits for the client to go away (Replicate: the
	// prediction never leaves processing).
	stall bool
	// truncate ends the stream right after the last piece, without the terminal frames.
	truncate bool
	// fail makes a Replicate prediction end failed.
	fail bool
	// throttleInStream opens a Bedrock stream with a throttlingException frame and
	// nothing else (non-streaming: a 429 ThrottlingException).
	throttleInStream bool
	// describe answers with a description of the last user message's media parts
	// (OpenAI, Anthropic) instead of its text, when it has any.
	describe bool
	// refuse ends an Anthropic answer with stop reason refusal.
	refuse bool
}

// scenarioFor derives the scripted behaviour from a model name; see README.md.
func scenarioFor(model string) scenario {
	m := strings.ToLower(model)
	sc := scenario{
		slow:             strings.Contains(m, "slow"),
		stall:            strings.Contains(m, "stall"),
		truncate:         strings.Contains(m, "truncate"),
		fail:             strings.Contains(m, "fail"),
		throttleInStream: strings.Contains(m, "exception-throttling"),
		describe:         strings.Contains(m, "describe"),
		refuse:           strings.Contains(m, "refuse"),
	}
	switch {
	case strings.Contains(m, "error-503"):
		sc.status = http.StatusServiceUnavailable
	case strings.Contains(m, "error-429"):
		sc.status = http.StatusTooManyRequests
	case strings.Contains(m, "error-401"):
		sc.status = http.StatusUnauthorized
	}
	return sc
}

// pacing is the delay before each piece under sc.
func (s *server) pacing(sc scenario) time.Duration {
	if sc.slow {
		return s.cfg.SlowDelay
	}
	return s.cfg.Delay
}

// errBadJSON marks a body that is not the JSON object the endpoint expects.
var errBadJSON = errors.New("body is not a valid JSON object")

// decodeBody reads r's JSON body into v, bounded by maxBodyBytes. Unknown fields are
// accepted, as the real providers accept them.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := json.NewDecoder(body).Decode(v); err != nil {
		return errBadJSON
	}
	return nil
}

// sleep waits d, or less if ctx ends first, in which case it returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// splitText cuts text into at most n pieces of nearly equal rune counts (earlier pieces
// take the remainder), never splitting a rune and never producing an empty piece. The
// split depends only on text and n, so tests can predict every frame.
func splitText(text string, n int) []string {
	runes := utf8.RuneCountInString(text)
	if runes == 0 {
		return []string{""}
	}
	n = max(1, min(n, runes))
	pieces := make([]string, 0, n)
	size, extra := runes/n, runes%n
	rest := text
	for i := range n {
		take := size
		if i < extra {
			take++
		}
		end := 0
		for range take {
			_, w := utf8.DecodeRuneInString(rest[end:])
			end += w
		}
		pieces = append(pieces, rest[:end])
		rest = rest[end:]
	}
	return pieces
}

// toolArgumentFragments is the scripted tool call's arguments, {"city":"Paris"}, cut
// where a tokenizer plausibly would, so clients must accumulate before parsing.
var toolArgumentFragments = []string{`{"`, `city`, `":"`, `Paris`, `"}`}

// toolArguments is the concatenation of toolArgumentFragments.
const toolArguments = `{"city":"Paris"}`

// countWords is the deterministic stand-in for a token count: whitespace-separated
// words across texts, at least 1.
func countWords(texts ...string) int {
	n := 0
	for _, t := range texts {
		n += len(strings.Fields(t))
	}
	return max(1, n)
}

// answer is what a chat request gets back, independent of the wire format.
type answer struct {
	// tool names the tool to call; empty for a text answer.
	tool string
	// pieces are the text's pieces, or the tool call's argument fragments.
	pieces []string
	// promptTokens is the word count of every text in the request.
	promptTokens int
}

// text is the whole answer text (or the whole arguments for a tool call).
func (a answer) text() string { return strings.Join(a.pieces, "") }

// completionTokens is one token per piece.
func (a answer) completionTokens() int { return len(a.pieces) }

// newAnswer scripts the answer to a conversation. last is the text to echo (the last
// user text, or the tool result when the conversation ends with one); firstTool is the
// first declared tool, if any. A conversation that offers tools and does not end with a
// tool result gets a call to the first tool; anything else gets last echoed back, so a
// client can complete a whole tool round trip.
func (s *server) newAnswer(prompt []string, last string, endsWithToolResult bool, firstTool string) answer {
	a := answer{promptTokens: countWords(prompt...)}
	if firstTool != "" && !endsWithToolResult {
		a.tool = firstTool
		a.pieces = toolArgumentFragments
		return a
	}
	if strings.TrimSpace(last) == "" {
		last = fallbackText
	}
	a.pieces = splitText(last, s.cfg.Chunks)
	return a
}
