package httpapi

import "net/http"

// routes registers every endpoint. The method-less patterns below the API catch the
// requests the mux would otherwise answer itself in plain text (wrong method, unknown
// path), so every error a caller sees is a JSON error body. A pattern with a method is
// more specific than the same path without one, so the API patterns win.
func (s *server) routes() {
	s.mux.Handle("POST /v1/executions", s.handle(s.authenticated(s.createExecution, false)))
	s.mux.Handle("GET /v1/executions/{id}", s.handle(s.authenticated(s.getExecution, false)))
	s.mux.Handle("GET /v1/executions/{id}/result", s.handle(s.authenticated(s.getResult, true)))
	s.mux.Handle("POST /v1/executions/{id}/cancel", s.handle(s.authenticated(s.cancelExecution, false)))
	s.mux.Handle("GET /v1/executions/{id}/events", s.handle(s.authenticated(s.streamEvents, true)))

	s.mux.Handle("/v1/executions", s.methodNotAllowed("POST"))
	s.mux.Handle("/v1/executions/{id}", s.methodNotAllowed("GET, HEAD"))
	s.mux.Handle("/v1/executions/{id}/result", s.methodNotAllowed("GET, HEAD"))
	s.mux.Handle("/v1/executions/{id}/cancel", s.methodNotAllowed("POST"))
	s.mux.Handle("/v1/executions/{id}/events", s.methodNotAllowed("GET, HEAD"))
	s.mux.Handle("/", s.handle(func(http.ResponseWriter, *http.Request) error { return errNoRoute }))
}
