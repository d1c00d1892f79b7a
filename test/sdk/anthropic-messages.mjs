// The Anthropic front door (spec/compat.md, "Anthropic Messages") with the official
// Node SDK as its client: messages streamed (Claude-style: the stream's final message
// is the non-streamed one) and not, usage, a tool round trip, an image and a PDF,
// cache breakpoints, a refusal, fallback after a 503, every typed error the SDK raises,
// a cut stream raising, x-api-key, disconnects, and the same executions read natively.
//
// cmd/switchboard's TestAnthropicMessagesNodeSDK runs it with `node --test` against the
// built binary and the demo provider (the runtime of its Go SDK test), with:
//   SWITCHBOARD_URL             http://ADDR of the runtime
//   SWITCHBOARD_TOKEN_ALICE     a caller of the e2e models
//   SWITCHBOARD_TOKEN_OUTSIDER  a caller allowed in no namespace that holds models

import test from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const root = process.env.SWITCHBOARD_URL;
const alice = process.env.SWITCHBOARD_TOKEN_ALICE;
const outsider = process.env.SWITCHBOARD_TOKEN_OUTSIDER;
assert.ok(root && alice && outsider, 'SWITCHBOARD_URL and the SWITCHBOARD_TOKEN_* variables are required');

// Media the demo provider's describe models report: a 1x1 PNG (70 bytes), a tiny PDF
// (82 bytes).
const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg==';
const pdf = 'JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCnRyYWlsZXIKPDwvUm9vdCAxIDAgUj4+CiUlRU9GCg==';

// The tests count executions: the SDK retries nothing. It sends its key as
// Authorization: Bearer and anthropic-version 2026-10-21.
const sdk = (apiKey, opts = {}) => new Anthropic({ baseURL: root, apiKey, maxRetries: 0, timeout: 30_000, ...opts });
const client = sdk(alice);
const user = (content) => [{ role: 'user', content }];

// native reads the API of the runtime itself.
async function native(path) {
  const res = await fetch(root + path, { headers: { authorization: `Bearer ${alice}` } });
  return { status: res.status, body: await res.json() };
}

// ended waits for execution id to end and returns its status.
async function ended(id) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const { status, body } = await native(`/v1/executions/${id}`);
    assert.equal(status, 200);
    if (body.status === 'completed' || body.status === 'failed') return body;
    assert.ok(Date.now() < deadline, `execution ${id} still ${body.status}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// comparable is what a client reads of a message, without the ids each call makes anew
// (the message's, and the provider's tool call ids).
function comparable(message) {
  const m = JSON.parse(JSON.stringify(message));
  delete m.id;
  delete m.parsed_output;
  for (const block of m.content) {
    if (block.type === 'tool_use') {
      assert.ok(block.id, 'a tool_use block has an id');
      delete block.id;
    }
  }
  return m;
}

// both sends params non-streamed and streamed, checks that the stream's final message is
// the non-streamed one, and returns it with both executions' ids.
async function both(params) {
  const { data: message, response } = await client.messages.create(params).withResponse();
  const id = response.headers.get('switchboard-execution-id');
  assert.equal(message.id, id, 'message id = Switchboard-Execution-Id');
  assert.equal(message._request_id, id, 'request-id = the execution id');
  const stream = client.messages.stream(params);
  const names = [];
  stream.on('streamEvent', (event) => names.push(event.type));
  const final = await stream.finalMessage();
  assert.notEqual(final.id, id);
  assert.deepEqual(comparable(final), comparable(message));
  assert.equal(names[0], 'message_start');
  assert.deepEqual(names.slice(-2), ['message_delta', 'message_stop']);
  return { message, id, streamId: final.id };
}

// rejects expects promise to fail with the SDK's error class cls, status and type.
async function rejects(what, promise, cls, status, type) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof cls, `${what}: ${err?.constructor?.name} ${err?.message}, want ${cls.name}`);
    assert.equal(err.status, status, what);
    assert.equal(err.type, type, what);
    assert.equal(err.error?.type, 'error', what);
    assert.equal(typeof err.error?.error?.switchboard?.retryable, 'boolean', what);
    return true;
  });
}

test('text, streamed and not, after a fallback from a 503', async () => {
  const { message, id, streamId } = await both({ model: 'chat', max_tokens: 64, messages: user('hello from the Node SDK') });
  assert.equal(message.model, 'echo');
  assert.equal(message.stop_reason, 'end_turn');
  assert.deepEqual(message.content, [{ type: 'text', text: 'hello from the Node SDK' }]);
  assert.ok(message.usage.input_tokens >= 1);
  assert.equal(message.usage.output_tokens, 5);
  for (const x of [id, streamId]) {
    const st = await ended(x);
    assert.equal(st.status, 'completed');
    assert.equal(st.attempts, 2);
    assert.equal(st.route.deployment, 'e2e/echo');
    const { body } = await native(`/v1/executions/${x}/result`);
    assert.equal(body.output[0].text, 'hello from the Node SDK');
  }
});

test('a tool round trip', async () => {
  const params = {
    model: 'chat', max_tokens: 64, messages: user('Weather in Paris?'),
    tools: [{ name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
  };
  const { message: call } = await both(params);
  assert.equal(call.stop_reason, 'tool_use');
  assert.equal(call.content.length, 1);
  assert.equal(call.content[0].type, 'tool_use');
  assert.equal(call.content[0].name, 'get_weather');
  assert.deepEqual(call.content[0].input, { city: 'Paris' });
  params.messages = [...params.messages, { role: 'assistant', content: call.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.content[0].id, content: 'Sunny, 21C' }] }];
  const { message: answer } = await both(params);
  assert.equal(answer.stop_reason, 'end_turn');
  assert.deepEqual(answer.content, [{ type: 'text', text: 'Sunny, 21C' }]);
});

test('an image and a PDF reach the provider', async () => {
  const { message } = await both({ model: 'look', max_tokens: 64, messages: user([
    { type: 'text', text: 'What are these?' },
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
    { type: 'document', title: 'report.pdf', source: { type: 'base64', media_type: 'application/pdf', data: pdf } },
  ]) });
  assert.equal(message.content[0].text, 'image image/png 70 bytes; file application/pdf 82 bytes report.pdf');
  const { message: claude } = await both({ model: 'e2e/sonnet', max_tokens: 64, messages: user([
    { type: 'text', text: 'And this?' },
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } },
  ]) });
  assert.equal(claude.model, 'claude-describe');
  assert.equal(claude.content[0].text, 'image image/png 70 bytes');
});

test('cache breakpoints reach anthropic deployments only', async () => {
  const params = {
    model: 'sonnet', max_tokens: 64,
    system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral', ttl: '1h' } }],
    messages: user([{ type: 'text', text: 'a long, reusable context', cache_control: { type: 'ephemeral' } }, { type: 'text', text: 'Summarize.' }]),
  };
  const { message } = await both(params);
  assert.equal(message.usage.cache_creation_input_tokens, 2);
  const { message: dropped } = await both({ ...params, model: 'chat' });
  assert.equal(dropped.model, 'echo');
  assert.equal(dropped.usage.cache_creation_input_tokens, 0);
});

test('a refusal is a message', async () => {
  const { message, id } = await both({ model: 'refuse', max_tokens: 64, messages: user('something') });
  assert.equal(message.stop_reason, 'refusal');
  assert.equal((await ended(id)).error.code, 'content_filtered');
});

test('every error class', async () => {
  const hi = user('hi');
  await rejects('an unknown field', client.messages.create({ model: 'chat', max_tokens: 64, messages: hi, frobnicate: true }),
    Anthropic.BadRequestError, 400, 'invalid_request_error');
  await rejects('an unknown token', sdk('not-a-token').messages.create({ model: 'chat', max_tokens: 64, messages: hi }),
    Anthropic.AuthenticationError, 401, 'authentication_error');
  await rejects('a caller allowed no namespace with models', sdk(outsider).messages.create({ model: 'chat', max_tokens: 64, messages: hi }),
    Anthropic.PermissionDeniedError, 403, 'permission_error');
  await rejects('an unknown model', client.messages.create({ model: 'claude-opus-4-1', max_tokens: 64, messages: hi }),
    Anthropic.NotFoundError, 404, 'not_found_error');
  await rejects('an image no chat model takes', client.messages.create({ model: 'chat', max_tokens: 64,
    messages: user([{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } }]) }),
    Anthropic.UnprocessableEntityError, 422, 'invalid_request_error');
  await rejects('a rate-limited provider', client.messages.create({ model: 'limited', max_tokens: 64, messages: hi }),
    Anthropic.RateLimitError, 429, 'rate_limit_error');
  await rejects('a rate-limited provider, streamed', client.messages.stream({ model: 'limited', max_tokens: 64, messages: hi }).finalMessage(),
    Anthropic.RateLimitError, 429, 'rate_limit_error');
  await rejects('an unavailable provider', client.messages.create({ model: 'e2e/flaky', max_tokens: 64, messages: hi }),
    Anthropic.InternalServerError, 503, 'overloaded_error');
  await rejects('a provider rejecting the deployment', client.messages.create({ model: 'rejected', max_tokens: 64, messages: hi }),
    Anthropic.InternalServerError, 502, 'api_error');
});

test('a cut stream raises an APIError, never a message', async () => {
  const stream = client.messages.stream({ model: 'cut', max_tokens: 64, messages: user('cut me short') });
  let text = '';
  stream.on('text', (delta) => { text += delta; });
  await assert.rejects(stream.finalMessage(), (err) => {
    assert.ok(err instanceof Anthropic.APIError, `${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.type, 'overloaded_error');
    assert.equal(err.error.error.switchboard.retryable, false);
    return true;
  });
  assert.equal(text, 'cut me short');
});

test('x-api-key, as SDKs before their 2026 majors send it, with temperature', async () => {
  const legacy = new Anthropic({ baseURL: root, apiKey: null, maxRetries: 0,
    defaultHeaders: { 'x-api-key': alice, 'anthropic-version': '2023-06-01' } });
  const message = await legacy.messages.create({ model: 'chat', max_tokens: 64, temperature: 0.2, top_p: 0.9, messages: user('hi') });
  assert.equal((await ended(message.id)).status, 'completed');
});

test('a call that leaves cancels its execution, unless keyed', async () => {
  for (const key of [null, `msgs-node-${Date.now()}`]) {
    const headers = key ? { 'idempotency-key': key } : {};
    const params = { model: 'stall', max_tokens: 64, messages: user('wait for me') };
    const stream = client.messages.stream(params, { headers });
    const started = await new Promise((resolve, reject) => {
      stream.on('streamEvent', (event) => event.type === 'message_start' && resolve(event.message.id));
      stream.on('error', reject);
    });
    stream.abort();
    await stream.done().catch(() => {});
    if (!key) {
      const st = await ended(started);
      assert.equal(st.error.code, 'cancelled');
      continue;
    }
    await new Promise((r) => setTimeout(r, 300));
    const { body } = await native(`/v1/executions/${started}`);
    assert.equal(body.status, 'running', 'a keyed call keeps running when its client leaves');
    const again = client.messages.stream(params, { headers });
    const reattached = await new Promise((resolve, reject) => {
      again.on('streamEvent', (event) => event.type === 'message_start' && resolve(event.message.id));
      again.on('error', reject);
    });
    assert.equal(reattached, started, 'the retry re-attaches to the execution');
    again.abort();
    await again.done().catch(() => {});
    const res = await fetch(`${root}/v1/executions/${started}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${alice}` } });
    assert.ok(res.status === 200 || res.status === 202);
  }
});
