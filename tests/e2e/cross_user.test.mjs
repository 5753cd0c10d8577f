// The cross-user matrix: every route that takes a thread or run id (or a
// token id), called by another user (session cookie and API token), by an
// admin who does not own the thread, with ids that do not exist and with
// malformed ids. Each answer must be a 4xx (404 where an id is not the
// caller's), never a 5xx, never carry the owner's data, and the gateway must
// answer /health after every single request. The owner's ids are real: a
// finished run whose tool ran in a sandbox, and a run still in progress.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import {
  FawnServer,
  multipart,
  request,
  sanitizerReport,
  setupAdmin,
  setupUser,
  sha256,
  sleep,
  waitFor,
} from './lib/server.mjs';
import { FakeOpenAI, call, reply, slow } from './lib/fake_openai.mjs';

// Text only the owner's thread holds: in its metadata, its messages, its
// upload, its workspace and its outputs. No answer to anyone else may carry it.
const SECRET = 'alice-secret-5b1f0c';
const THREAD = 'alice-private';
const LIVE_THREAD = 'alice-live';
const MISSING_THREAD = 'no-such-thread';
const MISSING_RUN = '00000000-0000-4000-8000-000000000000';
// Each request gets this long: a route that wrongly attached to another
// user's live run would otherwise hold the test until the run ends.
const REQUEST_TIMEOUT_MS = 20000;
// Generous ceilings that only catch hangs.
const WAIT_MS = 60000;

// Ids no route may take for a thread or a run: percent-encoded and raw dot
// segments, separators, NUL, backslash, non-ASCII, quotes, over-long ones.
const MALFORMED = [
  '%2e%2e',
  '%2E%2E%2F%2E%2E%2Fetc',
  '..%2f..%2fusers',
  '%252e%252e',
  '.',
  'bad%00id',
  'bad%5Cid',
  'bad%2Fid',
  'bad%20id',
  '%C3%A9t%C3%A9',
  "it's",
  'a;b',
  '%',
  '%zz',
  'a'.repeat(65),
  'a'.repeat(4000),
];

const human = (content) => ({ messages: [{ type: 'human', content }] });
const RUN_BODY = { assistant_id: 'lead_agent', input: human('show me what you have') };

// Every route with a thread (T) or run (R) id, each method, with a body the
// route accepts (so that only the id decides the answer).
function routes(outputsSha) {
  return [
    ['GET', '/api/threads/T'],
    ['PATCH', '/api/threads/T', { metadata: { stolen: true } }],
    ['DELETE', '/api/threads/T'],
    ['GET', '/api/threads/T/state'],
    ['POST', '/api/threads/T/state', { values: { title: 'stolen' } }],
    ['POST', '/api/threads/T/history', { limit: 10 }],
    ['POST', '/api/threads/T/compact', { force: true }],
    ['GET', '/api/threads/T/token-usage'],
    ['GET', '/api/threads/T/messages/page'],
    ['GET', '/api/threads/T/messages/page?before_seq=3&limit=2'],
    ['POST', '/api/threads/T/runs', RUN_BODY],
    ['POST', '/api/threads/T/runs/stream', RUN_BODY],
    ['POST', '/api/threads/T/runs/wait', RUN_BODY],
    ['POST', '/api/threads/T/runs/regenerate/prepare', { message_id: 'm' }],
    ['POST', '/api/threads/T/runs/edit-regenerate/prepare', { human_message_id: 'h', replacement_text: 'stolen' }],
    ['GET', '/api/threads/T/runs'],
    ['GET', '/api/threads/T/runs?limit=5&offset=0'],
    ['GET', '/api/threads/T/runs/R'],
    ['GET', '/api/threads/T/runs/R/join'],
    ['GET', '/api/threads/T/runs/R/join', undefined, { Accept: 'text/event-stream' }],
    ['GET', '/api/threads/T/runs/R/stream'],
    ['GET', '/api/threads/T/runs/R/stream', undefined, { 'Last-Event-ID': '1' }],
    ['GET', '/api/threads/T/runs/R/receipts'],
    ['POST', '/api/threads/T/runs/R/cancel'],
    ['POST', '/api/threads/T/runs/R/cancel?wait=1&action=interrupt'],
    ['GET', '/api/threads/T/uploads/list'],
    ['DELETE', '/api/threads/T/uploads/notes.txt'],
    ['GET', '/api/threads/T/artifacts/mnt/user-data/uploads/notes.txt'],
    ['GET', '/api/threads/T/artifacts/mnt/user-data/workspace/note.txt'],
    ['GET', '/api/threads/T/artifacts/mnt/user-data/outputs/secret.txt?download=true'],
    ['GET', '/api/threads/T/artifacts/mnt/user-data/outputs/secret.txt', undefined, { Range: 'bytes=0-3' }],
    ['PUT', '/api/threads/T/artifacts/mnt/user-data/outputs/secret.txt',
      { content: 'overwritten', expected_sha256: outputsSha }],
  ];
}

const withIds = (p, thread, run) => p.replace('/T', `/${thread}`).replace('/R', `/${run}`);

describe('cross-user matrix of thread and run ids', () => {
  let srv;
  let fake;
  let admin;
  let alice;
  let bob;
  let runId;
  let liveRunId;
  let aliceTokenId;
  let outputsSha;
  const calls = { made: 0 };

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model()] });
    admin = await setupAdmin(srv);
    alice = await setupUser(srv, 'alice');
    bob = await setupUser(srv, 'bob');
  });
  after(async () => {
    await srv?.stop(); // a clean exit: code 0, no sanitizer report
    await fake?.stop();
  });

  const callers = () => [
    { name: 'bob (session cookie)', jar: bob.jar, csrf: true },
    { name: 'bob (API token)', bearer: bob.token },
    { name: 'admin (API token)', bearer: admin.token },
  ];

  /** One request, then /health: the gateway must still answer after it. */
  async function probe(who, method, p, body, headers) {
    calls.made++;
    const label = `${who.name}: ${method} ${p.length > 160 ? `${p.slice(0, 160)}...` : p}`;
    let res;
    try {
      res = await request(srv, method, p, {
        jar: who.jar, csrf: who.csrf, bearer: who.bearer, body, headers, timeoutMs: REQUEST_TIMEOUT_MS,
      });
    } catch (e) {
      assert.fail(`${label}: ${e.message}\n${srv.stderr.slice(-4000)}`);
    }
    let health;
    try {
      health = await request(srv, 'GET', '/health', { timeoutMs: REQUEST_TIMEOUT_MS });
    } catch (e) {
      assert.fail(`after ${label} the gateway no longer answers /health (${e.message}):\n${srv.stderr.slice(-4000)}`);
    }
    assert.equal(health.status, 200, `after ${label}: /health ${health.status}`);
    return { res, label };
  }

  /** The answer is `status`, or any 4xx when status is null; never the owner's data. */
  function refused({ res, label }, status = 404) {
    assert.ok(res.status < 500, `${label}: ${res.status} ${res.text}`);
    if (status === null) assert.ok(res.status >= 400, `${label}: ${res.status} ${res.text}`);
    else assert.equal(res.status, status, `${label}: ${res.text}`);
    assert.ok(!res.text.includes(SECRET), `${label} leaks the owner's data: ${res.text}`);
    assert.ok(!res.text.includes(srv.home), `${label} leaks a host path: ${res.text}`);
  }

  async function matrix(whos, thread, run, { only } = {}) {
    for (const who of whos)
      for (const [method, p, body, headers] of routes(outputsSha)) {
        if (only && !only(p)) continue;
        refused(await probe(who, method, withIds(p, thread, run), body, headers));
      }
  }

  it('alice has a thread with a finished run (its tool ran in a sandbox), files and a live run', async () => {
    const a = { bearer: alice.token };
    const t = await request(srv, 'POST', '/api/threads', { ...a, body: { thread_id: THREAD, metadata: { note: SECRET } } });
    assert.equal(t.status, 200, t.text);
    const mp = multipart([{ filename: 'notes.txt', content: `${SECRET}\n` }]);
    const up = await request(srv, 'POST', `/api/threads/${THREAD}/uploads`, {
      ...a, body: mp.body, headers: { 'Content-Type': mp.contentType },
    });
    assert.equal(up.status, 200, up.text);
    fake.queue(
      reply('', [call('bash', { description: 'x', command: `echo ${SECRET} > /mnt/user-data/workspace/note.txt` })]),
      reply(`kept ${SECRET}`),
    );
    const done = await request(srv, 'POST', `/api/threads/${THREAD}/runs/wait`, {
      ...a, body: { assistant_id: 'lead_agent', input: human(`remember ${SECRET}`) }, timeoutMs: WAIT_MS,
    });
    assert.equal(done.status, 200, done.text);
    assert.match(done.text, new RegExp(SECRET));
    const runs = await request(srv, 'GET', `/api/threads/${THREAD}/runs`, a);
    assert.equal(runs.json.length, 1);
    assert.equal(runs.json[0].status, 'success');
    runId = runs.json[0].run_id;
    const receipts = await request(srv, 'GET', `/api/threads/${THREAD}/runs/${runId}/receipts`, a);
    assert.equal(receipts.json.receipts.length, 1, receipts.text);
    const secretFile = path.join(srv.userData(alice.id, THREAD), 'outputs', 'secret.txt');
    fs.writeFileSync(secretFile, `${SECRET}\n`);
    outputsSha = sha256(`${SECRET}\n`);
    const tokens = await request(srv, 'GET', '/api/v1/auth/tokens', a);
    aliceTokenId = tokens.json.tokens[0].id;

    // A run that stays in progress (its model answers slowly) until alice cancels it.
    fake.queue(slow(10 * WAIT_MS));
    const lt = await request(srv, 'POST', '/api/threads', { ...a, body: { thread_id: LIVE_THREAD } });
    assert.equal(lt.status, 200, lt.text);
    const modelCalls = fake.requests.length;
    const live = await request(srv, 'POST', `/api/threads/${LIVE_THREAD}/runs`, {
      ...a, body: { assistant_id: 'lead_agent', input: human(`live ${SECRET}`) },
    });
    assert.equal(live.status, 200, live.text);
    liveRunId = live.json.run_id;
    await waitFor(() => fake.requests.length > modelCalls);
  });

  it("another user's session and token, and an admin, get 404 on every route of alice's real ids", async () => {
    await matrix(callers(), THREAD, runId);
  });

  it("nobody else can read, follow or cancel alice's run while it is in progress", async () => {
    await matrix(callers(), LIVE_THREAD, liveRunId, { only: (p) => p.includes('/runs') || p === '/api/threads/T' });
    const live = await request(srv, 'GET', `/api/threads/${LIVE_THREAD}/runs/${liveRunId}`, { bearer: alice.token });
    assert.equal(live.json.status, 'running', 'the attempts left the run alone');
  });

  it("a real run id of alice's on a thread id alice does not have, and the reverse, is 404", async () => {
    await matrix(callers(), MISSING_THREAD, runId, { only: (p) => p.includes('/R') });
    await matrix(callers(), THREAD, liveRunId, { only: (p) => p.includes('/R') });
  });

  it("uploads/limits tells nobody whether a thread exists: alice's real ids answer as missing ones do", async () => {
    const answer = async (who, thread) => {
      const { res, label } = await probe(who, 'GET', `/api/threads/${thread}/uploads/limits`);
      assert.equal(res.status, 200, `${label}: ${res.text}`);
      return res.text;
    };
    const alices = await answer({ name: 'alice', bearer: alice.token }, THREAD);
    for (const who of [...callers(), { name: 'alice', bearer: alice.token }])
      for (const thread of [THREAD, LIVE_THREAD, MISSING_THREAD]) assert.equal(await answer(who, thread), alices);
    for (const id of MALFORMED) refused(await probe({ name: 'alice', bearer: alice.token }, 'GET', `/api/threads/${id}/uploads/limits`), null);
  });

  it('ids that do not exist are 404, for alice too', async () => {
    const aliceToken = { name: 'alice (API token)', bearer: alice.token };
    await matrix([...callers(), aliceToken], MISSING_THREAD, MISSING_RUN);
    await matrix([aliceToken], THREAD, MISSING_RUN, { only: (p) => p.includes('/R') });
  });

  it('malformed thread and run ids are refused with a 4xx, for alice too', async () => {
    const whos = [{ name: 'alice (API token)', bearer: alice.token }, { name: 'bob (API token)', bearer: bob.token }];
    for (const bad of MALFORMED) {
      await matrix(whos, bad, runId);
      for (const who of whos)
        for (const [method, p, body, headers] of routes(outputsSha).filter(([, q]) => q.includes('/R')))
          refused(await probe(who, method, withIds(p, THREAD, bad), body, headers), null);
    }
    // Raw dot segments and extra separators around real ids.
    const raw = [
      `/api/threads/${THREAD}/runs/../../${THREAD}/runs/${runId}`,
      `/api/threads/../threads/${THREAD}/runs`,
      `/api/threads/${THREAD}/./runs/${runId}`,
      `/api/threads//${THREAD}/runs`,
      `/api/threads/${THREAD}/artifacts/mnt/user-data/outputs/../../../../../../etc/passwd`,
      `/api/threads/${THREAD}/artifacts/mnt/user-data/%2e%2e/%2e%2e/%2e%2e/etc/passwd`,
    ];
    for (const who of whos)
      for (const p of raw) refused(await probe(who, 'GET', p), null);
  });

  it("another user cannot delete alice's API token by its id, whatever the id", async () => {
    const ids = [String(aliceTokenId), '0', '-1', '99999', '9'.repeat(30), 'abc', '%2e%2e', '1%00'];
    for (const who of callers())
      for (const id of ids) refused(await probe(who, 'DELETE', `/api/v1/auth/tokens/${id}`));
    const me = await request(srv, 'GET', '/api/v1/auth/me', { bearer: alice.token });
    assert.equal(me.status, 200, "alice's token still works");
  });

  it('the sandbox list is an admin\'s, and shows nothing of alice to bob', async () => {
    for (const who of callers().filter((w) => w.name.startsWith('bob'))) {
      const { res, label } = await probe(who, 'GET', '/api/sandboxes');
      refused({ res, label }, 403);
      assert.ok(!res.text.includes(THREAD), `${label}: ${res.text}`);
    }
  });

  it("uploads to alice's thread id, and a thread of that id, are bob's own", async () => {
    const mp = multipart([{ filename: 'notes.txt', content: 'from bob' }]);
    const up = await probe({ name: 'bob (API token)', bearer: bob.token }, 'POST', `/api/threads/${THREAD}/uploads`,
      mp.body, { 'Content-Type': mp.contentType });
    assert.equal(up.res.status, 200, up.res.text);
    assert.equal(fs.readFileSync(path.join(srv.userData(bob.id, THREAD), 'uploads', 'notes.txt'), 'utf8'), 'from bob');
    assert.equal(fs.readFileSync(path.join(srv.userData(alice.id, THREAD), 'uploads', 'notes.txt'), 'utf8'), `${SECRET}\n`);
    // On bob's own thread of that id, alice's run ids are still not his.
    const bobs = callers().filter((w) => w.name.startsWith('bob'));
    for (const who of bobs)
      for (const [method, p, body, headers] of routes(outputsSha).filter(([, q]) => q.includes('/R')))
        refused(await probe(who, method, withIds(p, THREAD, runId), body, headers));
    const list = await probe(bobs[1], 'GET', `/api/threads/${THREAD}/runs`);
    assert.deepEqual(list.res.json, []);
    const state = await probe(bobs[1], 'GET', `/api/threads/${THREAD}/state`);
    assert.equal(state.res.status, 200);
    assert.ok(!state.res.text.includes(SECRET), state.res.text);
    refused(await probe(bobs[1], 'GET', `/api/threads/${THREAD}/artifacts/mnt/user-data/outputs/secret.txt`));
    // A stateless run naming alice's thread runs on bob's.
    const stateless = await probe(bobs[1], 'POST', '/api/runs/wait', {
      ...RUN_BODY, config: { configurable: { thread_id: THREAD } },
    });
    assert.equal(stateless.res.status, 200, stateless.res.text);
    assert.ok(!stateless.res.text.includes(SECRET), stateless.res.text);
    const del = await probe(bobs[1], 'DELETE', `/api/threads/${THREAD}`);
    assert.equal(del.res.status, 200, del.res.text);
  });

  it("alice's data is intact, her live run ends when she cancels it, and the gateway is alive and clean", async (ctx) => {
    const a = { bearer: alice.token };
    const t = await request(srv, 'GET', `/api/threads/${THREAD}`, a);
    assert.equal(t.status, 200);
    assert.deepEqual(t.json.metadata, { note: SECRET });
    const runs = await request(srv, 'GET', `/api/threads/${THREAD}/runs`, a);
    assert.deepEqual(runs.json.map((r) => r.run_id), [runId]);
    const state = await request(srv, 'GET', `/api/threads/${THREAD}/state`, a);
    assert.match(state.text, new RegExp(`remember ${SECRET}`));
    assert.doesNotMatch(state.text, /stolen/);
    const uploads = await request(srv, 'GET', `/api/threads/${THREAD}/uploads/list`, a);
    assert.deepEqual(uploads.json.files.map((f) => f.filename), ['notes.txt']);
    const file = await request(srv, 'GET', `/api/threads/${THREAD}/artifacts/mnt/user-data/outputs/secret.txt`, a);
    assert.equal(file.text, `${SECRET}\n`);
    const cancel = await request(srv, 'POST', `/api/threads/${LIVE_THREAD}/runs/${liveRunId}/cancel?wait=1`, a);
    assert.ok([202, 204].includes(cancel.status), `${cancel.status} ${cancel.text}`);
    await waitFor(async () => (await request(srv, 'GET', `/api/threads/${LIVE_THREAD}/runs/${liveRunId}`, a))
      .json.status === 'interrupted');
    ctx.diagnostic(`${calls.made} requests by other users or with foreign, missing or malformed ids`);
    assert.equal(srv.proc.exitCode, null, 'the gateway is running');
    assert.equal(srv.proc.signalCode, null, 'the gateway is running');
    assert.ok(!sanitizerReport(srv.stderr), `sanitizer report from fawn serve:\n${srv.stderr}`);
  });
});
