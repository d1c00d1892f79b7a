package main

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Each provider answers failures with its own documented body. The three writers below
// take the HTTP status and an optional message (empty selects the provider's usual text
// for that status). Every 429 carries "retry-after: 1", as the scripted rate limit
// promises. No message ever repeats a credential or request content.

// defaultMessages are the messages used when a writer gets none.
var defaultMessages = map[int]string{
	http.StatusBadRequest:          "The request body is not valid.",
	http.StatusUnauthorized:        "Incorrect API key provided.",
	http.StatusNotFound:            "The requested resource could not be found.",
	http.StatusUnprocessableEntity: "The input is not valid.",
	http.StatusTooManyRequests:     "Rate limit reached for requests. Please try again in 1s.",
	http.StatusServiceUnavailable:  "The server is overloaded or not ready yet.",
}

// messageFor returns msg, or the default message for status when msg is empty.
func messageFor(status int, msg string) string {
	if msg != "" {
		return msg
	}
	if m, ok := defaultMessages[status]; ok {
		return m
	}
	return http.StatusText(status)
}

// writeJSON writes v as the whole response with status and content type.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "demoprovider: encode response", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_, _ = w.Write(b) // a client that went away needs no answer
}

// openAIError writes OpenAI's error body:
// {"error":{"message","type","param","code"}}.
func openAIError(w http.ResponseWriter, status int, msg string) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	code := func(s string) *string { return &s }
	b := body{Message: messageFor(status, msg), Type: "invalid_request_error"}
	switch status {
	case http.StatusUnauthorized:
		b.Code = code("invalid_api_key")
	case http.StatusTooManyRequests:
		b.Type, b.Code = "requests", code("rate_limit_exceeded")
	case http.StatusServiceUnavailable, http.StatusInternalServerError:
		b.Type = "server_error"
	}
	writeJSON(w, status, "application/json", map[string]body{"error": b})
}

// anthropicError writes Anthropic's error body:
// {"type":"error","error":{"type","message"}}.
func anthropicError(w http.ResponseWriter, status int, msg string) {
	typ := "invalid_request_error"
	switch status {
	case http.StatusUnauthorized:
		typ = "authentication_error"
		if msg == "" {
			msg = "invalid x-api-key"
		}
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusServiceUnavailable, http.StatusInternalServerError:
		typ = "api_error"
	}
	writeJSON(w, status, "application/json", map[string]any{
		"type":  "error",
		"error": map[string]string{"type": typ, "message": messageFor(status, msg)},
	})
}

// replicateTitles are Replicate's problem titles per status.
var replicateTitles = map[int]string{
	http.StatusBadRequest:          "Bad request",
	http.StatusUnauthorized:        "Unauthenticated",
	http.StatusNotFound:            "Not found",
	http.StatusUnprocessableEntity: "Input validation failed",
	http.StatusTooManyRequests:     "Request was throttled",
	http.StatusServiceUnavailable:  "Service unavailable",
}

// replicateError writes Replicate's problem-details body: {"title","detail","status"}.
func replicateError(w http.ResponseWriter, status int, msg string) {
	if status == http.StatusUnauthorized && msg == "" {
		msg = "You did not pass a valid authentication token"
	}
	title, ok := replicateTitles[status]
	if !ok {
		title = http.StatusText(status)
	}
	writeJSON(w, status, "application/problem+json", map[string]any{
		"title":  title,
		"detail": messageFor(status, msg),
		"status": status,
	})
}
