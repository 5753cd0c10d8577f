// Two gateways on one PostgreSQL store and one home (docs/cluster.md): a
// run started through one is streamed, cancelled and refused a second run
// through the other; a gateway taken for dead while alive fences its run
// and stores nothing after the end the other stored; one cut off the
// database (through lib/pg.mjs's PgRelay) cancels its run within a lease
// and comes back; and a gateway killed mid-run has its run ended by the
// survivor within the lease, never run twice. Runs here need no sandbox:
// the fake model answers in text. Needs PostgreSQL (FAWN_TEST_PG, from
// scripts/pg-test-server.sh): without it the test fails.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from './lib/test.mjs';
import { Client } from '@langchain/langgraph-sdk';

import { FawnServer, request, setupAdmin, setupUser, storeRows, waitFor } from './lib/server.mjs';
import { FakeOpenAI, held, reply } from './lib/fake_openai.mjs';
import { PgRelay, pgDatabase } from './lib/pg.mjs';

function sdk(srv, token) {
  return new Client({
    apiUrl: `${srv.base}/api`,
    defaultHeaders: { Authorization: `Bearer ${token}` },
    callerOptions: { maxRetries: 0 },
  });
}

const human = (content) => ({ messages: [{ type: 'human', content }] });

/** Every part of a stream, as [{event, data}]. */
async function collect(stream) {
  const parts = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

/** The model requests whose last user message is marker (the run asking it). */
function callsFor(fake, marker) {
  return fake.requests.filter((r) => {
    const users = (r.body?.messages ?? []).filter((m) => m.role === 'user');
    return JSON.stringify(users.at(-1)?.content ?? '').includes(marker);
  }).length;
}

describe('two gateways on one PostgreSQL store', () => {
  let fake;
  let a;
  let b;
  let admin;
  let home;
  // A reaches the database through it, to be cut off. The test reads the
  // store through B: psql through the relay would wait on this process,
  // whose event loop storeRows' spawnSync holds.
  let relay;

  before(async () => {
    fake = await FakeOpenAI.start();
    relay = await PgRelay.start();
    const dsn = pgDatabase('cluster');
    const config = (id) => ({
      models: [fake.model()],
      store: { backend: 'postgres', postgres: { dsn: id === 'gw-a' ? relay.dsn(dsn) : dsn } },
      // A lease of 10 beats: a loaded test host can stall a thread for most of
      // a second, and a live gateway taken for dead would fence its runs.
      cluster: { gateway_id: id, heartbeat_ms: 200, lease_ms: 2000 },
    });
    a = await FawnServer.start(config('gw-a'));
    home = a.home;
    b = await FawnServer.start(config('gw-b'), { home, configName: 'config-b.yaml' });
    admin = await setupAdmin(a);
  });
  after(async () => {
    if (a && !a.gone) await a.stop({ keepHome: true });
    await b?.stop({ keepHome: true });
    if (home) fs.rmSync(home, { recursive: true, force: true });
    await relay?.stop();
    await fake?.stop();
  });

  /** Starts a run through srv whose model reply is held; {thread, run, hold, marker}. */
  async function heldRun(srv, marker, thread) {
    const hold = held(`answer to ${marker}`);
    fake.queue(hold.step);
    const client = sdk(srv, admin.token);
    const t = thread || (await client.threads.create());
    const run = await client.runs.create(t.thread_id, 'lead_agent', { input: human(marker) });
    await waitFor(() => callsFor(fake, marker) === 1, undefined, `the model call of ${marker}`);
    return { thread: t, run, hold, marker };
  }

  const runThrough = (srv, r) => request(srv, 'GET', `/api/threads/${r.thread.thread_id}/runs/${r.run.run_id}`, { bearer: admin.token });

  it('streams through B a run that A runs: the same events, ending with end', async () => {
    const r = await heldRun(a, 'stream-across');
    const viaA = collect(sdk(a, admin.token).runs.joinStream(r.thread.thread_id, r.run.run_id));
    const partsB = [];
    const viaB = (async () => {
      for await (const part of sdk(b, admin.token).runs.joinStream(r.thread.thread_id, r.run.run_id)) partsB.push(part);
      return partsB;
    })();
    // B has the stored metadata event (the run is live on A only) before A's model answers.
    await waitFor(() => partsB.length > 0, undefined, 'the first event through B');
    assert.equal(partsB[0].event, 'metadata');
    assert.equal((await runThrough(b, r)).json.status, 'running');
    r.hold.release();
    const [eventsA, eventsB] = await Promise.all([viaA, viaB]);
    assert.deepEqual(eventsB, eventsA);
    assert.ok(eventsB.some((e) => e.event === 'values'), 'values events through B');
    const last = eventsB.at(-1);
    assert.ok(last.event === 'end' || last.event === 'values', `ends with the run's last event: ${last.event}`);
    assert.equal((await runThrough(b, r)).json.status, 'success');
    // The raw stream through B ends with an end frame.
    const raw = await request(b, 'GET', `/api/threads/${r.thread.thread_id}/runs/${r.run.run_id}/stream`, { bearer: admin.token });
    assert.equal(raw.status, 200);
    assert.match(raw.text, /event: end\n[^]*$/);
  });

  it('cancels through B a run that A runs', async () => {
    const r = await heldRun(a, 'cancel-across');
    const url = `/api/threads/${r.thread.thread_id}/runs/${r.run.run_id}/cancel`;
    // Another user naming the run through B: not found, and nothing changes.
    const other = await setupUser(b, 'cluster-other');
    assert.equal((await request(b, 'POST', url, { bearer: other.token })).status, 404);
    assert.equal((await runThrough(a, r)).json.status, 'running');
    const res = await request(b, 'POST', `/api/threads/${r.thread.thread_id}/runs/${r.run.run_id}/cancel?wait=1`, { bearer: admin.token });
    assert.equal(res.status, 204, res.text);
    assert.equal((await runThrough(a, r)).json.status, 'interrupted');
    r.hold.release();
    const again = await request(b, 'POST', url, { bearer: admin.token });
    assert.equal(again.status, 409, 'an ended run is not cancellable');
  });

  it('refuses through B a second run on a thread A runs one on, and interrupts it on request', async () => {
    const r = await heldRun(a, 'busy-across');
    const refused = await request(b, 'POST', `/api/threads/${r.thread.thread_id}/runs`, {
      bearer: admin.token, body: { assistant_id: 'lead_agent', input: human('second') },
    });
    assert.equal(refused.status, 409, refused.text);
    assert.equal((await runThrough(b, r)).json.status, 'running');
    fake.queue(reply('interrupting answer'));
    const replaced = await request(b, 'POST', `/api/threads/${r.thread.thread_id}/runs`, {
      bearer: admin.token, body: { assistant_id: 'lead_agent', input: human('interrupting'), multitask_strategy: 'interrupt' },
    });
    assert.equal(replaced.status, 200, replaced.text);
    assert.equal((await runThrough(a, r)).json.status, 'interrupted');
    r.hold.release();
    await waitFor(async () => (await request(b, 'GET', `/api/threads/${r.thread.thread_id}/runs/${replaced.json.run_id}`, { bearer: admin.token })).json.status === 'success',
      undefined, 'the interrupting run to succeed');
  });

  it('ends through B the run of A taken for dead; A, alive, fences it and writes nothing after B\'s end', async () => {
    const r = await heldRun(a, 'taken-for-dead');
    // A's last beat made old (as a pause past the lease would) until B's
    // reap takes A for dead before A beats again.
    await waitFor(async () => {
      storeRows(b, "UPDATE gateways SET beat_at_ms = 0 WHERE id = 'gw-a'");
      return (await runThrough(b, r)).json.status === 'error';
    }, undefined, 'B to take A for dead and end its run');
    await waitFor(() => /gateway gw-a: its lease was taken/.test(a.stderr), undefined, 'A to find its lease lost');
    const ended = new RegExp(`run ${r.run.run_id} on thread ${r.thread.thread_id}: `);
    await waitFor(() => ended.test(a.stderr), undefined, 'A to end its copy of the run');
    assert.match(a.stderr, new RegExp(`run ${r.run.run_id}: ended meanwhile by another gateway`));
    assert.match(a.stderr, new RegExp(`run ${r.run.run_id}: ended by another gateway; its events from \\d+ on dropped`));
    r.hold.release();
    const run = (await runThrough(b, r)).json;
    assert.equal(run.status, 'error');
    assert.match(run.error ?? JSON.stringify(run), /gateway running it stopped/);
    const events = storeRows(b, `SELECT event FROM run_events WHERE run_id = '${r.run.run_id}' ORDER BY seq`);
    assert.equal(events.at(-1), 'end');
    assert.equal(events.filter((e) => e === 'end').length, 1, events.join(' '));
    assert.equal(callsFor(fake, 'taken-for-dead'), 1);
    // A registered again: it runs the thread's next run.
    fake.queue(reply('A is back'));
    const next = await sdk(a, admin.token).runs.wait(r.thread.thread_id, 'lead_agent', { input: human('again') });
    assert.equal(next.messages.at(-1).content, 'A is back');
  });

  it('cuts A off the database mid-run: A cancels its run within a lease, B ends it, A comes back', async () => {
    const r = await heldRun(a, 'cut-off');
    await relay.cut();
    try {
      await waitFor(() => /gateway gw-a: no heartbeat stored for a whole lease; its runs are cancelled/.test(a.stderr),
        undefined, 'A to fence its runs');
      await waitFor(async () => (await runThrough(b, r)).json.status === 'error', undefined, 'B to end the run of A');
    } finally {
      await relay.restore();
    }
    r.hold.release();
    // Back on the database, A finds its row reaped, fences again and
    // registers anew; a run it took before that would be ended with it.
    await waitFor(() => storeRows(b, "SELECT id FROM gateways WHERE id = 'gw-a'").length === 1,
      undefined, 'A to register again');
    fake.queue(reply('A is back again'));
    const next = await sdk(a, admin.token).runs.wait(r.thread.thread_id, 'lead_agent', { input: human('back') });
    assert.equal(next.messages.at(-1).content, 'A is back again');
    const run = (await runThrough(b, r)).json;
    assert.match(run.error ?? JSON.stringify(run), /gateway running it stopped/);
    const events = storeRows(b, `SELECT event FROM run_events WHERE run_id = '${r.run.run_id}' ORDER BY seq`);
    assert.equal(events.at(-1), 'end');
    assert.equal(events.filter((e) => e === 'end').length, 1, events.join(' '));
    assert.equal(callsFor(fake, 'cut-off'), 1);
  });

  it('ends through B, within the lease, the run of A killed mid-run; never runs it twice', async () => {
    const r = await heldRun(a, 'killed-gateway');
    const follow = collect(sdk(b, admin.token).runs.joinStream(r.thread.thread_id, r.run.run_id));
    await a.kill9();
    await waitFor(async () => (await runThrough(b, r)).json.status === 'error', undefined, 'B to end the dead gateway\'s run');
    const ended = (await runThrough(b, r)).json;
    assert.match(ended.error ?? JSON.stringify(ended), /gateway running it stopped/);
    const events = await follow; // ends: the run is final and its last events are stored
    assert.equal(events[0].event, 'metadata');
    const error = events.find((e) => e.event === 'error');
    assert.match(JSON.stringify(error?.data), /gateway running it stopped/);
    r.hold.release();
    assert.equal(callsFor(fake, 'killed-gateway'), 1, 'the model was called once for the run');
    // The thread is free: a new run through B succeeds.
    fake.queue(reply('after the crash'));
    const next = await sdk(b, admin.token).runs.wait(r.thread.thread_id, 'lead_agent', { input: human('after') });
    assert.equal(next.messages.at(-1).content, 'after the crash');
    assert.equal(callsFor(fake, 'killed-gateway'), 1, 'nothing ran the dead gateway\'s run again');
  });
});
