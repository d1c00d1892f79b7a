package main

import "github.com/switchboard-dev/switchboard/runtime/engine"

// adapters maps each provider name of a ModelDeployment to the adapter that serves it.
func adapters() map[string]engine.Factory {
	return map[string]engine.Factory{}
}
