package main

import (
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
	"github.com/switchboard-dev/switchboard/runtime/providers/gemini"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/replicate"
)

// providers maps each provider name of a ModelDeployment to the adapter that serves it,
// with the adapter's routing-time encode check.
func providers() map[string]engine.Provider {
	m := map[string]engine.Provider{}
	openai.Register(m) // openai, openai-compatible and azure-openai
	anthropic.Register(m)
	replicate.Register(m)
	gemini.Register(m) // gemini and vertex
	bedrock.Register(m)
	return m
}
