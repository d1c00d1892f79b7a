package httpapi

import "net/http"

// routes registers every endpoint. The method-less patterns below the API catch the
// requests the mux would otherwise answer itself in plain text (wrong method, unknown
// path), so every error a caller sees is a JSON error body. A pattern with a method is
// more specific than the same path without one, so the API patterns win.
//
// Every endpoint is observed under its pattern (observed): metrics, the access log and
// the server span name the pattern, never the path.
func (s *server) routes() {
	s.route("POST /v1/executions", s.authenticated(s.createExecution, false))
	s.route("GET /v1/executions/{id}", s.authenticated(s.getExecution, false))
	s.route("GET /v1/executions/{id}/result", s.authenticated(s.getResult, true))
	s.route("POST /v1/executions/{id}/cancel", s.authenticated(s.cancelExecution, false))
	s.route("GET /v1/executions/{id}/events", s.authenticated(s.streamEvents, true))

	s.route("/v1/executions", s.methodNotAllowed("POST"))
	s.route("/v1/executions/{id}", s.methodNotAllowed("GET, HEAD"))
	s.route("/v1/executions/{id}/result", s.methodNotAllowed("GET, HEAD"))
	s.route("/v1/executions/{id}/cancel", s.methodNotAllowed("POST"))
	s.route("/v1/executions/{id}/events", s.methodNotAllowed("GET, HEAD"))
	s.route("/", func(http.ResponseWriter, *http.Request) error { return errNoRoute })
}

// route registers endpoint h under pattern.
func (s *server) route(pattern string, h handlerFunc) {
	s.mux.Handle(pattern, s.observed(pattern, s.handle(h)))
}
