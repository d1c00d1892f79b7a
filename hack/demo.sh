#!/usr/bin/env bash
# First run: build and start the demo provider and switchboard in standalone mode
# (config/samples/standalone, memory EventStore), submit a streamed text execution with
# fallback, a tool-call execution, the same text on Gemini and on Bedrock, and an
# asynchronous image job with curl, print their events and results; then one call through
# each compatible front door (OpenAI Chat Completions, OpenAI Responses in background mode,
# Anthropic Messages), then stop everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

API=${DEMO_API:-127.0.0.1:8080}
PROBE=${DEMO_PROBE:-127.0.0.1:8081}
PROVIDER=127.0.0.1:9090

mkdir -p bin
echo "==> building switchboard and the demo provider"
go build -o bin/switchboard ./cmd/switchboard
go build -o bin/demoprovider ./hack/demoprovider

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

bin/demoprovider --addr "$PROVIDER" --api-key demo-key > bin/demoprovider.log 2>&1 &
pids+=($!)
bin/switchboard --manifests config/samples/standalone --runtime-bind-address "$API" \
  --health-probe-bind-address "$PROBE" --metrics-bind-address 0 > bin/switchboard.log 2>&1 &
pids+=($!)

for _ in $(seq 100); do
  curl -fs "http://$PROBE/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "http://$PROBE/readyz" >/dev/null || { echo "switchboard did not become ready; see bin/switchboard.log"; exit 1; }
echo "==> switchboard ready on http://$API (logs: bin/switchboard.log)"

# submit BODY: prints the execution id.
submit() {
  curl -fsS -X POST "http://$API/v1/executions" -H 'Content-Type: application/json' -d "$1" |
    sed -n 's/.*"id":"\(exe_[a-z0-9]*\)".*/\1/p'
}

show() {
  local title=$1 id=$2
  echo
  echo "==> $title: $id"
  echo "--- SSE events (curl -N http://$API/v1/executions/$id/events)"
  curl -fsSN "http://$API/v1/executions/$id/events"
  echo "--- result"
  curl -fsS "http://$API/v1/executions/$id/result"
  echo
}

id=$(submit '{"ability":"chat","input":[{"type":"text","role":"system","text":"Answer briefly."},{"type":"text","text":"Hello from the Switchboard demo"}],"requirements":["streaming"],"deadline_ms":30000}')
show "streamed text (the first model answers 503, the runtime falls back)" "$id"

id=$(submit '{"ability":"chat","input":[{"type":"text","text":"Weather in Paris?"},{"type":"tool","name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}')
show "tool call" "$id"

id=$(submit '{"ability":"chat","input":[{"type":"text","text":"Hello from Gemini"}],"routing":{"prefer":["demo/echo-gemini"]}}')
show "the same API on Gemini (streamGenerateContent, server-sent events)" "$id"

id=$(submit '{"ability":"chat","input":[{"type":"text","text":"Hello from Bedrock"}],"routing":{"prefer":["demo/echo-bedrock"]}}')
show "and on Bedrock (ConverseStream, AWS event-stream frames)" "$id"

id=$(submit '{"ability":"text-to-image","input":[{"type":"text","text":"a lighthouse at dawn"}],"extensions":{"replicate.input":{"aspect_ratio":"16:9","seed":7}}}')
show "asynchronous image job (model parameters the deployment allows)" "$id"

echo
echo "==> an image part with no vision model is refused before anything runs:"
curl -sS -X POST "http://$API/v1/executions" -H 'Content-Type: application/json' \
  -d '{"ability":"chat","input":[{"type":"image","media_type":"image/png","data":"aGk="}]}'
echo
echo "==> a model parameter the deployment does not allow is refused before anything runs:"
curl -sS -X POST "http://$API/v1/executions" -H 'Content-Type: application/json' \
  -d '{"ability":"text-to-image","input":[{"type":"text","text":"a lighthouse"}],"extensions":{"replicate.input":{"num_inference_steps":50}}}'
echo
echo
echo "==> the compatible front doors (spec/compat.md): what the OpenAI and Anthropic SDKs send, with base_url http://$API/v1"
echo "--- OpenAI Chat Completions, streamed (model \"chat\": routed with fallback like any execution)"
curl -fsSN "http://$API/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hello through the OpenAI front door"}]}'
echo "--- Anthropic Messages (model \"demo/echo-anthropic\": that deployment only)"
curl -fsS -D - "http://$API/v1/messages" -H 'Content-Type: application/json' -H 'anthropic-version: 2023-06-01' \
  -d '{"model":"demo/echo-anthropic","max_tokens":256,"messages":[{"role":"user","content":"Hello through the Anthropic front door"}]}' |
  sed -e '/^HTTP/p' -e '/^[Ss]witchboard-[Ee]xecution-[Ii]d/p' -e '/^{/p' -n
echo
echo "--- OpenAI Responses in background mode on a Gemini deployment, then read back"
rid=$(curl -fsS "http://$API/v1/responses" -H 'Content-Type: application/json' \
  -d '{"model":"demo/echo-gemini","background":true,"input":"Hello through the Responses front door"}' |
  sed -n 's/^{"id":"\(exe_[a-z0-9]*\)".*/\1/p')
echo "response id (= execution id): $rid"
for _ in $(seq 50); do
  out=$(curl -fsS "http://$API/v1/responses/$rid")
  case "$out" in *'"status":"completed"'*|*'"status":"failed"'*) break ;; esac
  sleep 0.1
done
echo "$out"
echo "--- the same call as a native execution: GET /v1/executions/$rid"
curl -fsS "http://$API/v1/executions/$rid"
echo
echo "==> done; stopping"
