// Resuming a run's event stream with Last-Event-ID: ids are parsed with
// bounds (a malformed one is 400), an id past the last event resumes after
// it (a running run: what comes next; an ended run: just the end frame), and
// no id, however large, makes the gateway compute past the end of its
// integers.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, eventually, request, sanitizerReport, setupAdmin } from './lib/server.mjs';
import { FakeOpenAI, held, reply } from './lib/fake_openai.mjs';

const INT64_MAX = '9223372036854775807';
// Ceilings that only catch a hang.
const STREAM_CEILING_MS = 60000;

/** The frames of an SSE text: [{event, data, id}] (id undefined when absent). */
function frames(text) {
  return text.split('\n\n').filter((f) => f.trim() && !f.startsWith(':')).map((f) => {
    const out = {};
    for (const line of f.split('\n')) {
      const colon = line.indexOf(': ');
      out[line.slice(0, colon)] = line.slice(colon + 2);
    }
    return out;
  });
}

describe('Last-Event-ID', () => {
  let srv;
  let fake;
  let admin;
  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model()] });
    admin = await setupAdmin(srv);
  });
  after(async () => {
    await srv?.stop();
    await fake?.stop();
  });

  const api = (method, p, opts = {}) => request(srv, method, p, { bearer: admin.token, ...opts });

  async function startRun(content) {
    const thread = await api('POST', '/api/threads', { body: {} });
    assert.equal(thread.status, 200, thread.text);
    const tid = thread.json.thread_id;
    const run = await api('POST', `/api/threads/${tid}/runs`, {
      body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content }] } },
    });
    assert.equal(run.status, 200, run.text);
    return { tid, rid: run.json.run_id, path: `/api/threads/${tid}/runs/${run.json.run_id}` };
  }

  const resume = (p, id, headers = {}) => api('GET', `${p}/stream`, {
    headers: id === undefined ? headers : { ...headers, 'Last-Event-ID': id },
  });

  it('resumes an ended run after the id, and past its last event sends just the end', async () => {
    fake.queue(reply('all done'));
    const run = await startRun('hello');
    assert.equal((await api('GET', `${run.path}/join`)).status, 200);
    const full = await resume(run.path);
    assert.equal(full.status, 200, full.text);
    const all = frames(full.text);
    assert.equal(all[0].event, 'metadata');
    assert.equal(all.at(-1).event, 'end');
    const last = Number(all.at(-1).id);
    assert.ok(last > 2, full.text);
    // From the first event: no id, an empty one, and LangGraph's -1.
    for (const id of [undefined, '', '-1', '0']) {
      const again = await resume(run.path, id);
      assert.deepEqual(frames(again.text), all, `Last-Event-ID ${JSON.stringify(id)}`);
    }
    // Within the run: what follows the id.
    const tail = frames((await resume(run.path, String(last - 1))).text);
    assert.deepEqual(tail, [all.at(-1)]);
    // At or past its last event: the end frame, without an id, and no gap.
    for (const id of [String(last), String(last + 1), '4294967296', '9223372036854775806', INT64_MAX,
      `000${INT64_MAX}`]) {
      const res = await resume(run.path, id);
      assert.equal(res.status, 200, `${id}: ${res.text}`);
      assert.deepEqual(frames(res.text), [{ event: 'end', data: 'null' }], `Last-Event-ID ${id}: ${res.text}`);
      const joined = await api('GET', `${run.path}/join`, { headers: { Accept: 'text/event-stream', 'Last-Event-ID': id } });
      assert.deepEqual(frames(joined.text), [{ event: 'end', data: 'null' }], `join, Last-Event-ID ${id}`);
    }
    assert.ok(!sanitizerReport(srv.stderr), srv.stderr);
  });

  it('refuses a malformed id with 400, after checking the run is the caller\'s', async () => {
    fake.queue(reply('fine'));
    const run = await startRun('hi');
    assert.equal((await api('GET', `${run.path}/join`)).status, 200);
    for (const id of ['9223372036854775808', '18446744073709551616', '99999999999999999999999',
      '-2', '+1', '1.5', '1e3', '0x10', 'abc', '1-0']) {
      const res = await resume(run.path, id);
      assert.equal(res.status, 400, `${id}: ${res.status} ${res.text}`);
      assert.match(res.json.detail, /Last-Event-ID/);
    }
    const other = await api('GET', `/api/threads/${run.tid}/runs/00000000-0000-0000-0000-000000000000/stream`,
      { headers: { 'Last-Event-ID': 'abc' } });
    assert.equal(other.status, 404, other.text);
  });

  it('resumes a running run past its last event with what comes next', async () => {
    const { step, release } = held('after the wait');
    fake.queue(step);
    const run = await startRun('wait');
    const follow = (id) => {
      const got = { text: '' };
      got.done = new Promise((resolve, reject) => {
        const req = http.request({
          host: '127.0.0.1', port: srv.port, path: `${run.path}/stream`, agent: false,
          headers: { Authorization: `Bearer ${admin.token}`, ...(id ? { 'Last-Event-ID': id } : {}) },
        }, (res) => {
          got.status = res.statusCode;
          res.setEncoding('utf8');
          res.on('data', (d) => (got.text += d));
          res.on('end', resolve);
          res.on('error', reject);
        });
        req.on('error', reject);
        req.end();
      });
      return got;
    };
    const first = follow();
    await eventually(() => assert.match(first.text, /event: metadata/), STREAM_CEILING_MS);
    const ahead = follow(INT64_MAX);
    await eventually(() => assert.equal(ahead.status, 200), STREAM_CEILING_MS);
    release();
    await Promise.all([first.done, ahead.done]);
    const got = frames(ahead.text);
    assert.ok(!got.some((f) => f.event === 'gap' || f.event === 'metadata'), ahead.text);
    assert.match(ahead.text, /after the wait/);
    assert.equal(got.at(-1).event, 'end');
    assert.ok(Number(got.at(-1).id) > 1, ahead.text);
    assert.ok(!sanitizerReport(srv.stderr), srv.stderr);
  });
});
