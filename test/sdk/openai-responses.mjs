// OpenAI's Responses API through Switchboard's front door (spec/compat.md, "OpenAI Responses"),
// with the official Node SDK (`openai`, pinned in package.json) as the client.
// cmd/switchboard's TestResponsesWithNodeSDK starts the binary and the demo provider and
// runs this file with SWITCHBOARD_BASE_URL set to the runtime's /v1 URL.
//
// Models of the end-to-end manifests: `chat` (OpenAI-compatible echo, after a 503
// fallback), `summarize` (the Anthropic wire) and `stall` (streams its first piece,
// then holds until cancelled).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.SWITCHBOARD_BASE_URL;
if (!baseURL) {
  throw new Error('SWITCHBOARD_BASE_URL is not set: run this file from cmd/switchboard\'s TestResponsesWithNodeSDK');
}
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// poll retrieves a response until done says so, for at most ten seconds.
async function poll(id, done) {
  for (let i = 0; i < 200; i++) {
    const r = await client.responses.retrieve(id);
    if (done(r)) {
      return r;
    }
    await sleep(50);
  }
  throw new Error(`response ${id} never reached the awaited state`);
}

test('streamed text', async () => {
  const stream = await client.responses.create({ model: 'chat', input: 'hello from node', stream: true });
  let text = '';
  let completed;
  const seq = [];
  for await (const event of stream) {
    seq.push(event.sequence_number);
    if (event.type === 'response.output_text.delta') {
      text += event.delta;
    }
    if (event.type === 'response.completed') {
      completed = event.response;
    }
  }
  assert.equal(text, 'hello from node');
  assert.equal(completed.status, 'completed');
  assert.ok(completed.usage.total_tokens > 0);
  assert.deepEqual(seq, seq.map((_, i) => i));
});

test('the stream helper accumulates the final response', async () => {
  const stream = client.responses.stream({ model: 'chat', input: 'helper text' });
  const final = await stream.finalResponse();
  assert.equal(final.output_text, 'helper text');
  assert.equal(final.status, 'completed');
});

test('background, resume after starting_after, cancel', async () => {
  const created = await client.responses.create({ model: 'stall', input: 'hello slow world', background: true });
  assert.ok(['queued', 'in_progress'].includes(created.status), created.status);
  const polled = await poll(created.id, (r) => r.output_text !== '');
  assert.equal(polled.status, 'in_progress');

  const stream = await client.responses.retrieve(created.id, { stream: true, starting_after: 2 });
  const types = [];
  let first;
  let cancelled;
  for await (const event of stream) {
    first ??= event.sequence_number;
    types.push(event.type);
    if (event.type === 'response.output_text.delta' && !cancelled) {
      cancelled = await client.responses.cancel(created.id);
    }
  }
  assert.equal(first, 3);
  assert.deepEqual(types, ['response.content_part.added', 'response.output_text.delta', 'response.failed']);
  assert.equal(cancelled.status, 'cancelled');
  assert.equal((await client.responses.retrieve(created.id)).status, 'cancelled');
  assert.equal((await client.responses.cancel(created.id)).status, 'cancelled');
});

test('background on an Anthropic deployment, resumed by the stream helper', async () => {
  const created = await client.responses.create({ model: 'summarize', input: 'short text', background: true });
  const done = await poll(created.id, (r) => r.status === 'completed');
  assert.equal(done.output_text, 'short text');

  const resumed = client.responses.stream({ response_id: created.id, starting_after: 4 });
  const seen = [];
  resumed.on('event', (event) => seen.push(event.sequence_number));
  const final = await resumed.finalResponse();
  assert.equal(final.output_text, 'short text');
  assert.ok(seen.length > 0 && seen.every((n) => n > 4), `events ${seen}`);
});

test('typed errors', async () => {
  await assert.rejects(
    client.responses.create({ model: 'chat', input: 'x', previous_response_id: 'resp_1' }),
    (err) => err instanceof OpenAI.BadRequestError && err.code === 'invalid_request',
  );
  await assert.rejects(
    client.responses.create({ model: 'no-such-model', input: 'x' }),
    (err) => err instanceof OpenAI.NotFoundError && !err.message.includes('no-such-model'),
  );
  await assert.rejects(client.responses.retrieve('exe_unknown'), OpenAI.NotFoundError);
});

test('delete', async () => {
  const r = await client.responses.create({ model: 'chat', input: 'to be deleted' });
  await client.responses.delete(r.id);
  await assert.rejects(client.responses.retrieve(r.id), OpenAI.NotFoundError);
});
