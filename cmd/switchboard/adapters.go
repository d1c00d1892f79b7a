package main

import (
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/providers/anthropic"
	"github.com/switchboard-dev/switchboard/runtime/providers/bedrock"
	"github.com/switchboard-dev/switchboard/runtime/providers/gemini"
	"github.com/switchboard-dev/switchboard/runtime/providers/openai"
	"github.com/switchboard-dev/switchboard/runtime/providers/providerhttp"
	"github.com/switchboard-dev/switchboard/runtime/providers/replicate"
)

// providers maps each provider name of a ModelDeployment to the adapter that serves it,
// with the adapter's routing-time encode check. Every adapter sends its calls, token
// exchanges included, through one client whose dialer applies the endpoint fence
// (spec/modeldeployments.md, "Endpoint"); allowLoopback is --allow-loopback-endpoints.
func providers(allowLoopback bool) map[string]engine.Provider {
	client := providerhttp.NewClient(providerhttp.Fence{AllowLoopback: allowLoopback})
	m := map[string]engine.Provider{}
	openai.Register(m, openai.WithHTTPClient(client)) // openai, openai-compatible and azure-openai
	anthropic.Register(m, anthropic.WithHTTPClient(client))
	replicate.Register(m, replicate.WithHTTPClient(client))
	gemini.Register(m, gemini.WithHTTPClient(client)) // gemini and vertex
	bedrock.Register(m, bedrock.WithHTTPClient(client))
	return m
}
