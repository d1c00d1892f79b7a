package main

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Each provider answers failures with its own documented body. The writers below take
// the HTTP status and an optional message (empty selects the provider's usual text for
// that status). Every 429 carries "retry-after: 1", as the scripted rate limit
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

// googleStatuses are the google.rpc.Code names Google's APIs answer per HTTP status
// (https://cloud.google.com/apis/design/errors#handling_errors).
var googleStatuses = map[int]string{
	http.StatusBadRequest:          "INVALID_ARGUMENT",
	http.StatusUnauthorized:        "UNAUTHENTICATED",
	http.StatusForbidden:           "PERMISSION_DENIED",
	http.StatusNotFound:            "NOT_FOUND",
	http.StatusTooManyRequests:     "RESOURCE_EXHAUSTED",
	http.StatusInternalServerError: "INTERNAL",
	http.StatusServiceUnavailable:  "UNAVAILABLE",
}

// googleMessages are the texts the Gemini API answers with, where they differ from the
// generic defaults (https://ai.google.dev/gemini-api/docs/troubleshooting).
var googleMessages = map[int]string{
	http.StatusTooManyRequests:    "Resource has been exhausted (e.g. check quota).",
	http.StatusServiceUnavailable: "The model is overloaded. Please try again later.",
}

// googleError writes a google.rpc.Status body, {"error":{"code","message","status"}},
// with details when given. A 429 also carries a RetryInfo detail of one second, the
// body's counterpart of "retry-after: 1", which is where Google's clients look for it
// (https://cloud.google.com/apis/design/errors#error_details).
func googleError(w http.ResponseWriter, status int, msg string, details ...any) {
	if msg == "" {
		msg = googleMessages[status]
	}
	code, ok := googleStatuses[status]
	if !ok {
		code = "UNKNOWN"
	}
	if status == http.StatusTooManyRequests {
		details = append(details, map[string]string{
			"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s",
		})
	}
	body := map[string]any{"code": status, "message": messageFor(status, msg), "status": code}
	if len(details) > 0 {
		body["details"] = details
	}
	writeJSON(w, status, "application/json; charset=UTF-8", map[string]any{"error": body})
}

// bedrockErrorTypes are the exception names Bedrock sends in x-amzn-ErrorType per HTTP
// status (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_Errors).
// Bedrock never answers 401: a rejected credential is a 403.
var bedrockErrorTypes = map[int]string{
	http.StatusBadRequest:          "ValidationException",
	http.StatusForbidden:           "UnrecognizedClientException",
	http.StatusNotFound:            "ResourceNotFoundException",
	http.StatusTooManyRequests:     "ThrottlingException",
	http.StatusInternalServerError: "InternalServerException",
	http.StatusServiceUnavailable:  "ServiceUnavailableException",
}

// bedrockMessages are the texts Bedrock answers with, where they differ from the generic
// defaults.
var bedrockMessages = map[int]string{
	http.StatusForbidden:          "The security token included in the request is invalid.",
	http.StatusTooManyRequests:    "Too many requests, please wait before trying again.",
	http.StatusServiceUnavailable: "The service isn't currently available. Try again later.",
}

// bedrockError writes an AWS JSON protocol error: the exception name in the
// x-amzn-ErrorType header, which the AWS SDKs read to pick the error type, and the body
// {"message"}.
func bedrockError(w http.ResponseWriter, status int, msg string) {
	if msg == "" {
		msg = bedrockMessages[status]
	}
	typ, ok := bedrockErrorTypes[status]
	if !ok {
		typ = "InternalServerException"
	}
	w.Header().Set("X-Amzn-ErrorType", typ)
	writeJSON(w, status, "application/json", map[string]string{"message": messageFor(status, msg)})
}
