package main

import (
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/replicate"
)

// providers maps each provider name of a ModelDeployment to the adapter that serves it,
// with the adapter's routing-time encode check.
func providers() map[string]engine.Provider {
	m := map[string]engine.Provider{}
	openai.Register(m) // openai and openai-compatible
	anthropic.Register(m)
	replicate.Register(m)
	return m
}
