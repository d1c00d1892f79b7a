// Package openai is the provider adapter for OpenAI's Chat Completions API
// (POST {endpoint}/chat/completions). It serves two providers: "openai" (the OpenAI API,
// a credential is required) and "openai-compatible" (any server speaking the same wire
// format, such as vLLM, llama.cpp or a gateway; the endpoint is required and the
// credential optional).
//
// An adapter maps one execution request to one Chat Completions call: input parts become
// messages, tool parts become function tools (only when the deployment declares tools),
// and a few documented extensions become sampling options. It streams when the deployment
// declares streaming and otherwise makes a single non-streaming call whose whole text
// becomes one output.delta. Provider failures become portable errors through
// providerhttp; nothing the provider says in free text, and never the credential, reaches
// an error, an event or a log line.
//
// See README.md for the request mapping, every extension key read and the error table.
package openai
