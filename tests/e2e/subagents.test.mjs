// Sub-agents: the lead's task calls of one reply run at the same time, each
// in its own context and its own shell session of the thread's sandbox, and
// answer with a status, a brief and the sha256 of the whole answer. Limits
// per reply and per run, timeouts and cancels stop them (their commands
// killed); their steps are task_* events, readable by task id; each of
// their tool calls has a receipt; a role changed mid-run stops the next
// tool call, the lead's or a sub-agent's, and a queued run starts with the
// role its user has then.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, hostProcs, request, runFawn, setupAdmin, setupUser, sha256, skillsDirWith, uniqueSleep, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, held, reply } from './lib/fake_openai.mjs';

const human = (content) => ({ messages: [{ type: 'human', content }] });
const task = (marker, type = 'general-purpose') =>
  call('task', { description: `work ${marker}`, prompt: `${marker}: do your part`, subagent_type: type });
const bash = (command) => call('bash', { description: 'run', command });

describe('sub-agents', () => {
  let srv;
  let fake;
  let admin;
  let bob;
  let skillsDir;

  before(async () => {
    fake = await FakeOpenAI.start();
    skillsDir = skillsDirWith({
      alpha: '---\nname: alpha\ndescription: The first skill\n---\n# Alpha\n',
      beta: '---\nname: beta\ndescription: The second skill\n---\n# Beta\n',
    });
    srv = await FawnServer.start({
      models: [fake.model()],
      sandbox: { skills_dir: skillsDir },
      subagents: { custom: [
        { name: 'quick', description: 'answers fast', system_prompt: 'Be quick.', tools: ['bash'], timeout_s: 3 },
        { name: 'reader', description: 'reads', system_prompt: 'You read files for the lead.', tools: ['read_file', 'ls'], skills: ['alpha'], max_turns: 2 },
      ] },
      authorization: {
        enabled: true,
        roles: { admin: {}, user: {}, nobody: { sandbox: { deny: ['execute'] } } },
      },
    });
    admin = await setupAdmin(srv);
    bob = await setupUser(srv, 'bob');
  });
  after(async () => {
    await srv?.stop();
    await fake?.stop();
    fs.rmSync(skillsDir, { recursive: true, force: true });
  });

  const api = (method, p, body, who = admin) => request(srv, method, p, { bearer: who.token, body });
  async function thread(who = admin) {
    const t = await api('POST', '/api/threads', {}, who);
    assert.equal(t.status, 200, t.text);
    return t.json.thread_id;
  }
  async function runWait(tid, text, who = admin) {
    const r = await api('POST', `/api/threads/${tid}/runs/wait`, { assistant_id: 'lead_agent', input: human(text) }, who);
    assert.equal(r.status, 200, r.text);
    const runs = await api('GET', `/api/threads/${tid}/runs`, undefined, who);
    return runs.json[0];
  }
  async function messages(tid, who = admin) {
    const s = await api('GET', `/api/threads/${tid}/state`, undefined, who);
    assert.equal(s.status, 200, s.text);
    return s.json.values.messages;
  }
  const toolAnswers = (msgs, name) => msgs.filter((m) => m.type === 'tool' && m.name === name);
  const events = async (tid, runId, query = '', who = admin) => {
    const r = await api('GET', `/api/threads/${tid}/runs/${runId}/events${query}`, undefined, who);
    assert.equal(r.status, 200, r.text);
    return r.json;
  };

  it('three sub-agents run at once, each in its own shell session, and answer with status, brief and sha256', async () => {
    const tid = await thread();
    const ws = '/mnt/user-data/workspace';
    // Each waits until all three have started: only sub-agents that run at
    // the same time see the three marks.
    const meet = (m) =>
      `mkdir -p /tmp/${m} && cd /tmp/${m} && export MARK=${m} && touch ${ws}/started-${m} && ` +
      `for i in $(seq 600); do [ -e ${ws}/started-A ] && [ -e ${ws}/started-B ] && [ -e ${ws}/started-C ] && break; sleep 0.1; done; ls ${ws}`;
    for (const m of ['A', 'B', 'C']) {
      fake.route(`AGENT-${m}`, reply('', [bash(meet(m))]), reply('', [bash('echo "$(pwd) $MARK"')]), reply(`${m} done`));
    }
    fake.queue(reply('Delegating.', [task('AGENT-A'), task('AGENT-B', 'bash'), task('AGENT-C')]), reply('All three are done.'));
    const run = await runWait(tid, 'split the work');
    assert.equal(run.status, 'success');

    const msgs = await messages(tid);
    const answers = toolAnswers(msgs, 'task');
    assert.equal(answers.length, 3);
    const ai = msgs.find((m) => m.type === 'ai' && m.tool_calls?.length === 3);
    for (const [i, m] of ['A', 'B', 'C'].entries()) {
      const a = answers.find((x) => x.tool_call_id === ai.tool_calls[i].id);
      assert.equal(a.content, `Task Succeeded. Result: ${m} done`);
      assert.equal(a.status, 'success');
      assert.equal(a.additional_kwargs.tool_status.status, 'success');
      assert.equal(a.additional_kwargs.subagent_status, 'completed');
      assert.equal(a.additional_kwargs.subagent_result_brief, `${m} done`);
      assert.equal(a.additional_kwargs.subagent_result_sha256, sha256(`${m} done`));
      assert.equal(a.additional_kwargs.subagent_type, i === 1 ? 'bash' : 'general-purpose');

      // Its steps, by task id: its replies and tool results.
      const steps = await events(tid, run.run_id, `?event_types=task_running&task_id=${ai.tool_calls[i].id}`);
      const tools = steps.map((e) => e.content.message).filter((x) => x.type === 'tool');
      assert.equal(tools.length, 2, JSON.stringify(steps));
      assert.ok(steps.every((e) => e.category === 'subagent' && e.metadata.task_id === ai.tool_calls[i].id));
      assert.match(tools[0].content, /started-A[\s\S]*started-B[\s\S]*started-C/);
      assert.match(tools[1].content, new RegExp(`/tmp/${m} ${m}\\b`));
      assert.equal(tools[1].additional_kwargs.tool_status.status, 'success');
      const ends = await events(tid, run.run_id, `?event_types=task_started,task_completed&task_id=${ai.tool_calls[i].id}`);
      assert.deepEqual(ends.map((e) => e.event_type), ['task_started', 'task_completed']);
      assert.equal(ends[1].content.result, `${m} done`);
      // Paged by seq: after the first step, the rest.
      const later = await events(tid, run.run_id, `?task_id=${ai.tool_calls[i].id}&after_seq=${steps[0].seq}&limit=1`);
      assert.equal(later.length, 1);
      assert.ok(later[0].seq > steps[0].seq);
    }
    // A sub-agent's messages are never the thread's.
    assert.ok(!msgs.some((m) => typeof m.content === 'string' && / done$/.test(m.content) && m.type === 'ai'));

    // Receipts of the sub-agents' tool calls, filed under their task.
    const rc = await api('GET', `/api/threads/${tid}/runs/${run.run_id}/receipts`);
    const sub = rc.json.receipts.filter((r) => r.tool_name === 'bash');
    assert.equal(sub.length, 6);
    for (const t of ai.tool_calls) assert.equal(sub.filter((r) => r.tool_call_id.startsWith(`${t.id}/`)).length, 2);
    assert.equal(rc.json.receipts.filter((r) => r.tool_name === 'task').length, 3);

    // Each call is counted for its caller: the lead's 2, each sub-agent's 3 (11 in, 7 out each).
    const record = (await api('GET', `/api/threads/${tid}/runs/${run.run_id}`)).json;
    assert.equal(record.lead_agent_tokens, 2 * 18);
    assert.equal(record.subagent_tokens, 9 * 18);
    assert.deepEqual(record.token_usage_by_caller['subagent:general-purpose'], { input_tokens: 6 * 11, output_tokens: 6 * 7, total_tokens: 6 * 18, calls: 6 });
    assert.equal(record.token_usage_by_caller['subagent:bash'].calls, 3);

    // Another user reads none of it.
    const other = await api('GET', `/api/threads/${tid}/runs/${run.run_id}/events`, undefined, bob);
    assert.equal(other.status, 404);
  });

  it('a fourth task call in one reply and a seventh in one run are answered, not started', async () => {
    const tid = await thread();
    fake.queue(
      reply('', [task('LIM-1'), task('LIM-2'), task('LIM-3'), task('LIM-4')]),
      reply('', [task('LIM-5'), task('LIM-6'), task('LIM-7')]),
      reply('', [task('LIM-8')]),
      reply('finished'),
    );
    for (let i = 1; i <= 8; i++) fake.route(`LIM-${i}`, reply(`sub ${i}`));
    const run = await runWait(tid, 'many tasks');
    assert.equal(run.status, 'success');
    const answers = toolAnswers(await messages(tid), 'task');
    assert.equal(answers.length, 8);
    const limited = answers.filter((a) => a.content.includes('[SUBAGENT LIMIT REACHED]'));
    assert.equal(limited.length, 2);
    assert.match(limited[0].content, /one reply starts at most 3 sub-agents/);
    assert.match(limited[1].content, /a run starts at most 6 sub-agents/);
    for (const a of limited) {
      assert.equal(a.additional_kwargs.tool_status.status, 'error');
      assert.equal(a.additional_kwargs.tool_status.error_type, 'limit');
    }
    assert.equal(answers.filter((a) => a.additional_kwargs.subagent_status === 'completed').length, 6);
    const started = await events(tid, run.run_id, '?event_types=task_started');
    assert.equal(started.length, 6);
  });

  it('a custom type has its own prompt, tools, skills and turns, and sees none of the lead history', async () => {
    const tid = await thread();
    fake.queue(reply('noted'));
    await runWait(tid, 'SECRET-LEAD-HISTORY');
    const asked = fake.requests.length;
    fake.route('READ-1', reply('', [call('ls', { description: 'look', path: '/mnt/user-data' })]), reply('', [call('ls', { description: 'again', path: '/mnt/user-data' })]));
    fake.queue(reply('', [task('READ-1', 'reader')]), reply('ok'));
    const run = await runWait(tid, 'read something');
    assert.equal(run.status, 'success');
    const sub = fake.requests.slice(asked).filter((r) => JSON.stringify(r.body.messages).includes('READ-1: do your part') && r.body.messages[0].content.startsWith('You read files'));
    assert.equal(sub.length, 2, 'two turns, its max_turns');
    const body = sub[0].body;
    assert.deepEqual(body.tools.map((t) => t.function.name).sort(), ['ls', 'read_file']);
    assert.match(body.messages[0].content, /alpha/);
    assert.doesNotMatch(body.messages[0].content, /beta/);
    assert.ok(!JSON.stringify(body.messages).includes('SECRET-LEAD-HISTORY'));
    // The lead is offered task with every type; the second turn cap fails the task.
    const lead = fake.requests.at(-1).body;
    const taskTool = lead.tools.find((t) => t.function.name === 'task');
    assert.deepEqual(taskTool.function.parameters.properties.subagent_type.enum, ['general-purpose', 'bash', 'quick', 'reader']);
    const [a] = toolAnswers(await messages(tid), 'task');
    assert.equal(a.additional_kwargs.subagent_status, 'failed');
    assert.match(a.content, /^Task failed\. Error: Recursion limit of 2 model calls reached/);
  });

  it('an unknown type is answered with the types there are', async () => {
    const tid = await thread();
    fake.queue(reply('', [task('UNK-1', 'wizard')]), reply('ok'));
    await runWait(tid, 'unknown');
    const [a] = toolAnswers(await messages(tid), 'task');
    assert.match(a.content, /Unknown subagent type 'wizard'\. Available: general-purpose, bash, quick/);
    assert.equal(a.additional_kwargs.tool_status.error_type, 'invalid_arguments');
  });

  it('a sub-agent past its timeout is stopped and its command killed', async () => {
    const tid = await thread();
    const sleep = uniqueSleep();
    fake.route('SLOW-1', reply('', [bash(sleep)]), reply('should not be asked'));
    fake.queue(reply('', [task('SLOW-1', 'quick')]), reply('the task timed out'));
    const run = await runWait(tid, 'slow task');
    assert.equal(run.status, 'success');
    const [a] = toolAnswers(await messages(tid), 'task');
    assert.match(a.content, /^Task timed out\. Error: the sub-agent did not finish within 3 s/);
    assert.equal(a.additional_kwargs.subagent_status, 'timed_out');
    assert.equal(a.additional_kwargs.tool_status.status, 'timeout');
    await waitFor(() => hostProcs(sleep) === 0, undefined, 'the timed-out command to be killed');
    const ends = await events(tid, run.run_id, '?event_types=task_timed_out');
    assert.equal(ends.length, 1);
  });

  it('cancelling the run cancels its sub-agents and kills their commands', async () => {
    const tid = await thread();
    const sleeps = [uniqueSleep(), uniqueSleep()];
    fake.route('CANCEL-1', reply('', [bash(sleeps[0])]));
    fake.route('CANCEL-2', reply('', [bash(sleeps[1])]));
    fake.queue(reply('', [task('CANCEL-1'), task('CANCEL-2', 'bash')]));
    const r = await api('POST', `/api/threads/${tid}/runs`, { assistant_id: 'lead_agent', input: human('cancel me') });
    assert.equal(r.status, 200, r.text);
    await waitFor(() => sleeps.every((x) => hostProcs(x) > 0), undefined, 'both sub-agents to run their command');
    const c = await api('POST', `/api/threads/${tid}/runs/${r.json.run_id}/cancel?wait=1`);
    assert.equal(c.status, 204, c.text);
    const run = (await api('GET', `/api/threads/${tid}/runs/${r.json.run_id}`)).json;
    assert.equal(run.status, 'interrupted');
    await waitFor(() => sleeps.every((x) => hostProcs(x) === 0), undefined, 'the sub-agents commands to be killed');
    const cancelled = await events(tid, r.json.run_id, '?event_types=task_cancelled');
    assert.equal(cancelled.length, 2);
  });

  it('a role revoked mid-run stops the next tool call of the lead and of a sub-agent', async () => {
    const tid = await thread(bob);
    const gate = held('', '');
    gate.step.toolCalls = [bash('echo sub-two')];
    fake.route('REVOKE-1', reply('', [bash('echo sub-one')]), gate.step, reply('sub finished'));
    fake.queue(reply('', [task('REVOKE-1')]), reply('', [bash('echo lead-three')]), reply('over'));
    const r = await api('POST', `/api/threads/${tid}/runs`, { assistant_id: 'lead_agent', input: human('revoke') }, bob);
    assert.equal(r.status, 200, r.text);
    await waitFor(async () => (await events(tid, r.json.run_id, '?event_types=task_running', bob))
      .some((e) => e.content.message.type === 'tool' && /sub-one/.test(e.content.message.content)), undefined, 'the first sub-agent command');
    const set = await runFawn(['user', 'role', '--username', 'bob', '--role', 'nobody', '--config', srv.configPath], { home: srv.home });
    assert.equal(set.code, 0, set.stderr);
    gate.release();
    await waitFor(async () => ['success', 'error'].includes((await api('GET', `/api/threads/${tid}/runs/${r.json.run_id}`, undefined, bob)).json.status));
    const steps = await events(tid, r.json.run_id, '?event_types=task_running', bob);
    const subTools = steps.map((e) => e.content.message).filter((m) => m.type === 'tool');
    assert.equal(subTools[0].additional_kwargs.tool_status.status, 'success');
    assert.equal(subTools[1].additional_kwargs.tool_status.status, 'denied');
    assert.match(subTools[1].content, /Sandbox execution is not permitted for your role/);
    const [lead] = toolAnswers(await messages(tid, bob), 'bash');
    assert.equal(lead.additional_kwargs.tool_status.status, 'denied');
    const back = await runFawn(['user', 'role', '--username', 'bob', '--role', 'user', '--config', srv.configPath], { home: srv.home });
    assert.equal(back.code, 0, back.stderr);
  });
});

describe('a queued run', () => {
  it('starts with the role its user has when it starts, not when it was accepted', async () => {
    const fake = await FakeOpenAI.start();
    const srv = await FawnServer.start({
      models: [fake.model()],
      runs: { workers: 1 },
      authorization: { enabled: true, roles: { admin: {}, user: {}, nobody: { sandbox: { deny: ['execute'] } } } },
    });
    try {
      await setupAdmin(srv);
      const carol = await setupUser(srv, 'carol');
      const api = (method, p, body) => request(srv, method, p, { bearer: carol.token, body });
      const t1 = (await api('POST', '/api/threads', {})).json.thread_id;
      const t2 = (await api('POST', '/api/threads', {})).json.thread_id;
      const first = held('first done');
      fake.queue(first.step, reply('', [bash('echo queued')]), reply('second done'));
      const a = await api('POST', `/api/threads/${t1}/runs`, { assistant_id: 'lead_agent', input: human('one') });
      assert.equal(a.status, 200, a.text);
      await waitFor(() => fake.requests.length >= 1, undefined, 'the first run to call the model');
      const b = await api('POST', `/api/threads/${t2}/runs`, { assistant_id: 'lead_agent', input: human('two') });
      assert.equal(b.status, 200, b.text);
      assert.equal((await api('GET', `/api/threads/${t2}/runs/${b.json.run_id}`)).json.status, 'pending');
      const set = await runFawn(['user', 'role', '--username', 'carol', '--role', 'nobody', '--config', srv.configPath], { home: srv.home });
      assert.equal(set.code, 0, set.stderr);
      first.release();
      await waitFor(async () => (await api('GET', `/api/threads/${t2}/runs/${b.json.run_id}`)).json.status === 'success');
      const s = await api('GET', `/api/threads/${t2}/state`);
      const [tool] = s.json.values.messages.filter((m) => m.type === 'tool');
      assert.equal(tool.additional_kwargs.tool_status.status, 'denied');
    } finally {
      await srv.stop();
      await fake.stop();
    }
  });
});
