package protocol

import "time"

// ExecutionStatus is the body of GET /v1/executions/{id} (spec/http-api.md, "Status").
type ExecutionStatus struct {
	// ID is the execution id.
	ID string `json:"id"`
	// Ability is the requested ability.
	Ability string `json:"ability"`
	// Status is accepted, running, completed or failed.
	Status Status `json:"status"`
	// CreatedAt is when the execution was accepted.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is the timestamp of the last event.
	UpdatedAt time.Time `json:"updated_at"`
	// DeadlineAt is when the execution's deadline passes.
	DeadlineAt time.Time `json:"deadline_at"`
	// LastSequence is the sequence of the last event.
	LastSequence uint64 `json:"last_sequence"`
	// Attempts is the number of route.selected events.
	Attempts int `json:"attempts"`
	// Route is the deployment of the last route.selected; null before the first.
	Route *RouteStatus `json:"route"`
	// Error is the error of execution.failed.
	Error *Error `json:"error,omitempty"`
	// Metadata are the caller's labels; always an object.
	Metadata map[string]string `json:"metadata"`
}

// RouteStatus is the route member of ExecutionStatus.
type RouteStatus struct {
	// Deployment is the deployment as "namespace/name".
	Deployment string `json:"deployment"`
	// Provider is the deployment's provider.
	Provider string `json:"provider"`
	// Model is the provider's model id.
	Model string `json:"model"`
}
