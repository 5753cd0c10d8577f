// A fake OpenAI-compatible chat completions server on loopback. Tests queue
// what its next answers are: a streamed reply (text and tool calls), an
// HTTP error (with headers), a stream dropped midway, a stream that
// stalls, or one held open until the test releases it. Every request body is kept for assertions.
import http from 'node:http';

let nextCallId = 1;

/** A reply step: text and tool calls [{name, args}], streamed in chunks. */
export function reply(content, toolCalls = [], finishReason) {
  return { kind: 'reply', content, toolCalls, finishReason };
}
/** One tool call, as reply() takes them. */
export function call(name, args) {
  return { name, args };
}
/** An HTTP error answer. */
export function fail(status, error = {}, headers = {}) {
  return { kind: 'fail', status, error, headers };
}
/** A stream that sends one chunk, then the connection is destroyed. */
export function drop() {
  return { kind: 'drop' };
}
/** A reply that takes ms to come: an empty chunk every 200 ms, then content. */
export function slow(ms, content = 'slowly done') {
  return { kind: 'slow', ms, content, toolCalls: [] };
}
/**
 * A reply held open (an empty chunk every 200 ms, so it never counts as
 * stalled) until release() is called, then content: {step, release}.
 * before, when given, is streamed first, before the hold.
 */
export function held(content = 'released', before = '') {
  let release;
  const gate = new Promise((resolve) => (release = resolve));
  return { step: { kind: 'held', gate, content, before, toolCalls: [] }, release };
}
// The stall timeout of model(): far beyond any pause a busy host makes.
export const STALL_TIMEOUT_S = 20;

/** A stream whose headers are sent, then nothing for ms (past model()'s stall timeout by default). */
export function stall(ms = 3 * STALL_TIMEOUT_S * 1000) {
  return { kind: 'stall', ms };
}

export class FakeOpenAI {
  constructor() {
    this.steps = [];
    this.routes = [];
    this.requests = [];
    this.sockets = new Set();
  }

  static async start() {
    const f = new FakeOpenAI();
    f.server = http.createServer((req, res) => f.#handle(req, res));
    f.server.on('connection', (s) => {
      f.sockets.add(s);
      s.on('close', () => f.sockets.delete(s));
    });
    await new Promise((resolve) => f.server.listen(0, '127.0.0.1', resolve));
    f.port = f.server.address().port;
    f.baseUrl = `http://127.0.0.1:${f.port}/v1`;
    return f;
  }

  /** Queues answers, played in order; with none queued the answer is "done". */
  queue(...steps) {
    this.steps.push(...steps);
  }

  /**
   * Queues answers for the requests whose first user message contains
   * marker (a sub-agent's task prompt, say), played in order before the
   * common queue is consulted; once they are used up, such requests take
   * from the common queue.
   */
  route(marker, ...steps) {
    let r = this.routes.find((x) => x.marker === marker);
    if (!r) this.routes.push((r = { marker, steps: [] }));
    r.steps.push(...steps);
  }

  #nextStep(body) {
    const first = body?.messages?.find((m) => m.role === 'user');
    const text = typeof first?.content === 'string' ? first.content : JSON.stringify(first?.content ?? '');
    const r = this.routes.find((x) => x.steps.length && text.includes(x.marker));
    return (r ? r.steps.shift() : this.steps.shift()) || reply('done');
  }

  /**
   * The model entry of config.yaml for this server. Its stall timeout is
   * one only a stall() step reaches: a loaded host may leave seconds between
   * the chunks of a reply, and a stall detected there would retry the call
   * and take the next queued step.
   */
  model(name = 'fake', extra = {}) {
    return { name, model: 'fake-model', base_url: this.baseUrl, api_key: 'sk-test', stall_timeout_s: STALL_TIMEOUT_S, ...extra };
  }

  async stop() {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }

  async #handle(req, res) {
    let body = '';
    for await (const chunk of req) body += chunk;
    let parsed = null;
    try { parsed = JSON.parse(body); } catch { /* kept as null */ }
    this.requests.push({ path: req.url, headers: req.headers, body: parsed });
    const step = this.#nextStep(parsed);
    if (step.kind === 'fail') {
      res.writeHead(step.status, { 'Content-Type': 'application/json', ...step.headers });
      res.end(JSON.stringify({ error: { message: 'fake failure', ...step.error } }));
      return;
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    const send = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    if (step.kind === 'drop') {
      send({ choices: [{ index: 0, delta: { role: 'assistant', content: 'partial' } }] });
      setTimeout(() => res.socket.destroy(), 20);
      return;
    }
    if (step.kind === 'stall') {
      const t = setTimeout(() => res.end(), step.ms);
      res.on('close', () => clearTimeout(t));
      return;
    }
    send({ choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] });
    for (const piece of (step.before || '').match(/.{1,8}/gs) || [])
      send({ choices: [{ index: 0, delta: { content: piece } }] });
    if (step.kind === 'slow' || step.kind === 'held') {
      const until = step.kind === 'slow' ? Date.now() + step.ms : Infinity;
      let released = false;
      step.gate?.then(() => (released = true));
      while (Date.now() < until && !released && !res.destroyed) {
        await new Promise((r) => setTimeout(r, 200));
        if (!res.destroyed) send({ choices: [{ index: 0, delta: { content: '' } }] });
      }
      if (res.destroyed) return;
    }
    for (const piece of (step.content || '').match(/.{1,8}/gs) || [])
      send({ choices: [{ index: 0, delta: { content: piece } }] });
    step.toolCalls.forEach((c, index) => {
      const args = JSON.stringify(c.args);
      send({ choices: [{ index: 0, delta: { tool_calls: [{ index, id: `call_${nextCallId++}`, type: 'function', function: { name: c.name, arguments: args.slice(0, 5) } }] } }] });
      send({ choices: [{ index: 0, delta: { tool_calls: [{ index, function: { arguments: args.slice(5) } }] } }] });
    });
    const finish = step.finishReason || (step.toolCalls.length ? 'tool_calls' : 'stop');
    send({ choices: [{ index: 0, delta: {}, finish_reason: finish }] });
    send({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 } });
    res.end('data: [DONE]\n\n');
  }
}
