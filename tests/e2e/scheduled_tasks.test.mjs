// Scheduled tasks: DeerFlow's /api/scheduled-tasks routes, owner-scoped (another
// user's task is 404, for reading, changing and triggering); bad input 422 naming
// the field; trial runs by the owner under the concurrency budget, a paused task
// staying paused; runs without ask_clarification; at a minute boundary, the
// scheduler skips an occurrence whose previous run is still active and stops a
// task whose owner lost the right to run it; a gateway killed with -9 while a
// task is due runs it exactly once after its restart.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, request, runFawn, setupAdmin, setupUser, sleep, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, held, reply } from './lib/fake_openai.mjs';

// Waiting for a minute boundary takes up to a minute; a loaded host adds to it.
const BOUNDARY_CEILING_MS = 150000;

const marker = (name) => `${name}-${Math.random().toString(16).slice(2, 10)}`;

/** A cron task body whose prompt carries marker m. */
const cronTask = (m, extra = {}) => ({
  title: `task ${m}`,
  prompt: `${m}: write the report`,
  schedule_type: 'cron',
  schedule_spec: { cron: '* * * * *' },
  timezone: 'Europe/Berlin',
  ...extra,
});

/** Model requests made for marker m. */
const requestsFor = (fake, m) =>
  fake.requests.filter((r) => JSON.stringify(r.body?.messages ?? []).includes(m));

describe('scheduled tasks', { concurrency: true }, () => {
  describe('routes, trial runs and the scheduler', { concurrency: 1 }, () => {
    let srv;
    let fake;
    let admin;
    let bob;
    let carol;

    before(async () => {
      fake = await FakeOpenAI.start();
      srv = await FawnServer.start({
        models: [fake.model()],
        schedules: { max_concurrent_runs: 2, poll_interval_s: 1 },
        authorization: {
          enabled: true,
          roles: { admin: {}, user: {}, viewer: { routes: { allow: ['threads:read', 'runs:read'] } } },
        },
      });
      admin = await setupAdmin(srv);
      bob = await setupUser(srv, 'bob');
      carol = await setupUser(srv, 'carol');
    });
    after(async () => {
      await srv?.stop();
      await fake?.stop();
    });

    const api = (method, p, body, who = admin) => request(srv, method, p, { bearer: who.token, body });
    async function create(body, who = admin) {
      const r = await api('POST', '/api/scheduled-tasks', body, who);
      assert.equal(r.status, 200, r.text);
      return r.json;
    }
    async function runsOf(id, who = admin) {
      const r = await api('GET', `/api/scheduled-tasks/${id}/runs`, undefined, who);
      assert.equal(r.status, 200, r.text);
      return r.json;
    }
    const runEnded = (id, runId) =>
      waitFor(async () => (await runsOf(id)).find((x) => x.run_id === runId && x.status === 'success'), undefined,
        `run ${runId} of ${id} to succeed`);

    it('refuses bad input with 422 naming the field', async () => {
      const t = await api('POST', '/api/threads', {}, bob);
      const cases = [
        [{ ...cronTask('x'), title: '' }, /title/],
        [{ ...cronTask('x'), prompt: 7 }, /prompt/],
        [{ ...cronTask('x'), schedule_spec: { cron: '61 * * * *' } }, /schedule_spec\.cron: minute/],
        [{ ...cronTask('x'), schedule_spec: { cron: '* * * *' } }, /5 fields/],
        [{ ...cronTask('x'), schedule_spec: { cron: '0 0 30 2 *' } }, /never runs/],
        [{ ...cronTask('x'), schedule_spec: {} }, /schedule_spec\.cron/],
        [{ ...cronTask('x'), timezone: '../../../etc/passwd' }, /timezone/],
        [{ ...cronTask('x'), timezone: 'Mars/Olympus_Mons' }, /timezone/],
        [{ ...cronTask('x'), schedule_type: 'weekly' }, /schedule_type/],
        [{ ...cronTask('x'), context_mode: 'sometimes' }, /context_mode/],
        [{ ...cronTask('x'), context_mode: 'reuse_thread' }, /thread_id/],
        [{ ...cronTask('x'), schedule_type: 'once', schedule_spec: { run_at: new Date(Date.now() + 20000).toISOString() } }, /at least 60 seconds/],
        [{ ...cronTask('x'), schedule_type: 'once', schedule_spec: { run_at: '2030-02-30T10:00:00' } }, /run_at/],
      ];
      for (const [body, says] of cases) {
        const r = await api('POST', '/api/scheduled-tasks', body);
        assert.equal(r.status, 422, `${JSON.stringify(body)}: ${r.status} ${r.text}`);
        assert.match(r.json.detail, says, JSON.stringify(body));
      }
      // another user's thread is not found
      const r = await api('POST', '/api/scheduled-tasks', { ...cronTask('x'), context_mode: 'reuse_thread', thread_id: t.json.thread_id });
      assert.equal(r.status, 404, r.text);
      assert.equal((await api('GET', '/api/scheduled-tasks')).json.length, 0);
    });

    it('creates, reads, lists and edits a task in DeerFlow\'s shape', async () => {
      const m = marker('shape');
      const runAt = new Date(Date.now() + 3600 * 1000).toISOString();
      const task = await create({ ...cronTask(m), schedule_type: 'once', schedule_spec: { run_at: runAt } });
      assert.match(task.id, /^task-[0-9a-f]{32}$/);
      for (const k of ['user_id', 'thread_id', 'context_mode', 'title', 'prompt', 'schedule_type', 'schedule_spec',
        'timezone', 'status', 'next_run_at', 'last_run_at', 'last_run_id', 'last_thread_id', 'last_error',
        'run_count', 'created_at', 'updated_at'])
        assert.ok(k in task, `field ${k}`);
      assert.equal(task.status, 'enabled');
      assert.equal(task.context_mode, 'fresh_thread_per_run');
      assert.equal(task.thread_id, null);
      assert.deepEqual(task.schedule_spec, { run_at: runAt });
      assert.equal(Date.parse(task.next_run_at), Date.parse(runAt));
      assert.equal((await api('GET', `/api/scheduled-tasks/${task.id}`)).json.title, `task ${m}`);
      assert.ok((await api('GET', '/api/scheduled-tasks')).json.some((x) => x.id === task.id));
      const p = await api('PATCH', `/api/scheduled-tasks/${task.id}`, { title: 'renamed', timezone: 'America/New_York' });
      assert.equal(p.status, 200, p.text);
      assert.equal(p.json.title, 'renamed');
      assert.equal(p.json.timezone, 'America/New_York');
      for (const [body, says] of [[{ schedule_type: 'cron' }, /schedule_type/], [{ timezone: 'Nowhere/Else' }, /timezone/],
        [{ schedule_spec: { run_at: 'soon' } }, /run_at/], [{ title: 5 }, /title/]]) {
        const bad = await api('PATCH', `/api/scheduled-tasks/${task.id}`, body);
        assert.equal(bad.status, 422, bad.text);
        assert.match(bad.json.detail, says);
      }
      const d = await api('DELETE', `/api/scheduled-tasks/${task.id}`);
      assert.deepEqual(d.json, { id: task.id, deleted: true });
      assert.equal((await api('GET', `/api/scheduled-tasks/${task.id}`)).status, 404);
    });

    it('another user\'s task is 404 for every route, trigger included', async () => {
      const m = marker('theirs');
      const task = await create(cronTask(m, { schedule_spec: { cron: '0 3 1 1 *' } }));
      const id = task.id;
      for (const [method, p, body] of [['GET', `/api/scheduled-tasks/${id}`], ['PATCH', `/api/scheduled-tasks/${id}`, { title: 'mine' }],
        ['POST', `/api/scheduled-tasks/${id}/pause`], ['POST', `/api/scheduled-tasks/${id}/resume`],
        ['POST', `/api/scheduled-tasks/${id}/trigger`], ['GET', `/api/scheduled-tasks/${id}/runs`],
        ['DELETE', `/api/scheduled-tasks/${id}`], ['GET', `/api/scheduled-tasks/${id}%2F..%2F..`]]) {
        const r = await api(method, p, body, bob);
        assert.equal(r.status, 404, `${method} ${p}: ${r.status} ${r.text}`);
      }
      assert.equal((await api('GET', '/api/scheduled-tasks', undefined, bob)).json.length, 0);
      assert.equal(requestsFor(fake, m).length, 0, 'no run was started');
      const mine = await api('GET', `/api/scheduled-tasks/${id}`);
      assert.equal(mine.json.title, `task ${m}`);
      assert.equal(mine.json.run_count, 0);
      assert.equal((await api('DELETE', `/api/scheduled-tasks/${id}`)).status, 200);
    });

    it('a trial run runs as its owner without ask_clarification; a paused task stays paused', async () => {
      const m = marker('trial');
      const task = await create(cronTask(m, { schedule_spec: { cron: '0 3 1 1 *' } }), bob);
      const paused = await api('POST', `/api/scheduled-tasks/${task.id}/pause`, undefined, bob);
      assert.equal(paused.json.status, 'paused');
      const tr = await api('POST', `/api/scheduled-tasks/${task.id}/trigger`, undefined, bob);
      assert.equal(tr.status, 200, tr.text);
      assert.equal(tr.json.triggered, true);
      const run = await waitFor(async () => (await runsOf(task.id, bob)).find((x) => x.status === 'success'), undefined, 'the trial run');
      assert.equal(run.trigger, 'manual');
      assert.equal(run.triggered_by, String(bob.id));
      assert.equal(run.run_id, tr.json.run_id);
      const after = (await api('GET', `/api/scheduled-tasks/${task.id}`, undefined, bob)).json;
      assert.equal(after.status, 'paused');
      assert.equal(after.run_count, 1);
      assert.equal(after.last_run_id, tr.json.run_id);
      // the run is bob's, on a thread of bob's, with the prompt as its message
      const st = await api('GET', `/api/threads/${run.thread_id}/state`, undefined, bob);
      assert.equal(st.status, 200, st.text);
      assert.ok(JSON.stringify(st.json.values.messages).includes(m));
      assert.equal((await api('GET', `/api/threads/${run.thread_id}/state`)).status, 404, 'not the admin\'s thread');
      const reqs = requestsFor(fake, m);
      assert.equal(reqs.length, 1);
      const tools = (reqs[0].body.tools || []).map((t) => t.function?.name);
      assert.ok(tools.includes('read_file'), `tools offered: ${tools}`);
      assert.ok(!tools.includes('ask_clarification'), `tools offered: ${tools}`);
      const resumed = await api('POST', `/api/scheduled-tasks/${task.id}/resume`, undefined, bob);
      assert.equal(resumed.json.status, 'enabled');
      assert.ok(Date.parse(resumed.json.next_run_at) > Date.now());
    });

    it('a model that asks for clarification anyway is denied the tool', async () => {
      const m = marker('ask');
      fake.route(m, reply('', [call('ask_clarification', { question: 'Which report?' })]), reply('did it without asking'));
      const task = await create(cronTask(m, { schedule_spec: { cron: '0 3 1 1 *' } }));
      const tr = await api('POST', `/api/scheduled-tasks/${task.id}/trigger`);
      assert.equal(tr.status, 200, tr.text);
      await runEnded(task.id, tr.json.run_id);
      const st = await api('GET', `/api/threads/${tr.json.thread_id}/state`);
      const tool = st.json.values.messages.find((x) => x.type === 'tool');
      assert.ok(tool, JSON.stringify(st.json.values.messages));
      assert.match(JSON.stringify(tool.content), /not available/);
      assert.equal(st.json.values.messages.at(-1).content, 'did it without asking');
      assert.equal((await api('DELETE', `/api/scheduled-tasks/${task.id}`)).status, 200);
    });

    it('a thread\'s tasks, and trial runs under the budget: 409 while active or full', async () => {
      const t = (await api('POST', '/api/threads', {})).json.thread_id;
      const m1 = marker('busy1');
      const m2 = marker('busy2');
      const m3 = marker('busy3');
      const h1 = held('one done');
      const h2 = held('two done');
      fake.route(m1, h1.step);
      fake.route(m2, h2.step);
      const t1 = await create(cronTask(m1, { schedule_spec: { cron: '0 3 1 1 *' }, context_mode: 'reuse_thread', thread_id: t }));
      const t2 = await create(cronTask(m2, { schedule_spec: { cron: '0 3 1 1 *' } }));
      const t3 = await create(cronTask(m3, { schedule_spec: { cron: '0 3 1 1 *' } }));
      const listed = await api('GET', `/api/threads/${t}/scheduled-tasks`);
      assert.deepEqual(listed.json.map((x) => x.id), [t1.id]);
      assert.equal((await api('GET', `/api/threads/${t}/scheduled-tasks`, undefined, bob)).status, 404);
      const r1 = await api('POST', `/api/scheduled-tasks/${t1.id}/trigger`);
      assert.equal(r1.status, 200, r1.text);
      assert.equal(r1.json.thread_id, t);
      const again = await api('POST', `/api/scheduled-tasks/${t1.id}/trigger`);
      assert.equal(again.status, 409, again.text);
      assert.match(again.json.detail, /active run/);
      assert.equal((await api('POST', `/api/scheduled-tasks/${t2.id}/trigger`)).status, 200);
      const full = await api('POST', `/api/scheduled-tasks/${t3.id}/trigger`);
      assert.equal(full.status, 409, full.text);
      assert.match(full.json.detail, /limit/);
      await waitFor(() => requestsFor(fake, m1).length && requestsFor(fake, m2).length, undefined, 'both held runs');
      h1.release();
      h2.release();
      await runEnded(t1.id, r1.json.run_id);
      await waitFor(async () => (await runsOf(t2.id)).some((x) => x.status === 'success'), undefined, 'the second run');
      const r3 = await api('POST', `/api/scheduled-tasks/${t3.id}/trigger`);
      assert.equal(r3.status, 200, r3.text);
      await runEnded(t3.id, r3.json.run_id);
      assert.equal((await runsOf(t3.id)).length, 1, 'the refused trigger recorded nothing');
      for (const x of [t1, t2, t3]) assert.equal((await api('DELETE', `/api/scheduled-tasks/${x.id}`)).status, 200);
    });

    it('at a minute boundary: an active run\'s occurrence is skipped, a task whose owner lost the right is stopped', { ceilingMs: BOUNDARY_CEILING_MS + 60000 }, async () => {
      const mBusy = marker('skip');
      const mGone = marker('revoked');
      const h = held('finally done');
      fake.route(mBusy, h.step);
      const busy = await create(cronTask(mBusy));
      const tr = await api('POST', `/api/scheduled-tasks/${busy.id}/trigger`);
      assert.equal(tr.status, 200, tr.text);
      await waitFor(() => requestsFor(fake, mBusy).length, undefined, 'the held run to call the model');
      const gone = await create(cronTask(mGone), carol);
      const set = await runFawn(['user', 'role', '--username', 'carol', '--role', 'viewer', '--config', srv.configPath], { home: srv.home });
      assert.equal(set.code, 0, set.stderr);
      // the scheduler reaches both at their next minute (a ceiling, not a timing)
      const skipped = await waitFor(async () => (await runsOf(busy.id)).find((x) => x.status === 'skipped'),
        BOUNDARY_CEILING_MS, 'the skipped occurrence');
      assert.equal(skipped.trigger, 'scheduled');
      assert.match(skipped.error, /still active/);
      assert.equal(Date.parse(skipped.scheduled_for) % 60000, 0, 'a minute boundary');
      const stopped = await waitFor(async () => {
        const g = (await api('GET', `/api/scheduled-tasks/${gone.id}`, undefined, carol)).json;
        return g.status === 'stopped' && g;
      }, BOUNDARY_CEILING_MS, 'the revoked task to stop');
      assert.match(stopped.stop_reason, /role viewer/);
      assert.equal(requestsFor(fake, mGone).length, 0, 'no run as a user without the right');
      const goneRuns = (await runsOf(gone.id, carol));
      assert.equal(goneRuns.length, 1);
      assert.equal(goneRuns[0].status, 'failed');
      // the held run was never doubled; released, it ends
      assert.equal(requestsFor(fake, mBusy).length, 1);
      h.release();
      await runEnded(busy.id, tr.json.run_id);
      assert.equal((await api('POST', `/api/scheduled-tasks/${busy.id}/pause`)).json.status, 'paused');
    });
  });

  describe('a gateway killed while a task is due', { concurrency: 1 }, () => {
    let srv;
    let fake;
    let admin;

    before(async () => {
      fake = await FakeOpenAI.start();
      srv = await FawnServer.start({ models: [fake.model()], schedules: { poll_interval_s: 1 } });
      admin = await setupAdmin(srv);
    });
    after(async () => {
      await srv?.stop();
      await fake?.stop();
    });

    it('runs the occurrence exactly once after kill -9 and a restart', { ceilingMs: BOUNDARY_CEILING_MS + 120000 }, async () => {
      const api = (method, p, body) => request(srv, method, p, { bearer: admin.token, body });
      // leave a few seconds before the boundary to kill the gateway in
      if (Date.now() % 60000 > 52000) await sleep(60000 - (Date.now() % 60000) + 500);
      const m = marker('crash');
      const c = await api('POST', '/api/scheduled-tasks', cronTask(m, { timezone: 'America/New_York' }));
      assert.equal(c.status, 200, c.text);
      const due = Date.parse(c.json.next_run_at);
      assert.equal(due % 60000, 0);
      await srv.kill9();
      while (Date.now() < due + 1500) await sleep(Math.min(1000, due + 1500 - Date.now()));
      await srv.restart();
      const ran = await waitFor(async () => {
        const runs = (await api('GET', `/api/scheduled-tasks/${c.json.id}/runs`)).json;
        return runs.find((x) => Date.parse(x.scheduled_for) === due && x.status === 'success') && runs;
      }, BOUNDARY_CEILING_MS, 'the due occurrence to run after the restart');
      assert.equal((await api('POST', `/api/scheduled-tasks/${c.json.id}/pause`)).status, 200);
      const runs = (await api('GET', `/api/scheduled-tasks/${c.json.id}/runs`)).json;
      assert.equal(runs.filter((x) => Date.parse(x.scheduled_for) === due).length, 1, JSON.stringify(ran));
      const started = runs.filter((x) => x.run_id).length;
      assert.equal(requestsFor(fake, m).length, started, 'one model call per started run');
      const task = (await api('GET', `/api/scheduled-tasks/${c.json.id}`)).json;
      assert.equal(task.run_count, started);
      assert.ok(Date.parse(task.next_run_at) > due);
    });
  });
});
