// Package openai is the OpenAI-compatible front door (spec/compat.md): Chat
// Completions, Models and Responses, each call an execution. It translates OpenAI
// requests into protocol requests, submits them through compat.Kit, and projects the
// executions' events back into OpenAI's wire format; nothing below the API layer knows
// of it.
package openai

import (
	"github.com/switchboard-dev/switchboard/runtime/compat"
)

// Door is the OpenAI front door. Its zero value is ready to use.
type Door struct{}

// Routes returns the endpoints of the door.
func (Door) Routes(k compat.Kit) []compat.Route {
	var routes []compat.Route
	routes = append(routes, chatRoutes(k)...)
	routes = append(routes, modelRoutes(k)...)
	routes = append(routes, responsesRoutes(k)...)
	return routes
}
