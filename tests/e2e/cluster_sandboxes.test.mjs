// Two gateways on one PostgreSQL store and one home: a thread's sandbox is
// run by one gateway at a time. A run through the other gateway moves it
// (the owner lets go of it once idle, the new owner starts its own box),
// and when its owner is killed the survivor takes it over once the dead
// gateway's lease has run out. Run under scripts/pg-test-server.sh.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';
import { pgDatabase } from './lib/pg.mjs';
import { FawnServer, makeHome, request, setupAdmin } from './lib/server.mjs';

const CLUSTER = { heartbeat_ms: 200, lease_ms: 1000 };

describe('sandboxes across two gateways', () => {
  let fake;
  let a;
  let b;
  let admin;

  before(async () => {
    fake = await FakeOpenAI.start();
    const home = makeHome();
    const store = { backend: 'postgres', postgres: { dsn: pgDatabase('cluster_sandboxes') } };
    const config = (id) => ({ models: [fake.model()], store, cluster: { ...CLUSTER, gateway_id: id } });
    a = await FawnServer.start(config('gw-a'), { home });
    admin = await setupAdmin(a);
    b = await FawnServer.start(config('gw-b'), { home, configName: 'config-b.yaml' });
  });
  after(async () => {
    await b?.stop({ keepHome: true });
    if (a && !a.gone) await a.stop();
    else a?.removeHome();
    await fake?.stop();
  });

  /** One turn on thread tid through gateway srv whose model runs command; the tool's output. */
  async function bash(srv, tid, command) {
    fake.queue(reply('', [call('bash', { description: 'x', command })]), reply('done'));
    const r = await request(srv, 'POST', `/api/threads/${tid}/runs/wait`, {
      bearer: admin.token,
      body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'go' }] } },
    });
    assert.equal(r.status, 200, r.text);
    const tool = r.json.messages.findLast((m) => m.type === 'tool');
    assert.ok(tool, r.text);
    return String(tool.content);
  }

  /** The generation of tid's sandbox as gateway srv's manager holds it, or null. */
  async function heldBy(srv, tid) {
    const r = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    assert.equal(r.status, 200, r.text);
    return r.json.sandboxes.find((s) => s.thread_id === tid)?.generation ?? null;
  }

  it('moves a thread\'s sandbox to the gateway that runs it, and to the survivor when its owner dies', async () => {
    const created = await request(a, 'POST', '/api/threads', { bearer: admin.token, body: {} });
    assert.equal(created.status, 200, created.text);
    const tid = created.json.thread_id;

    assert.match(await bash(a, tid, 'echo from-a > /mnt/user-data/workspace/a.txt; echo ran-a'), /ran-a/);
    const first = await heldBy(a, tid);
    assert.ok(first, 'gw-a holds the sandbox it ran');
    assert.equal(await heldBy(b, tid), null);

    // Through gw-b: gw-a lets go of its idle sandbox; gw-b runs a box of its own on the same files.
    assert.match(await bash(b, tid, 'cat /mnt/user-data/workspace/a.txt'), /from-a/);
    const second = await heldBy(b, tid);
    assert.ok(second, 'gw-b holds the sandbox now');
    assert.notEqual(second, first);
    assert.equal(await heldBy(a, tid), null, 'gw-a let it go');

    // Back to gw-a, which is then killed holding it: gw-b takes it over.
    assert.match(await bash(a, tid, 'echo back-a'), /back-a/);
    const third = await heldBy(a, tid);
    assert.ok(third && third !== second);
    assert.equal(await heldBy(b, tid), null);
    await a.kill9();
    assert.match(await bash(b, tid, 'echo survivor; cat /mnt/user-data/workspace/a.txt'), /survivor\s+from-a/);
    const fourth = await heldBy(b, tid);
    assert.ok(fourth, 'the survivor holds it');
    assert.notEqual(fourth, third, 'the dead gateway\'s generation is never used again');
  });
});
