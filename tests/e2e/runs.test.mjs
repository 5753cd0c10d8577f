// Agent runs through the LangGraph JS SDK: streamed runs whose tool calls
// execute in a real sandbox, join, wait, cancel, state and history, the
// hooks' rules, and the model client's retries and breaker against a fake
// OpenAI-compatible server that scripts replies and faults.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';
import { Client } from '@langchain/langgraph-sdk';

import { FawnServer, hostProcs, multipart, request, setupAdmin, setupUser, uniqueSleep, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, drop, fail, held, reply, slow, stall } from './lib/fake_openai.mjs';

function sdk(srv, token) {
  return new Client({
    apiUrl: `${srv.base}/api`,
    defaultHeaders: { Authorization: `Bearer ${token}` },
    callerOptions: { maxRetries: 0 },
  });
}

const human = (content) => ({ messages: [{ type: 'human', content }] });

/** Streams a run and returns its events as [{event, data}]. */
async function streamRun(client, threadId, payload) {
  const events = [];
  for await (const part of client.runs.stream(threadId, 'lead_agent', payload)) events.push(part);
  return events;
}

const toolMessages = (values) => values.messages.filter((m) => m.type === 'tool');
const lastValues = (events) => events.filter((e) => e.event === 'values').at(-1).data;
const customs = (events, type) => events.filter((e) => e.event === 'custom' && e.data.type === type);

describe('runs with the built-in demo model', () => {
  let srv;
  let admin;
  let client;

  before(async () => {
    srv = await FawnServer.start({});
    admin = await setupAdmin(srv);
    client = sdk(srv, admin.token);
  });
  after(async () => {
    await srv?.stop();
  });

  it('streams a run whose tools inspect an upload, run commands and present a report', async () => {
    const thread = await client.threads.create();
    const mp = multipart([{ filename: 'notes.txt', content: 'one\ntwo\nthree\n' }]);
    const up = await request(srv, 'POST', `/api/threads/${thread.thread_id}/uploads`, {
      bearer: admin.token, body: mp.body, headers: { 'Content-Type': mp.contentType },
    });
    assert.equal(up.status, 200, up.text);
    const events = await streamRun(client, thread.thread_id, {
      input: human('Summarize my upload'), streamMode: ['values', 'updates', 'messages-tuple'],
    });
    assert.equal(events[0].event, 'metadata');
    assert.ok(events.some((e) => e.event === 'messages'), 'messages-tuple events');
    const values = lastValues(events);
    const tools = toolMessages(values);
    assert.deepEqual(tools.map((m) => m.name), ['ls', 'bash', 'bash', 'present_files']);
    assert.ok(tools.every((m) => m.additional_kwargs.tool_status.status === 'success'));
    assert.match(tools[1].content, /notes\.txt: 3 lines, 14 bytes/);
    assert.equal(tools[1].additional_kwargs.tool_status.exit_code, 0);
    assert.deepEqual(values.artifacts, ['/mnt/user-data/outputs/report.md']);
    assert.equal(values.title, 'Summarize my upload');
    const report = await request(srv, 'GET', `/api/threads/${thread.thread_id}/artifacts/mnt/user-data/outputs/report.md`, { bearer: admin.token });
    assert.equal(report.status, 200);
    assert.match(report.text, /# Upload report/);

    const runs = await client.runs.list(thread.thread_id);
    assert.equal(runs.length, 1);
    assert.equal(runs[0].status, 'success');
    const rc = await request(srv, 'GET', `/api/threads/${thread.thread_id}/runs/${runs[0].run_id}/receipts`, { bearer: admin.token });
    assert.equal(rc.json.receipts.length, 4);
    for (const r of rc.json.receipts) {
      assert.match(r.args_sha256, /^[0-9a-f]{64}$/);
      assert.equal(r.status, 'success');
    }
    const bash = tools[1];
    const receipt = rc.json.receipts.find((r) => r.tool_call_id === bash.tool_call_id);
    assert.equal(receipt.output_bytes, Buffer.byteLength(bash.content));
  });

  it('creates, joins, waits, and reads state and history', async () => {
    const thread = await client.threads.create();
    const run = await client.runs.create(thread.thread_id, 'lead_agent', { input: human('hello') });
    assert.ok(['pending', 'running', 'success'].includes(run.status));
    const joined = await client.runs.join(thread.thread_id, run.run_id);
    assert.equal(joined.messages.at(-1).type, 'ai');
    const state = await client.threads.getState(thread.thread_id);
    assert.equal(state.values.messages.length, joined.messages.length);
    assert.equal(state.checkpoint.thread_id, thread.thread_id);
    const history = await client.threads.getHistory(thread.thread_id, { limit: 3 });
    assert.equal(history.length, 3);
    assert.equal(history[0].checkpoint.checkpoint_id, state.checkpoint.checkpoint_id);
    assert.equal(history[1].checkpoint.checkpoint_id, history[0].parent_checkpoint.checkpoint_id);
    assert.equal(history[0].parent_checkpoint_id, history[1].checkpoint_id);
    const tooMany = await request(srv, 'POST', `/api/threads/${thread.thread_id}/history`, { bearer: admin.token, body: { limit: 101 } });
    assert.equal(tooMany.status, 422);
    const waited = await client.runs.wait(thread.thread_id, 'lead_agent', { input: human('again') });
    assert.equal(waited.messages.filter((m) => m.type === 'human').length, 2);
    // A finished run is replayed from the store, and Last-Event-ID resumes after it.
    const replay = [];
    for await (const part of client.runs.joinStream(thread.thread_id, run.run_id)) replay.push(part);
    assert.equal(replay[0].event, 'metadata');
    const raw = await request(srv, 'GET', `/api/threads/${thread.thread_id}/runs/${run.run_id}/stream`, {
      bearer: admin.token, headers: { 'Last-Event-ID': '1' },
    });
    assert.ok(!raw.text.includes('event: metadata'), 'events up to the given id are skipped');
    assert.match(raw.text, /event: end/);
    const assistants = await client.assistants.search();
    assert.deepEqual(assistants.map((a) => a.assistant_id), ['lead_agent']);
  });

  it('fawn chat streams the run to the terminal with each tool\'s status', async () => {
    const out = await srv.cli(['chat', '--thread', 'chat-thread', '--token', admin.token, 'Look around']);
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout, /^thread chat-thread /);
    assert.match(out.stdout, /-> ls \{"description":"list the uploads"/);
    assert.match(out.stdout, /<- bash \[success, exit 0, \d+ ms\]/);
    assert.match(out.stdout, /agent: Done: /);
    const state = await client.threads.getState('chat-thread');
    assert.equal(state.values.messages[0].content, 'Look around');
    const denied = await srv.cli(['chat', '--token', 'fawn_00', 'x']);
    assert.equal(denied.code, 1);
    assert.match(denied.stderr, /HTTP 401/);
    const usage = await srv.cli(['chat', '--token', admin.token]);
    assert.equal(usage.code, 2);
  });

  it('answers 422 for options it does not support, naming them', async () => {
    const thread = await client.threads.create();
    for (const [body, needle] of [
      [{ assistant_id: 'lead_agent', webhook: 'http://127.0.0.1:9/' }, "Run option 'webhook'"],
      [{ assistant_id: 'lead_agent', stream_mode: ['debug'] }, 'unsupported_stream_mode'],
      [{ assistant_id: 'lead_agent', multitask_strategy: 'rollback' }, 'multitask_strategy'],
      [{ assistant_id: 'lead_agent', command: { resume: 'x' } }, "Run option 'command'"],
      [{ assistant_id: 'lead_agent', bogus: 1 }, "Run option 'bogus'"],
      [{ assistant_id: 'lead_agent', input: { messages: [{ type: 'ai', content: 'x' }] } }, 'only human'],
    ]) {
      const r = await request(srv, 'POST', `/api/threads/${thread.thread_id}/runs/stream`, { bearer: admin.token, body });
      assert.equal(r.status, 422, r.text);
      assert.ok(r.text.includes(needle), `${r.text} lacks ${needle}`);
    }
    const other = await setupUser(srv, 'runs-other');
    const r = await request(srv, 'POST', `/api/threads/${thread.thread_id}/runs`, {
      bearer: other.token, body: { assistant_id: 'lead_agent' },
    });
    assert.equal(r.status, 404, 'another user\'s thread is not found');
  });
});

describe('runs against a scripted OpenAI-compatible model', () => {
  let srv;
  let fake;
  let admin;
  let client;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({
      models: [fake.model()],
      authorization: { enabled: true, roles: { admin: {}, user: { tools: { allow: '*', deny: ['bash'] } } } },
    });
    admin = await setupAdmin(srv);
    client = sdk(srv, admin.token);
  });
  after(async () => {
    await srv?.stop();
    await fake?.stop();
  });

  async function run(prompt, extra = {}) {
    const thread = await client.threads.create();
    const events = await streamRun(client, thread.thread_id, {
      input: human(prompt), streamMode: ['values', 'custom'], ...extra,
    });
    const runs = await client.runs.list(thread.thread_id);
    return { thread, events, run: runs[0], values: lastValues(events) };
  }

  it('sends tool results to the model as a JSON projection of text and status', async () => {
    fake.requests.length = 0;
    fake.queue(reply('', [call('bash', { description: 'x', command: 'echo hi; exit 3' })]), reply('ok'));
    const { values, run: r } = await run('go');
    assert.equal(r.status, 'success');
    const tool = toolMessages(values)[0];
    assert.equal(tool.content, 'hi\nExit Code: 3');
    assert.deepEqual(
      { s: tool.additional_kwargs.tool_status.status, t: tool.additional_kwargs.tool_status.error_type, c: tool.additional_kwargs.tool_status.exit_code },
      { s: 'error', t: 'exit_code', c: 3 });
    const second = fake.requests[1].body;
    const sent = second.messages.find((m) => m.role === 'tool');
    const projected = JSON.parse(sent.content);
    assert.equal(projected.output, 'hi\nExit Code: 3');
    assert.equal(projected.tool_status.exit_code, 3);
    assert.ok(second.tools.some((t) => t.function.name === 'bash'));
    const user = second.messages.find((m) => m.role === 'user');
    assert.match(user.content, /^<<<BEGIN USER INPUT>>>\ngo\n<<<END USER INPUT>>>$/);
  });

  it('streams the model\'s text as message chunks (messages-tuple) with the message\'s id', async () => {
    fake.steps.length = 0;
    fake.queue(reply('Looking at the workspace now.', [call('ls', { description: 'x', path: '/mnt/user-data/workspace' })]),
      reply('The workspace is empty, as expected.'));
    const { events, values } = await run('stream it', { streamMode: ['messages-tuple', 'values'] });
    const chunks = events.filter((e) => e.event === 'messages' && e.data[0].type === 'AIMessageChunk');
    const ais = values.messages.filter((m) => m.type === 'ai');
    for (const ai of ais) {
      const mine = chunks.filter((e) => e.data[0].id === ai.id).map((e) => e.data[0]);
      assert.ok(mine.length > 2, 'several chunks per reply');
      assert.equal(mine.map((c) => c.content).join(''), ai.content);
      assert.deepEqual(mine.at(-1).tool_calls, ai.tool_calls);
      assert.equal(mine[0].id, ai.id);
    }
    assert.ok(events.some((e) => e.event === 'messages' && e.data[0].type === 'tool'));
    // fawn chat prints streamed text as it comes, once.
    fake.queue(reply('Streamed hello there.'));
    const out = await srv.cli(['chat', '--token', admin.token, 'hi']);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(out.stdout.split('agent: Streamed hello there.\n').length, 2, out.stdout);
  });

  it('answers a reader asking for events no longer kept with a gap', async () => {
    fake.steps.length = 0;
    fake.queue(reply('x'.repeat(8 * 4200)));
    const { thread, run: r } = await run('many chunks', { streamMode: ['messages-tuple', 'values'] });
    assert.equal(r.status, 'success');
    const path = `/api/threads/${thread.thread_id}/runs/${r.run_id}/stream`;
    const old = await request(srv, 'GET', path, { bearer: admin.token, headers: { 'Last-Event-ID': '2' } });
    assert.equal(old.status, 200);
    const frames = old.text.trim().split('\n\n');
    assert.equal(frames.length, 1, old.text.slice(0, 300));
    assert.match(frames[0], /^event: gap\ndata: /);
    const gap = JSON.parse(frames[0].split('\ndata: ')[1]);
    assert.equal(gap.code, 'stream_replay_gap');
    assert.equal(gap.requested_event_id, 2);
    assert.equal(gap.recovery, 'reload_durable_state');
    assert.ok(gap.earliest_available_event_id > 3 && gap.latest_available_event_id >= 4200, JSON.stringify(gap));
    // A reader within the window resumes normally and sees the end.
    const recent = await request(srv, 'GET', path, { bearer: admin.token, headers: { 'Last-Event-ID': String(gap.latest_available_event_id - 2) } });
    assert.match(recent.text, /event: end/);
    assert.ok(!recent.text.includes('event: gap'));
  });

  it('offers a role only its tools and denies a call to another', async () => {
    fake.steps.length = 0;
    fake.requests.length = 0;
    const user = await setupUser(srv, 'no-bash');
    const limited = sdk(srv, user.token);
    fake.queue(reply('', [call('bash', { description: 'x', command: 'id' })]), reply('ok'));
    const thread = await limited.threads.create();
    const values = await limited.runs.wait(thread.thread_id, 'lead_agent', { input: human('try') });
    const offered = fake.requests[0].body.tools.map((t) => t.function.name);
    assert.ok(!offered.includes('bash') && offered.includes('read_file'), offered.join());
    const denied = toolMessages(values)[0];
    assert.equal(denied.additional_kwargs.tool_status.status, 'denied');
    assert.match(denied.content, /Permission denied/);
  });

  it('saves a large tool output to a file and gives the model a synopsis', async () => {
    fake.steps.length = 0;
    fake.queue(reply('', [call('bash', { description: 'x', command: "head -c 15000 /dev/zero | tr '\\0' x; echo END" })]), reply('ok'));
    const { thread, values, run: r } = await run('big');
    assert.equal(r.status, 'success');
    const tool = toolMessages(values)[0];
    assert.ok(tool.content.length < 4000, `synopsis of ${tool.content.length} chars`);
    assert.equal(tool.additional_kwargs.tool_status.truncated, true);
    const saved = tool.content.match(/saved in (\/mnt\/user-data\/outputs\/\.tool-results\/[^;]+\.txt)/)[1];
    const file = await request(srv, 'GET', `/api/threads/${thread.thread_id}/artifacts${saved}`, { bearer: admin.token });
    assert.equal(file.status, 200);
    assert.match(file.text, /^x{15000}END\n$/);
  });

  it('retries an empty final reply once, and stops on length and content_filter', async () => {
    fake.steps.length = 0;
    const ls = () => call('ls', { description: 'x', path: '/mnt/user-data/workspace' });
    // Blank replies (whitespace): an empty generation is already retried by the model client.
    fake.queue(reply('', [ls()]), reply(' '), reply('second try'));
    let r = await run('empty');
    assert.equal(r.run.status, 'success');
    assert.equal(r.values.messages.at(-1).content, 'second try');
    fake.queue(reply('', [ls()]), reply(' '), reply('  '));
    r = await run('empty twice');
    assert.equal(r.run.status, 'error');
    assert.match(r.values.messages.at(-1).content, /empty reply after a tool result, twice/);
    fake.queue(reply('cut', [ls()], 'length'));
    r = await run('long');
    assert.deepEqual(customs(r.events, 'run_stopped').map((e) => e.data.stop_reason), ['model_length_capped']);
    assert.equal(toolMessages(r.values).length, 0, 'a cut reply runs no tools');
    fake.queue(reply('', [ls()], 'content_filter'));
    r = await run('filtered');
    assert.deepEqual(customs(r.events, 'run_stopped').map((e) => e.data.stop_reason), ['safety_capped']);
    assert.equal(r.values.messages.at(-1).tool_calls.length, 0);
  });

  it('blocks a write to an existing file until it has been read', async () => {
    const file = '/mnt/user-data/workspace/a.txt';
    fake.queue(
      reply('', [call('bash', { description: 'x', command: `echo v0 > ${file}` })]),
      reply('', [call('write_file', { description: 'x', path: file, content: 'v1' })]),
      reply('', [call('read_file', { description: 'x', path: file })]),
      reply('', [call('write_file', { description: 'x', path: file, content: 'changed\n' })]),
      reply('', [call('bash', { description: 'x', command: `echo changed >> ${file}` })]),
      reply('', [call('str_replace', { description: 'x', path: file, old_str: 'changed\nchanged', new_str: 'v3' })]),
      reply('', [call('read_file', { description: 'x', path: `/mnt/user-data/workspace/./${'a.txt'}` })]),
      reply('', [call('str_replace', { description: 'x', path: file, old_str: 'changed\nchanged', new_str: 'v3' })]),
      reply('', [call('read_file', { description: 'x', path: file })]),
      reply('done'));
    const { values } = await run('edit');
    const tools = toolMessages(values);
    const st = tools.map((m) => m.additional_kwargs.tool_status);
    assert.deepEqual(st.map((s) => s.error_type ?? 'ok'), ['ok', 'blocked', 'ok', 'ok', 'ok', 'blocked', 'ok', 'ok', 'ok']);
    assert.match(tools[1].content, /you have not read it/);
    assert.match(tools[5].content, /has changed since you read it/);
    assert.equal(tools[8].content, 'v3\n');
  });

  it('fails a run that writes to outputs without presenting the file', async () => {
    fake.queue(reply('', [call('bash', { description: 'x', command: 'echo x > /mnt/user-data/outputs/secret.txt' })]), reply('all done'));
    const { events, run: r } = await run('write');
    assert.equal(r.status, 'error');
    const err = events.find((e) => e.event === 'error');
    assert.match(err.data.message, /Artifact delivery incomplete: \/mnt\/user-data\/outputs\/secret\.txt/);
  });

  it('warns on a repeated call and stops the run at the fifth with loop_capped', async () => {
    const same = () => reply('', [call('ls', { description: 'x', path: '/mnt/user-data/workspace' })]);
    fake.queue(same(), same(), same(), same(), same(), reply('never reached'));
    const { values, events, run: r } = await run('loop');
    assert.equal(r.status, 'success');
    assert.deepEqual(customs(events, 'run_stopped').map((e) => e.data.stop_reason), ['loop_capped']);
    const tools = toolMessages(values);
    assert.equal(tools.length, 4);
    assert.match(tools[2].content, /made this exact call 3 times/);
    assert.equal(values.messages.at(-1).tool_calls.length, 0);
    fake.steps.length = 0;
  });

  it('stops at the recursion limit and at ask_clarification', async () => {
    const ls = () => reply('', [call('ls', { description: 'x', path: `/mnt/user-data/uploads` })]);
    fake.queue(ls(), ls(), ls());
    const limited = await run('deep', { config: { recursion_limit: 2 } });
    assert.equal(limited.run.status, 'error');
    assert.match(limited.events.find((e) => e.event === 'error').data.message, /Recursion limit of 2/);
    fake.steps.length = 0;
    fake.queue(reply('', [call('ask_clarification', { question: 'Which file?', options: ['a', 'b'] })]), reply('never'));
    const asked = await run('do it');
    assert.deepEqual(customs(asked.events, 'run_stopped').map((e) => e.data.stop_reason), ['clarification']);
    assert.match(toolMessages(asked.values)[0].content, /Which file\?\n {2}1\. a\n {2}2\. b/);
    fake.steps.length = 0;
  });

  it('refuses a second run on a busy thread, interrupts with multitask_strategy interrupt, and cancels', async () => {
    const sleeper = uniqueSleep();
    fake.queue(reply('', [call('bash', { description: 'x', command: `touch /mnt/user-data/workspace/started; ${sleeper}` })]), reply('late'));
    const thread = await client.threads.create();
    const first = await client.runs.create(thread.thread_id, 'lead_agent', { input: human('sleep') });
    // Cancel while the command runs: it has started once its file exists.
    await waitFor(async () => (await client.runs.get(thread.thread_id, first.run_id)).status === 'running');
    await waitFor(async () => (await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token }))
      .json.sandboxes.some((b) => b.thread_id === thread.thread_id && b.holders.execution > 0));
    await new Promise((r) => setTimeout(r, 500));
    const busy = await request(srv, 'POST', `/api/threads/${thread.thread_id}/runs`, {
      bearer: admin.token, body: { assistant_id: 'lead_agent', input: human('second') },
    });
    assert.equal(busy.status, 409, busy.text);
    await client.runs.cancel(thread.thread_id, first.run_id, true);
    await waitFor(() => hostProcs(sleeper) === 0, undefined, 'the sleeping command to be killed');
    assert.equal((await client.runs.get(thread.thread_id, first.run_id)).status, 'interrupted');
    const killed = toolMessages((await client.threads.getState(thread.thread_id)).values)[0];
    assert.equal(killed.additional_kwargs.tool_status.error_type, 'killed');
    const again = await request(srv, 'POST', `/api/threads/${thread.thread_id}/runs/${first.run_id}/cancel`, { bearer: admin.token });
    assert.equal(again.status, 409, 'a finished run cannot be cancelled');

    fake.steps.length = 0;
    fake.queue(reply('', [call('bash', { description: 'x', command: 'sleep 60' })]));
    const second = await client.runs.create(thread.thread_id, 'lead_agent', { input: human('sleep again') });
    await waitFor(async () => (await client.runs.get(thread.thread_id, second.run_id)).status === 'running');
    fake.queue(reply('third'));
    const third = await client.runs.wait(thread.thread_id, 'lead_agent', { input: human('now'), multitaskStrategy: 'interrupt' });
    assert.equal(third.messages.at(-1).content, 'third');
    assert.equal((await client.runs.get(thread.thread_id, second.run_id)).status, 'interrupted');
    // The interrupted tool call kept a result; the history stays well formed.
    const calls = third.messages.flatMap((m) => m.tool_calls ?? []).map((c) => c.id);
    const results = new Set(third.messages.filter((m) => m.type === 'tool').map((m) => m.tool_call_id));
    assert.ok(calls.every((id) => results.has(id)));
  });

  it('retries 429 with Retry-After exactly, 503 and dropped or stalled streams', async () => {
    fake.steps.length = 0;
    fake.queue(fail(429, { code: 'rate_limit_exceeded' }, { 'Retry-After': '1' }), reply('after 429'));
    let r = await run('a');
    assert.equal(r.run.status, 'success');
    let retries = customs(r.events, 'llm_retry');
    assert.equal(retries.length, 1);
    assert.equal(retries[0].data.wait_ms, 1000);
    assert.equal(retries[0].data.reason, 'burst');

    fake.queue(fail(503, {}, { 'retry-after-ms': '20' }), drop(), reply('after faults'));
    r = await run('b');
    assert.equal(r.run.status, 'success', JSON.stringify(r.events.find((e) => e.event === 'error')));
    retries = customs(r.events, 'llm_retry');
    assert.deepEqual(retries.map((e) => e.data.reason), ['transient', 'transient']);
    assert.equal(r.values.messages.at(-1).content, 'after faults');

    fake.queue(stall(), reply('after a stall'));
    r = await run('c');
    assert.equal(r.run.status, 'success');
    assert.deepEqual(customs(r.events, 'llm_retry').map((e) => e.data.reason), ['stalled']);
  });

  it('does not retry a quota error and ends the run with a clear message', async () => {
    fake.steps.length = 0;
    fake.requests.length = 0;
    fake.queue(fail(429, { code: 'insufficient_quota', type: 'insufficient_quota' }));
    const r = await run('quota');
    assert.equal(r.run.status, 'error');
    assert.equal(fake.requests.length, 1);
    assert.equal(customs(r.events, 'llm_retry').length, 0);
    assert.match(r.events.find((e) => e.event === 'error').data.message, /Model fake failed \(quota\)/);
    assert.match(r.values.messages.at(-1).content, /^Error: the model could not answer/);
  });

  it('cancels a streamed run whose client goes away (on_disconnect cancel), not one that continues', async () => {
    fake.steps.length = 0;
    const started = async (onDisconnect, command) => {
      fake.steps.length = 0;
      fake.queue(reply('', [call('bash', { description: 'x', command })]), reply('finished'));
      const thread = await client.threads.create();
      const body = JSON.stringify({ assistant_id: 'lead_agent', input: human('go'), on_disconnect: onDisconnect });
      let runId;
      const req = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST',
        path: `/api/threads/${thread.thread_id}/runs/stream`,
        headers: { Authorization: `Bearer ${admin.token}`, 'Content-Type': 'application/json' } }, (res) => {
        runId = res.headers['content-location'].split('/').pop();
        res.resume();
      });
      req.on('error', () => {});
      req.end(body);
      await waitFor(async () => runId && (await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token }))
        .json.sandboxes.some((b) => b.thread_id === thread.thread_id && b.holders.execution > 0));
      req.destroy(); // the client goes away: its socket is closed
      return { thread, runId };
    };
    const gone = await started('cancel', 'sleep 120');
    // A waiting stream notices its client within two heartbeats (30 s).
    await waitFor(async () => (await client.runs.get(gone.thread.thread_id, gone.runId)).status === 'interrupted', 45000);
    const kept = await started('continue', 'sleep 3');
    await waitFor(async () => (await client.runs.get(kept.thread.thread_id, kept.runId)).status === 'success');
  });

  it('caps the runs one user may have in progress, not another user\'s', async () => {
    fake.steps.length = 0;
    const heavy = await setupUser(srv, 'many-runs');
    const mine = sdk(srv, heavy.token);
    for (let i = 0; i < 40; i++) fake.queue(slow(20000));
    const runs = [];
    for (let i = 0; i < 32; i++) {
      const thread = await mine.threads.create();
      runs.push([thread.thread_id, (await mine.runs.create(thread.thread_id, 'lead_agent', { input: human(`r${i}`) })).run_id]);
    }
    const extra = await mine.threads.create();
    const refused = await request(srv, 'POST', `/api/threads/${extra.thread_id}/runs`, {
      bearer: heavy.token, body: { assistant_id: 'lead_agent', input: human('one more') },
    });
    assert.equal(refused.status, 409, refused.text);
    assert.match(refused.text, /32 runs in progress/);
    const other = await client.threads.create();
    const theirs = await client.runs.create(other.thread_id, 'lead_agent', { input: human('mine') });
    assert.ok(theirs.run_id, 'another user is not capped');
    for (const [t, r] of runs) await mine.runs.cancel(t, r);
    await client.runs.cancel(other.thread_id, theirs.run_id);
    for (const [t, r] of [...runs, [other.thread_id, theirs.run_id]])
      await waitFor(async () => !['pending', 'running'].includes((await request(srv, 'GET', `/api/threads/${t}/runs/${r}`, { bearer: t === other.thread_id ? admin.token : heavy.token })).json.status));
    fake.steps.length = 0;
  });

  it('ends a run cut short by kill -9 or SIGTERM at the restart, its events and steps kept', async () => {
    fake.steps.length = 0;
    const longRun = async (command = 'sleep 120') => {
      fake.queue(reply('', [call('bash', { description: 'x', command })]));
      const thread = await client.threads.create();
      const run = await client.runs.create(thread.thread_id, 'lead_agent', { input: human('long') });
      await waitFor(async () => (await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token }))
        .json.sandboxes.some((b) => b.thread_id === thread.thread_id && b.holders.execution > 0));
      return { thread, run };
    };
    const killed = await longRun();
    await srv.kill9();
    await srv.restart();
    client = sdk(srv, admin.token);
    const after = await client.runs.get(killed.thread.thread_id, killed.run.run_id);
    assert.equal(after.status, 'error');
    assert.match(after.error, /gateway stopped during the run/);
    const replay = [];
    for await (const part of client.runs.joinStream(killed.thread.thread_id, killed.run.run_id)) replay.push(part);
    assert.equal(replay[0].event, 'metadata');
    assert.ok(replay.some((e) => e.event === 'values'), 'the stored events replay after the restart');
    const state = await client.threads.getState(killed.thread.thread_id);
    assert.equal(state.values.messages.at(-1).tool_calls[0].name, 'bash', 'the step before the kill is kept');

    // SIGTERM: the running command is killed, the run ends as interrupted, serve exits 0.
    const sleeper = uniqueSleep(); // only a kill ends it
    const stopped = await longRun(sleeper);
    await srv.stop({ keepHome: true }); // fails unless serve exits: SIGTERM does not wait for the command
    await waitFor(() => hostProcs(sleeper) === 0, undefined, 'the command SIGTERM cut short to be killed');
    await srv.restart();
    client = sdk(srv, admin.token);
    assert.equal((await client.runs.get(stopped.thread.thread_id, stopped.run.run_id)).status, 'interrupted');
    const cut = toolMessages((await client.threads.getState(stopped.thread.thread_id)).values);
    assert.equal(cut.length, 1);
    assert.equal(cut[0].additional_kwargs.tool_status.error_type, 'killed');
    // The next run on the thread after kill -9 answers the cut call first.
    fake.queue(reply('fine'));
    const next = await client.runs.wait(killed.thread.thread_id, 'lead_agent', { input: human('again') });
    const repaired = toolMessages(next)[0];
    assert.equal(repaired.content, '[Tool call was interrupted and did not return a result.]');
    assert.equal(next.messages.at(-1).content, 'fine');
  });

  it('opens the circuit breaker after five exhausted failures', async () => {
    fake.steps.length = 0;
    const failing = () => fail(503, {}, { 'retry-after-ms': '1' });
    for (let i = 0; i < 5; i++) {
      fake.queue(failing(), failing(), failing());
      const r = await run(`fail ${i}`);
      assert.equal(r.run.status, 'error');
    }
    fake.requests.length = 0;
    const r = await run('while open');
    assert.equal(r.run.status, 'error');
    assert.equal(fake.requests.length, 0, 'no request while the breaker is open');
    assert.match(r.events.find((e) => e.event === 'error').data.message, /temporarily unavailable after repeated failures/);
  });
});

describe('bash follows the configured command timeouts', () => {
  it('runs commands under sandbox.exec_max_timeout_s and stops them at sandbox.exec_timeout_s', async () => {
    const fake = await FakeOpenAI.start();
    const srv = await FawnServer.start({ models: [fake.model()], sandbox: { exec_timeout_s: 2, exec_max_timeout_s: 300 } });
    try {
      const admin = await setupAdmin(srv);
      const client = sdk(srv, admin.token);
      fake.queue(
        reply('', [call('bash', { description: 'x', command: 'echo fine' })]),
        reply('', [call('bash', { description: 'x', command: 'sleep 120; echo never' })]),
        reply('done'));
      const thread = await client.threads.create();
      const events = await streamRun(client, thread.thread_id, { input: human('go'), streamMode: ['values'] });
      const [fine, slow] = toolMessages(lastValues(events));
      assert.equal(fine.content, 'fine\n');
      assert.equal(fine.additional_kwargs.tool_status.status, 'success');
      assert.equal(slow.additional_kwargs.tool_status.status, 'timeout', JSON.stringify(slow));
      assert.doesNotMatch(slow.content, /never/);
      assert.equal((await client.runs.list(thread.thread_id))[0].status, 'success');
    } finally {
      await srv.stop();
      await fake.stop();
    }
  });
});

describe('workers are shared fairly across users', () => {
  let fake;

  before(async () => {
    fake = await FakeOpenAI.start();
  });
  after(async () => {
    await fake?.stop();
  });

  /** A server whose runs section is runs, with an admin (a) and a second user (b). */
  async function serverWithUsers(runs) {
    fake.steps.length = 0;
    fake.requests.length = 0;
    const srv = await FawnServer.start({ models: [fake.model()], runs });
    return { srv, a: await setupAdmin(srv), b: await setupUser(srv, 'second-user') };
  }

  /** Starts who's run on a new thread with prompt marker; returns {who, thread, run}. */
  async function start(srv, who, marker) {
    const c = sdk(srv, who.token);
    const thread = await c.threads.create();
    const run = await c.runs.create(thread.thread_id, 'lead_agent', { input: human(`fair-${marker}`) });
    return { who, thread: thread.thread_id, run: run.run_id };
  }

  const statusOf = async (srv, r) =>
    (await request(srv, 'GET', `/api/threads/${r.thread}/runs/${r.run}`, { bearer: r.who.token })).json.status;
  const reaches = (srv, r, status) => waitFor(async () => (await statusOf(srv, r)) === status, 120000);
  /** The markers of the runs the model was asked about, in the order their calls came. */
  const asked = () => fake.requests.map((q) => JSON.stringify(q.body.messages).match(/fair-[AB]\d/)[0].slice(5));

  it('starts another user\'s run at once while one user holds every worker their cap allows', async () => {
    // Two workers; one user holds at most one (the default: half of them).
    const { srv, a, b } = await serverWithUsers({ workers: 2 });
    const hold = held();
    try {
      fake.queue(hold.step, reply('B is done'));
      const first = await start(srv, a, 'A0');
      await waitFor(async () => fake.requests.length === 1, 120000);
      const backlog = [];
      for (let i = 1; i <= 3; i++) backlog.push(await start(srv, a, `A${i}`));
      const theirs = await start(srv, b, 'B0');
      await reaches(srv, theirs, 'success');
      assert.equal(await statusOf(srv, first), 'running');
      for (const r of backlog) assert.equal(await statusOf(srv, r), 'pending', 'A\'s backlog waits for A\'s worker');
      assert.deepEqual(asked(), ['A0', 'B0']);
      // A waiting run that is cancelled ends at once, without waiting for a worker.
      const cancel = await request(srv, 'POST', `/api/threads/${backlog[0].thread}/runs/${backlog[0].run}/cancel`, { bearer: a.token });
      assert.equal(cancel.status, 202, cancel.text);
      const cancelled = (await request(srv, 'GET', `/api/threads/${backlog[0].thread}/runs/${backlog[0].run}`, { bearer: a.token })).json;
      assert.deepEqual([cancelled.status, cancelled.error], ['interrupted', 'Run cancelled']);
      const events = [];
      for await (const part of sdk(srv, a.token).runs.joinStream(backlog[0].thread, backlog[0].run)) events.push(part.event);
      assert.deepEqual(events, ['metadata', 'end']);
      assert.equal(await statusOf(srv, first), 'running');
      hold.release();
      for (const r of [first, ...backlog.slice(1)]) await reaches(srv, r, 'success');
      assert.deepEqual(asked(), ['A0', 'B0', 'A2', 'A3']);
    } finally {
      hold.release();
      await srv.stop();
    }
  });

  it('gives a freed worker to the user holding the fewest, ahead of another user\'s backlog', async () => {
    // Every worker may go to one user: fairness is then which waiting run starts next.
    const { srv, a, b } = await serverWithUsers({ workers: 2, per_user_running_max: 2 });
    const holds = [held(), held(), held()];
    try {
      fake.queue(holds[0].step, holds[1].step, reply('B is done'), holds[2].step);
      const mine = [];
      for (let i = 0; i < 2; i++) { // one at a time: A0's model call gets holds[0], A1's holds[1]
        mine.push(await start(srv, a, `A${i}`));
        await waitFor(async () => fake.requests.length === i + 1, 120000);
      }
      for (let i = 2; i < 5; i++) mine.push(await start(srv, a, `A${i}`));
      const theirs = await start(srv, b, 'B0');
      assert.equal(await statusOf(srv, theirs), 'pending', 'both workers are busy');
      holds[0].release(); // A0 ends: its worker goes to B0, not to A2
      await reaches(srv, mine[0], 'success');
      await reaches(srv, theirs, 'success');
      assert.deepEqual(asked().slice(0, 3), ['A0', 'A1', 'B0']);
      for (const r of mine.slice(3)) assert.equal(await statusOf(srv, r), 'pending', 'A\'s backlog is still waiting');
      for (const h of holds) h.release();
      for (const r of mine) await reaches(srv, r, 'success');
    } finally {
      for (const h of holds) h.release();
      await srv.stop();
    }
  });
});

describe('a session recorded from a model replays offline', () => {
  it('replays a recorded run exactly and names the hash of a conversation it has not seen', async () => {
    const fixture = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-fixture-')), 'session.json');
    const fake = await FakeOpenAI.start();
    fake.queue(reply('Let me check.', [call('bash', { description: 'x', command: 'echo recorded' })]), reply('All recorded.'));
    let srv = await FawnServer.start({ models: [fake.model('rec', { provider: 'record', fixture })] });
    let admin = await setupAdmin(srv);
    let client = sdk(srv, admin.token);
    const recorded = await client.runs.wait((await client.threads.create()).thread_id, 'lead_agent', { input: human('record this') });
    await srv.stop();
    await fake.stop();
    assert.equal(JSON.parse(fs.readFileSync(fixture, 'utf8')).turns.length, 2);

    srv = await FawnServer.start({ models: [{ name: 'rep', provider: 'replay', fixture }] });
    try {
      admin = await setupAdmin(srv);
      client = sdk(srv, admin.token);
      const replayed = await client.runs.wait((await client.threads.create()).thread_id, 'lead_agent', { input: human('record this') });
      const shape = (v) => v.messages.map((m) => [m.type, m.content, (m.tool_calls || []).map((c) => [c.name, c.args])]);
      assert.deepEqual(shape(replayed), shape(recorded));
      assert.equal(replayed.messages.at(-1).content, 'All recorded.');
      const missed = await client.runs.wait((await client.threads.create()).thread_id, 'lead_agent', { input: human('something else') });
      assert.equal(missed.status, 'error');
      assert.match(missed.error, /no recorded reply for conversation [0-9a-f]{64}/);
    } finally {
      await srv.stop();
      fs.rmSync(path.dirname(fixture), { recursive: true, force: true });
    }
  });
});
