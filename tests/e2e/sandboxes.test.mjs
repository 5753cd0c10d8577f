// GET /api/sandboxes (admins only) and `fawn sandbox ls` against a running
// gateway: both show the sandbox manager's view. And what becomes of a box
// whose gateway is gone: adopted by its successor (the dead run's sessions
// ended), or ended by itself after the idle timeout or once its home is
// deleted.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from './lib/test.mjs';

import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';
import { FawnServer, hostProcs, request, runFawn, setupAdmin, setupUser, sleep, uniqueSleep, waitFor } from './lib/server.mjs';

describe('sandbox observability', () => {
  let srv;
  let admin;
  let user;

  before(async () => {
    srv = await FawnServer.start();
    admin = await setupAdmin(srv);
    user = await setupUser(srv, 'plain-user');
  });
  after(async () => {
    await srv?.stop();
  });

  it('lists the manager\'s sandboxes to an admin', async () => {
    const r = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    assert.equal(r.status, 200, r.text);
    assert.ok(Array.isArray(r.json.sandboxes));
  });

  it('refuses everyone else', async () => {
    const r = await request(srv, 'GET', '/api/sandboxes', { bearer: user.token });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.detail, 'Permission denied: sandboxes:read');
    const anonymous = await request(srv, 'GET', '/api/sandboxes');
    assert.equal(anonymous.status, 401);
  });

  it('fawn sandbox ls asks the running gateway', async () => {
    const r = await runFawn(['sandbox', 'ls', '--config', srv.configPath], { home: srv.home });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^SANDBOX\s+USER\s+THREAD\s+GENERATION\s+STATE/);
    assert.doesNotMatch(r.stderr, /no gateway answered/);
  });
});

// ---- a box's life without its gateway ----

describe('a box without its gateway', () => {
  let fake;

  before(async () => {
    fake = await FakeOpenAI.start();
  });
  after(async () => {
    await fake?.stop();
  });

  /** A gateway whose run has started `job` in the background of its shell session, then was killed with SIGKILL. */
  async function crashWithJob(sandbox) {
    const srv = await FawnServer.start({ models: [fake.model()], sandbox });
    const admin = await setupAdmin(srv);
    const job = uniqueSleep();
    fake.queue(reply('', [call('bash', { description: 'x', command: `${job} >/dev/null 2>&1 & sleep 120` })]));
    const thread = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: {} });
    const run = await request(srv, 'POST', `/api/threads/${thread.json.thread_id}/runs`, {
      bearer: admin.token, body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'go' }] } },
    });
    assert.equal(run.status, 200, run.text);
    await waitFor(() => hostProcs(job) > 0, 30000, 'the run\'s background job');
    await srv.kill9();
    assert.ok(hostProcs(job) > 0, 'the job outlives the gateway');
    return { srv, job };
  }

  it('ends the sessions of a run cut short by kill -9 when the restarted gateway adopts its box', async () => {
    const { srv, job } = await crashWithJob({});
    await srv.restart();
    await waitFor(() => hostProcs(job) === 0, 30000, `${job} to end once its box is adopted`);
    await srv.stop();
  });

  it('exits after the idle timeout when no gateway talks to it, whatever its sessions run', async () => {
    const { srv, job } = await crashWithJob({ idle_timeout_s: 3 });
    try {
      await waitFor(() => hostProcs(job) === 0, 60000, `${job} to end with its box`);
    } finally {
      srv.removeHome();
    }
  });

  it('exits at once when its home is deleted', async () => {
    const { srv, job } = await crashWithJob({ idle_timeout_s: 600 });
    srv.removeHome();
    await waitFor(() => hostProcs(job) === 0, 30000, `${job} to end once its home is gone`);
  });
});
