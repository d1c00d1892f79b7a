package main

import (
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/replicate"
)

// adapters maps each provider name of a ModelDeployment to the adapter that serves it.
func adapters() map[string]engine.Factory {
	m := map[string]engine.Factory{
		anthropic.Provider: anthropic.Factory,
		replicate.Provider: replicate.Factory,
	}
	openai.Register(m) // openai and openai-compatible
	return m
}
