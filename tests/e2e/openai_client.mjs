// The official `openai` client against `1bit serve`: non-streaming and streaming replies agree,
// usage and finish_reason are filled, errors surface as APIError with the server's status.
// Embeddings (a server started with --embedding): the client's default base64 decodes to the float
// reply, token inputs work, errors surface with their status.
// Usage: node openai_client.mjs BASE_URL completion|chat|embedding. Prints "ok" and exits 0, or throws.
// `sampling OUT.json PROMPT_IDS BANNED_ID` asks for logprobs, n, batch prompts, penalties and
// logit_bias, checks the shapes and indices here, and writes the replies to OUT.json, whose
// values the caller (tests/e2e/sampling_e2e_test.cpp) checks against the reference model.
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import fs from 'node:fs';

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

const sorted = (xs) => xs.every((x, i) => i === 0 || xs[i - 1] >= x);

async function sampling(out, promptIds, banned) {
  const ids = JSON.parse(promptIds);
  const base = { model: 'any', prompt: ids, max_tokens: 24 };
  const r = {};
  // Log probabilities: greedy, sampled without filters, sampled with top_k 3.
  r.greedy = await client.completions.create({ ...base, temperature: 0, logprobs: 5 });
  r.sampled = await client.completions.create({ ...base, temperature: 0.8, top_k: 0, top_p: 1, min_p: 0, seed: 7, logprobs: 5 });
  r.top3 = await client.completions.create({ ...base, temperature: 1.3, top_k: 3, top_p: 1, min_p: 0, seed: 9, logprobs: 5 });
  for (const key of ['greedy', 'sampled', 'top3']) {
    const lp = r[key].choices[0].logprobs;
    assert.equal(lp.tokens.join(''), r[key].choices[0].text, key);
    assert.equal(lp.tokens.length, r[key].usage.completion_tokens, key);
    assert.equal(lp.token_logprobs.length, lp.tokens.length);
    assert.equal(lp.top_logprobs.length, lp.tokens.length);
    assert.equal(lp.text_offset[0], 0);
    for (const top of lp.top_logprobs) assert.ok(Object.keys(top).length <= 5);  // an object: keys unordered
  }
  for (const top of r.top3.choices[0].logprobs.top_logprobs) assert.ok(Object.keys(top).length <= 3);
  // Chat: OpenAI's shape; the streamed entries equal the whole reply's.
  const chatReq = { model: 'any', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 };
  const chat = await client.chat.completions.create(chatReq);
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.map((e) => e.token).join(''), chat.choices[0].message.content);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);  // greedy: the chosen token is the most likely
    if (!e.token.includes('\uFFFD')) assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
    assert.ok(sorted(e.top_logprobs.map((t) => t.logprob)));
  }
  const streamed = [];
  for await (const chunk of await client.chat.completions.create({ ...chatReq, stream: true })) {
    for (const c of chunk.choices) streamed.push(...(c.logprobs?.content ?? []));
  }
  assert.deepEqual(streamed, content);
  // n = 3 choices, whole and streamed: indices 0..2, the streamed texts equal the whole ones.
  const nReq = { model: 'any', messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 16, temperature: 1, seed: 5, n: 3 };
  const whole = await client.chat.completions.create(nReq);
  assert.deepEqual(whole.choices.map((c) => c.index), [0, 1, 2]);
  const texts = ['', '', ''], finals = [0, 0, 0], roles = [0, 0, 0];
  for await (const chunk of await client.chat.completions.create({ ...nReq, stream: true })) {
    for (const c of chunk.choices) {
      texts[c.index] += c.delta.content ?? '';
      if (c.delta.role) roles[c.index]++;
      if (c.finish_reason) finals[c.index]++;
    }
  }
  assert.deepEqual(texts, whole.choices.map((c) => c.message.content));
  assert.deepEqual(finals, [1, 1, 1]);
  assert.deepEqual(roles, [1, 1, 1]);
  assert.ok(new Set(texts).size > 1, 'three sampled choices should not all be equal: ' + JSON.stringify(texts));
  // Batch prompts x n: prompt-major indices; greedy choices of one prompt are equal.
  const second = ids.slice(0, 3);
  r.batch = await client.completions.create({ ...base, prompt: [ids, second], n: 2, temperature: 0 });
  assert.deepEqual(r.batch.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(r.batch.choices[0].text, r.greedy.choices[0].text);
  assert.equal(r.batch.choices[1].text, r.greedy.choices[0].text);
  assert.equal(r.batch.choices[2].text, r.batch.choices[3].text);
  const single = await client.completions.create({ ...base, prompt: second, temperature: 0 });
  assert.equal(r.batch.choices[2].text, single.choices[0].text);
  assert.equal(r.batch.usage.prompt_tokens, ids.length + second.length);
  const strings = await client.completions.create({ model: 'any', prompt: ['Once upon a time', 'The dog', 'A'], max_tokens: 4, temperature: 0 });
  assert.deepEqual(strings.choices.map((c) => c.index), [0, 1, 2]);
  // Penalties and logit_bias (the caller checks the texts against the reference model).
  r.banned = await client.completions.create({ ...base, temperature: 0, logit_bias: { [banned]: -100 } });
  r.penalized = await client.completions.create({ ...base, temperature: 0, frequency_penalty: 1.5, presence_penalty: 0.5 });
  r.repeat = await client.completions.create({ ...base, temperature: 0, repeat_penalty: 1.5, repeat_last_n: 16 });
  assert.notEqual(r.banned.choices[0].text, r.greedy.choices[0].text);
  assert.notEqual(r.penalized.choices[0].text, r.greedy.choices[0].text);
  assert.notEqual(r.repeat.choices[0].text, r.greedy.choices[0].text);
  // Seeded sampling with penalties is reproducible.
  const seeded = { ...base, temperature: 1, seed: 11, frequency_penalty: 0.7, logit_bias: { [banned]: 3 } };
  assert.equal((await client.completions.create(seeded)).choices[0].text, (await client.completions.create(seeded)).choices[0].text);
  await assert.rejects(client.completions.create({ ...base, logit_bias: { nope: 1 } }), (e) => e.status === 400 && /logit_bias/.test(e.message));
  await assert.rejects(client.chat.completions.create({ ...chatReq, top_logprobs: 30 }), (e) => e.status === 400 && /top_logprobs/.test(e.message));
  const fs = await import('node:fs');
  fs.writeFileSync(out, JSON.stringify(r));
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

// Tool calls (issue 18): a round trip (a required call, the tool's result, the final answer) in
// plain and streamed form, then `n` seeded replies with tool_choice "required" or a named function
// written to OUT.json for the caller (tests/e2e/tools.py) to validate against the schemas.
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 },
      unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city'], additionalProperties: false } } },
  { type: 'function', function: { name: 'add', description: 'The sum of two integers', parameters: { type: 'object',
    properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false } } },
  { type: 'function', function: { name: 'search', description: 'Search the web', parameters: { type: 'object', properties: {
    query: { type: 'string', maxLength: 30 },
    filters: { type: 'object', properties: { lang: { enum: ['en', 'fr', 'de'] }, limit: { type: 'integer' } },
      additionalProperties: false },
    tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 } },
    required: ['query'], additionalProperties: false } } },
  { type: 'function', function: { name: 'now', description: 'The time (no arguments)', parameters: { type: 'object', properties: {} } } },
];

async function tools(out, n) {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const req = { model: 'any', messages, tools: TOOLS, tool_choice: 'required', max_tokens: 300, seed: 7, temperature: 0.7 };
  const first = await client.chat.completions.create(req);
  const msg = first.choices[0].message;
  assert.equal(first.choices[0].finish_reason, 'tool_calls');
  assert.ok(msg.tool_calls.length >= 1);
  for (const c of msg.tool_calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, /^call_[0-9A-Za-z]{24}$|^[0-9A-Za-z]{9}$/);
    assert.ok(TOOLS.some((t) => t.function.name === c.function.name));
    JSON.parse(c.function.arguments);
  }
  // The same request streamed: the tool_calls deltas add up to the same calls.
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const calls = [];
  let finish = null, content = '';
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      if (ch.finish_reason) finish = ch.finish_reason;
      content += ch.delta?.content ?? '';
      for (const d of ch.delta?.tool_calls ?? []) {
        calls[d.index] ??= { id: d.id, name: '', arguments: '' };
        calls[d.index].name += d.function?.name ?? '';
        calls[d.index].arguments += d.function?.arguments ?? '';
      }
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(calls.map((c) => [c.name, c.arguments]), msg.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  for (const c of calls) assert.match(c.id, /^call_[0-9A-Za-z]{24}$|^[0-9A-Za-z]{9}$/);
  assert.equal(content, msg.content ?? '');
  // The tools' results go back, and the model answers in text.
  const results = msg.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: '{"temperature": 18}' }));
  const second = await client.chat.completions.create({ model: 'any', max_tokens: 24, seed: 1, tools: TOOLS,
    tool_choice: 'none', messages: [...messages, msg, ...results] });
  assert.equal(typeof second.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(second.choices[0].finish_reason));
  assert.equal(second.choices[0].message.tool_calls, undefined);
  // Seeded samples: required or a named function, parallel calls allowed or not.
  const samples = [];
  for (let k = 0; k < Number(n); k++) {
    const named = k % 2 === 1 ? TOOLS[k % TOOLS.length].function.name : null;
    const r = await client.chat.completions.create({ model: 'any', messages, tools: TOOLS, max_tokens: 300, seed: k,
      temperature: 1.0, parallel_tool_calls: k % 3 !== 0,
      tool_choice: named ? { type: 'function', function: { name: named } } : 'required' });
    const m = r.choices[0].message;
    samples.push({ named, parallel: k % 3 !== 0, finish_reason: r.choices[0].finish_reason, content: m.content,
      calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) });
  }
  fs.writeFileSync(out, JSON.stringify({ tools: TOOLS, samples }));
}

if (mode === 'sampling') await sampling(...process.argv.slice(4));
else if (mode === 'tools') await tools(...process.argv.slice(4));
else await (mode === 'chat' ? chat() : mode === 'embedding' ? embedding() : completion());
console.log('ok');
