// Package bedrock is the provider adapter for the Amazon Bedrock Converse API (provider
// "bedrock"). It turns an execution request into one Converse call — POST
// {endpoint}/model/{modelId}/converse — or, when the deployment declares streaming, one
// ConverseStream call (/converse-stream, answered as an AWS event stream), and turns the
// answer into Switchboard event data: output.delta, tool.call.started,
// tool.call.arguments.delta and one usage.reported per attempt.
//
// The adapter speaks the wire format directly with net/http, the AWS SDK's SigV4 signer
// and its event-stream frame decoder, rather than through the bedrockruntime client, so
// that the event mapping, the error mapping (providerhttp) and the framing bounds are
// Switchboard's, no SDK retry loop hides attempts from the engine's fallback and
// deadline accounting, and the credential goes only where this package puts it: a
// Bedrock API key as a bearer token, or AWS access keys as a SigV4 signature (the secret
// access key never leaves the process). README.md documents the credential formats, the
// request mapping, the extension keys read and the error mapping.
package bedrock
