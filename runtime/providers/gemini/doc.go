// Package gemini is the provider adapter for Google's Gemini models, serving two
// providers with one wire format (GenerateContentRequest / GenerateContentResponse):
//
//   - "gemini": the Gemini API, authenticated by an API key in the x-goog-api-key header;
//   - "vertex": Gemini on Vertex AI, authenticated by an OAuth access token minted from a
//     service account key (the deployment's credential) and cached across attempts.
//
// One attempt is one generateContent call, or streamGenerateContent with server-sent
// events when the deployment declares streaming, and its answer becomes Switchboard
// event data: output.delta, tool.call.started, tool.call.arguments.delta and one
// usage.reported per attempt.
//
// The adapter speaks the wire format directly with net/http and runtime/sse rather than
// through Google's SDK, so the event mapping, the error mapping (providerhttp) and the
// SSE edge cases are the ones the rest of Switchboard uses, and the credential travels
// only in its one header. README.md documents defaults, the request mapping, the
// extension keys read and the error mapping.
package gemini
