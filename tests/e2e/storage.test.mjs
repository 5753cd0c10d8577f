// What a long run costs the store and its readers: a run of many steps
// whose every tool result is about 50 KB (read_file of an upload, played
// by a script model) stores about the bytes of its messages once, however
// many checkpoints and values events list them; the state, each history
// page and each values event stay within their documented caps, and the
// history pages back to the first checkpoint.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, HEAVY_TEST_TIMEOUT_MS, it } from './lib/test.mjs';

import { FawnServer, multipart, request, setupAdmin, storeRows } from './lib/server.mjs';

const STEPS = 100;
const RESULT_BYTES = 50000; // read_file's output limit (TOOL_READ_OUTPUT_MAX)
// docs/http-api.md: messages in a state answer, in a values event.
const STATE_MESSAGES_MAX = 4 << 20;
const VALUES_EVENT_MESSAGES_MAX = 1 << 20;
// What an answer adds to its messages: ids, metadata, the other values.
const ANSWER_OVERHEAD = 64 << 10;
// The store holds each message once as a row of the thread, and once more
// in each of the run's messages and updates events (what a client streamed);
// with indexes and partly filled pages, a small constant factor, where a
// copy of the state per step made it STEPS / 2 times the messages and more.
const STORE_FACTOR = 4;
const KEPT = 200; // checkpoints kept per thread (STORE_CHECKPOINTS_KEPT)

/** The fixture: STEPS read_file calls of the upload (each asking for a
 * different last line, so no two calls look like a loop), then an answer. */
function writeFixture(dir) {
  const replies = Array.from({ length: STEPS }, (_, i) => ({
    content: '',
    tool_calls: [{ name: 'read_file', args: { path: '/mnt/user-data/uploads/big.txt', start_line: 1, end_line: 100000 + i } }],
  }));
  replies.push({ content: 'done' });
  const file = path.join(dir, 'reader.json');
  fs.writeFileSync(file, JSON.stringify({ scenario: 'large tool results', replies }));
  return file;
}

/** The SSE frames of text: [{event, data (text)}]. */
function frames(text) {
  return text.split('\n\n').filter((f) => f.startsWith('event: ')).map((f) => {
    const [head, ...rest] = f.split('\n');
    return { event: head.slice('event: '.length), data: rest.find((l) => l.startsWith('data: '))?.slice(6) ?? '' };
  });
}

/** What srv's store holds on disk: SQLite's files, or PostgreSQL's tables with their indexes. */
function dbBytes(srv) {
  if (srv.config.store?.backend === 'postgres') {
    const [bytes] = storeRows(srv, `SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'`);
    return Number(bytes);
  }
  return ['fawn.db', 'fawn.db-wal'].reduce((sum, f) => {
    const p = path.join(srv.home, f);
    return sum + (fs.existsSync(p) ? fs.statSync(p).size : 0);
  }, 0);
}

describe('storage of a long run with large tool results', () => {
  let srv;
  let admin;
  let fixtureDir;

  before(async () => {
    fixtureDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-e2e-storage-'));
    const fixture = writeFixture(fixtureDir);
    srv = await FawnServer.start({ models: [{ name: 'reader', provider: 'script', fixture }] });
    admin = await setupAdmin(srv);
  });
  after(async () => {
    if (srv?.proc.exitCode === null) await srv.stop();
    else srv?.removeHome();
    fs.rmSync(fixtureDir, { recursive: true, force: true });
  });

  it('stores each message once, and answers within the caps', { ceilingMs: HEAVY_TEST_TIMEOUT_MS }, async () => {
    const api = (method, p, body) => request(srv, method, p, { bearer: admin.token, body, timeoutMs: HEAVY_TEST_TIMEOUT_MS });
    const thread = 'long-run';
    assert.equal((await api('POST', '/api/threads', { thread_id: thread })).status, 200);
    // 50 000 bytes of text in lines of 100: read_file returns it whole.
    const content = Array.from({ length: RESULT_BYTES / 101 }, () => `${randomBytes(75).toString('base64')}\n`).join('');
    const mp = multipart([{ filename: 'big.txt', content }]);
    const up = await request(srv, 'POST', `/api/threads/${thread}/uploads`, {
      bearer: admin.token, body: mp.body, headers: { 'Content-Type': mp.contentType },
    });
    assert.equal(up.status, 200, up.text);

    const waited = await api('POST', `/api/threads/${thread}/runs/wait`, {
      assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'read it' }] },
      context: { model_name: 'reader' }, config: { recursion_limit: STEPS + 1 },
    });
    assert.equal(waited.status, 200, waited.text.slice(0, 500));
    assert.ok(waited.body.length < STATE_MESSAGES_MAX + ANSWER_OVERHEAD, `/wait answered ${waited.body.length} bytes`);
    assert.equal(waited.json.messages.at(-1).content, 'done');
    assert.ok(waited.json.messages_omitted > 0, 'the older messages are left out of a 5 MB state');
    const tools = waited.json.messages.filter((m) => m.type === 'tool');
    assert.ok(tools.every((m) => m.content.length >= content.length - 100 && m.status === 'success'));
    const messageBytes = STEPS * content.length;

    // The state and every page of the history stay under the cap; the pages
    // go back to the first checkpoint.
    const state = await api('GET', `/api/threads/${thread}/state`);
    assert.ok(state.body.length < STATE_MESSAGES_MAX + ANSWER_OVERHEAD, `/state answered ${state.body.length} bytes`);
    assert.equal(state.json.values.messages.length + state.json.values.messages_omitted, 2 * STEPS + 2);
    let before;
    const seen = [];
    for (let page = 0; page < 300; page++) {
      const h = await api('POST', `/api/threads/${thread}/history`, { limit: 100, ...(before ? { before } : {}) });
      assert.equal(h.status, 200, h.text.slice(0, 300));
      assert.ok(h.body.length < STATE_MESSAGES_MAX + ANSWER_OVERHEAD, `a history page of ${h.body.length} bytes`);
      if (h.json.length === 0) break;
      seen.push(...h.json.map((c) => c.checkpoint_id));
      before = h.json.at(-1).checkpoint_id;
    }
    assert.equal(new Set(seen).size, seen.length, 'pages do not overlap');
    assert.equal(seen.length, KEPT, 'every checkpoint kept (of the input, two per step, the final one)');
    assert.equal(seen[0], state.json.checkpoint_id);

    // The run's stored stream: every values event within its cap.
    const runs = await api('GET', `/api/threads/${thread}/runs`);
    const stream = await api('GET', `/api/threads/${thread}/runs/${runs.json[0].run_id}/stream`);
    const values = frames(stream.text).filter((f) => f.event === 'values');
    assert.equal(values.length, STEPS + 3, 'values after the input, each step and at the end');
    for (const v of values) assert.ok(v.data.length < VALUES_EVENT_MESSAGES_MAX + ANSWER_OVERHEAD, `a values event of ${v.data.length} bytes`);
    assert.equal(JSON.parse(values.at(-1).data).messages.at(-1).content, 'done');

    // What the store holds once the gateway has stopped (its WAL folded in).
    await srv.stop({ keepHome: true });
    const stored = dbBytes(srv);
    assert.ok(stored < STORE_FACTOR * messageBytes,
      `the store holds ${stored} bytes for ${messageBytes} bytes of tool results (${(stored / messageBytes).toFixed(2)}x)`);
  });
});
