// The OpenAI front door (spec/compat.md) with the official Node SDK as its client:
// Chat Completions streamed and not, usage, a tool round trip, an image, fallback after a
// 503, every typed error the SDK raises, a cut stream, disconnects, Models, and the same
// executions read natively.
//
// cmd/switchboard's TestOpenAIChatNodeSDK runs it against the built binary and the demo
// provider (the same runtime as its Go SDK test), with:
//   SWITCHBOARD_URL             http://ADDR of the runtime
//   SWITCHBOARD_TOKEN_ALICE     a caller of the e2e models
//   SWITCHBOARD_TOKEN_BOB       another one
//   SWITCHBOARD_TOKEN_OUTSIDER  a caller allowed in no namespace that holds models
// Each caller may run one execution at once, so the tests run one after the other.

import test from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const root = process.env.SWITCHBOARD_URL;
const tokens = {
  alice: process.env.SWITCHBOARD_TOKEN_ALICE,
  bob: process.env.SWITCHBOARD_TOKEN_BOB,
  outsider: process.env.SWITCHBOARD_TOKEN_OUTSIDER,
};
assert.ok(root && tokens.alice && tokens.bob && tokens.outsider, 'SWITCHBOARD_URL and the SWITCHBOARD_TOKEN_* variables are required');

// The tests count executions: the SDK retries nothing.
const sdk = (apiKey) => new OpenAI({ baseURL: `${root}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
const alice = sdk(tokens.alice);
const bob = sdk(tokens.bob);
const user = (content) => [{ role: 'user', content }];

// native reads the API of the runtime itself.
async function native(path, token = tokens.alice) {
  const res = await fetch(root + path, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: await res.json() };
}

// waitEnd waits for execution id to end and returns its status.
async function waitEnd(id) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const { status, body } = await native(`/v1/executions/${id}`);
    if (status === 200 && (body.status === 'completed' || body.status === 'failed')) return body;
    assert.ok(Date.now() < deadline, `execution ${id} did not end: ${JSON.stringify(body)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// collect reads a stream whole: its text, tool calls, finish reason, usage and chunks.
async function collect(stream) {
  const out = { text: '', calls: [], finish: null, usage: null, chunks: [] };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) out.usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    if (choice.delta.content) out.text += choice.delta.content;
    for (const tc of choice.delta.tool_calls ?? []) {
      if (tc.index === out.calls.length) out.calls.push({ id: tc.id, name: tc.function.name, arguments: '' });
      out.calls[tc.index].arguments += tc.function.arguments ?? '';
    }
    if (choice.finish_reason) out.finish = choice.finish_reason;
  }
  return out;
}

test('text with fallback after a 503, read natively', async () => {
  const { data, response } = await alice.chat.completions
    .create({ model: 'chat', messages: user('hello from node') })
    .withResponse();
  assert.equal(data.object, 'chat.completion');
  assert.equal(data.choices[0].message.content, 'hello from node');
  assert.equal(data.choices[0].finish_reason, 'stop');
  assert.equal(data.model, 'echo');
  assert.deepEqual(
    [data.usage.prompt_tokens, data.usage.completion_tokens, data.usage.total_tokens],
    [3, 5, 8],
  );
  assert.equal(response.headers.get('switchboard-execution-id'), data.id);
  const st = await waitEnd(data.id);
  assert.equal(st.status, 'completed');
  assert.equal(st.attempts, 2);
  assert.equal(st.route.deployment, 'e2e/echo');
  const result = await native(`/v1/executions/${data.id}/result`);
  assert.equal(result.body.output[0].text, 'hello from node');
});

test('streamed text with usage', async () => {
  const stream = await alice.chat.completions.create({
    model: 'e2e/echo',
    messages: user('streamed through the door'),
    stream: true,
    stream_options: { include_usage: true },
  });
  const got = await collect(stream);
  assert.equal(got.chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(got.text, 'streamed through the door');
  assert.equal(got.finish, 'stop');
  assert.equal(got.usage.prompt_tokens, 4);
  assert.equal(got.usage.completion_tokens, 5);
  assert.ok(got.chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === 'echo'));
});

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } } },
  },
};

test('tool call round trip', async () => {
  const messages = user('What is the weather in Paris?');
  const first = await alice.chat.completions.create({ model: 'chat', messages, tools: [weather] });
  assert.equal(first.choices[0].finish_reason, 'tool_calls');
  const msg = first.choices[0].message;
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].function.name, 'get_weather');
  assert.equal(msg.tool_calls[0].function.arguments, '{"city":"Paris"}');
  // The SDK's idiom: the answer's message object goes back as it came.
  messages.push(msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '18 degrees and sunny' });
  const second = await alice.chat.completions.create({ model: 'chat', messages, tools: [weather] });
  assert.equal(second.choices[0].message.content, '18 degrees and sunny');

  const streamed = await collect(
    await alice.chat.completions.create({ model: 'chat', messages: user('Weather?'), tools: [weather], stream: true }),
  );
  assert.equal(streamed.finish, 'tool_calls');
  assert.equal(streamed.calls.length, 1);
  assert.equal(streamed.calls[0].name, 'get_weather');
  assert.equal(streamed.calls[0].arguments, '{"city":"Paris"}');
  assert.ok(streamed.calls[0].id);
});

test('an image part', async () => {
  const c = await alice.chat.completions.create({
    model: 'see',
    messages: user([
      { type: 'text', text: 'what is this' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
    ]),
  });
  assert.equal(c.choices[0].message.content, 'what is this');
});

test('models', async () => {
  const ids = [];
  for await (const m of alice.models.list()) ids.push(m.id);
  for (const want of ['chat', 'e2e/echo', 'e2e/flaky', 'see', 'summarize']) {
    assert.ok(ids.includes(want), `models ${ids} lack ${want}`);
  }
  const m = await alice.models.retrieve('e2e/echo');
  assert.equal(m.id, 'e2e/echo');
  assert.equal(m.owned_by, 'e2e');
  await assert.rejects(alice.models.retrieve('gpt-4o'), OpenAI.NotFoundError);
});

test('typed errors', async (t) => {
  const cases = [
    ['400 a field the door does not take', tokens.alice, { model: 'chat', messages: user('x'), logprobs: true },
      OpenAI.BadRequestError, 400, 'invalid_request_error', 'invalid_request', 'logprobs'],
    ['401 no valid token', 'not-a-token', { model: 'chat', messages: user('x') },
      OpenAI.AuthenticationError, 401, 'authentication_error', 'unauthenticated', null],
    ['403 a caller allowed no namespace', tokens.outsider, { model: 'chat', messages: user('x') },
      OpenAI.PermissionDeniedError, 403, 'permission_error', 'permission_denied', null],
    ['404 an unknown model', tokens.alice, { model: 'gpt-4o', messages: user('x') },
      OpenAI.NotFoundError, 404, 'not_found_error', 'not_found', null],
    ['422 an image to a text-only model', tokens.alice,
      { model: 'chat', messages: user([{ type: 'image_url', image_url: { url: 'https://example.com/a.png' } }]) },
      OpenAI.UnprocessableEntityError, 422, 'invalid_request_error', 'unsupported_capability', null],
    ['503 every attempt failed', tokens.alice, { model: 'e2e/flaky', messages: user('x') },
      OpenAI.InternalServerError, 503, 'server_error', 'provider_unavailable', null],
  ];
  for (const [name, token, body, cls, status, type, code, param] of cases) {
    await t.test(name, async () => {
      const client = sdk(token);
      for (const stream of [false, true]) {
        await assert.rejects(client.chat.completions.create({ ...body, stream }), (err) => {
          assert.ok(err instanceof cls, `stream ${stream}: ${err.constructor.name}: ${err.message}`);
          assert.equal(err.status, status);
          assert.equal(err.type, type);
          assert.equal(err.code, code);
          assert.equal(err.param, param);
          return true;
        });
      }
    });
  }
});

test('429 beyond the caller\'s concurrency', async () => {
  const held = await bob.chat.completions.create({ model: 'stall', messages: user('hold on'), stream: true });
  const it = held[Symbol.asyncIterator]();
  await it.next(); // the stall model has started
  await assert.rejects(bob.chat.completions.create({ model: 'chat', messages: user('x') }), (err) => {
    assert.ok(err instanceof OpenAI.RateLimitError, `${err.constructor.name}: ${err.message}`);
    assert.equal(err.code, 'rate_limited');
    assert.ok(err.headers.get('retry-after'));
    return true;
  });
  held.controller.abort();
});

test('a cut stream raises in the iterator', async () => {
  const stream = await alice.chat.completions.create({ model: 'cut', messages: user('cut me off'), stream: true });
  let text = '';
  await assert.rejects(
    (async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    })(),
    (err) => {
      assert.ok(err instanceof OpenAI.APIError, `${err.constructor.name}: ${err.message}`);
      assert.equal(err.code, 'provider_unavailable');
      return true;
    },
  );
  assert.equal(text, 'cut me off');
});

test('a dropped call cancels its execution', async () => {
  const { data: stream, response } = await alice.chat.completions
    .create({ model: 'stall', messages: user('hold on'), stream: true })
    .withResponse();
  const id = response.headers.get('switchboard-execution-id');
  await stream[Symbol.asyncIterator]().next();
  stream.controller.abort();
  const st = await waitEnd(id);
  assert.equal(st.status, 'failed');
  assert.equal(st.error.code, 'cancelled');
});

test('a dropped keyed call keeps running and re-attaches', async () => {
  const body = { model: 'slow', messages: user('take your time'), stream: true };
  const options = { headers: { 'Idempotency-Key': 'door-node-1' } };
  const { data: first, response } = await alice.chat.completions.create(body, options).withResponse();
  const id = response.headers.get('switchboard-execution-id');
  await first[Symbol.asyncIterator]().next();
  first.controller.abort();
  const running = await native(`/v1/executions/${id}`);
  assert.ok(running.body.status === 'running' || running.body.status === 'accepted', `status ${running.body.status}`);
  const { data: again, response: againResponse } = await alice.chat.completions.create(body, options).withResponse();
  assert.equal(againResponse.headers.get('switchboard-execution-id'), id);
  const got = await collect(again);
  assert.equal(got.text, 'take your time');
  assert.equal(got.chunks[0].id, id);
  assert.equal((await waitEnd(id)).status, 'completed');
});
