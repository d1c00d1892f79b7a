// Package anthropic is the provider adapter for Anthropic's Messages API (provider
// "anthropic"). It turns an execution request into one POST /v1/messages call, streamed
// with server-sent events when the deployment declares streaming, and turns the
// provider's answer into Switchboard event data: output.delta, tool.call.started,
// tool.call.arguments.delta and one usage.reported per attempt.
//
// The adapter speaks the wire format directly with net/http and runtime/sse rather than
// through Anthropic's SDK, so the event mapping, the error mapping (providerhttp) and the
// SSE edge cases are the ones the rest of Switchboard uses, and the credential travels
// only in the x-api-key header. README.md documents defaults, the extension keys read
// and the error mapping.
package anthropic
