// The official `openai` client against `1bit serve`: non-streaming and streaming replies agree,
// usage and finish_reason are filled, errors surface as APIError with the server's status.
// Usage: node openai_client.mjs BASE_URL completion|chat. Prints "ok" and exits 0, or throws.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

const [base, mode] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 60000 });

async function completion() {
  const req = { model: 'any', prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
  const whole = await client.completions.create(req);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 24);
  assert.ok(whole.usage.prompt_tokens > 0);
  assert.equal(typeof whole.usage.prompt_tokens_details.cached_tokens, 'number');
  const stream = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', finals = 0, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text ?? '';
      if (c.finish_reason) finals++;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finals, 1);
  assert.equal(usage.completion_tokens, 24);
  await assert.rejects(client.completions.create({ ...req, max_tokens: -1 }),
    (e) => e.status === 400 && /max_tokens/.test(e.message));
}

async function chat() {
  const req = { model: 'any', messages: [{ role: 'user', content: 'Hello! Tell me a story.' }], max_tokens: 24, temperature: 0 };
  const whole = await client.chat.completions.create(req);
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  const stream = await client.chat.completions.create({ ...req, stream: true });
  let content = '', reasoning = '', finals = 0, roles = 0;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.role) roles++;
      content += c.delta.content ?? '';
      reasoning += c.delta.reasoning_content ?? '';
      if (c.finish_reason) finals++;
    }
  }
  assert.equal(roles, 1);
  assert.equal(finals, 1);
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(reasoning, whole.choices[0].message.reasoning_content ?? '');
  await assert.rejects(client.chat.completions.create({ ...req, messages: 'nope' }), (e) => e.status === 400);
}

await (mode === 'chat' ? chat() : completion());
console.log('ok');
