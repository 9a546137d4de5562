// The official `openai` client against `1bit serve`: non-streaming and streaming replies agree,
// usage and finish_reason are filled, errors surface as APIError with the server's status.
// Embeddings (a server started with --embedding): the client's default base64 decodes to the float
// reply, token inputs work, errors surface with their status.
// Usage: node openai_client.mjs BASE_URL completion|chat|embedding. Prints "ok" and exits 0, or throws.
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

async function embedding() {
  const req = { model: 'any', input: ['The robot sang.', 'Once upon a time'] };
  const decoded = await client.embeddings.create(req);  // the client asks for base64 and decodes it
  const floats = await client.embeddings.create({ ...req, encoding_format: 'float' });
  assert.equal(decoded.object, 'list');
  assert.equal(decoded.data.length, 2);
  for (let i = 0; i < 2; i++) {
    assert.equal(decoded.data[i].index, i);
    assert.equal(decoded.data[i].embedding.length, floats.data[i].embedding.length);
    decoded.data[i].embedding.forEach((x, k) => assert.equal(Math.fround(x), Math.fround(floats.data[i].embedding[k])));
    const norm = Math.sqrt(floats.data[i].embedding.reduce((a, x) => a + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
  }
  assert.ok(decoded.usage.prompt_tokens > 0);
  assert.equal(decoded.usage.total_tokens, decoded.usage.prompt_tokens);
  const ids = await client.embeddings.create({ model: 'any', input: [[1, 2, 3], [4, 5]] });
  assert.equal(ids.data.length, 2);
  assert.equal(ids.usage.prompt_tokens, 5);
  await assert.rejects(client.embeddings.create({ ...req, dimensions: 3 }), (e) => e.status === 400 && /dimensions/.test(e.message));
}

await (mode === 'chat' ? chat() : mode === 'embedding' ? embedding() : completion());
console.log('ok');
