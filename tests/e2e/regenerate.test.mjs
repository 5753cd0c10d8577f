// Regenerate and edit-and-rerun, as DeerFlow's web UI does them against
// fawn: it asks POST .../runs/regenerate/prepare (or edit-regenerate) with
// fetch, then starts the run through the LangGraph SDK with the prepared
// input, checkpoint and metadata. A run from an earlier checkpoint forks
// the thread: it starts from that checkpoint's state, and the replaced
// turn stays in the history. Also: runs from a checkpoint through the SDK
// alone (editing an older question), the first turn (the thread's empty
// root checkpoint), other users' and threads' checkpoint ids, malformed
// ones, and a thread that already has a run going.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';
import { Client } from '@langchain/langgraph-sdk';

import { FawnServer, request, setupAdmin, setupUser, waitFor } from './lib/server.mjs';
import { FakeOpenAI, held, reply } from './lib/fake_openai.mjs';

function sdk(srv, token) {
  return new Client({
    apiUrl: `${srv.base}/api`,
    defaultHeaders: { Authorization: `Bearer ${token}` },
    callerOptions: { maxRetries: 0 },
  });
}

/** Runs fn and returns the HTTP status of the SDK error it throws (200 when none). */
async function sdkStatus(fn) {
  try {
    await fn();
  } catch (e) {
    return e.status;
  }
  return 200;
}

const human = (content) => ({ messages: [{ type: 'human', content }] });
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe('regenerate and edit-and-rerun', () => {
  let srv;
  let fake;
  let admin;
  let bob;
  let client;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model()] });
    admin = await setupAdmin(srv);
    bob = await setupUser(srv, 'bob');
    client = sdk(srv, admin.token);
  });
  after(async () => {
    await srv?.stop();
    await fake?.stop();
  });

  const api = (method, p, body, who = admin) => request(srv, method, p, { bearer: who.token, body });
  const prepare = (thread, body, who = admin) => api('POST', `/api/threads/${thread}/runs/regenerate/prepare`, body, who);
  const prepareEdit = (thread, body, who = admin) =>
    api('POST', `/api/threads/${thread}/runs/edit-regenerate/prepare`, body, who);

  /** A thread whose turns asked questions[i] and were answered answers[i]. */
  async function conversation(questions, answers) {
    const thread = await client.threads.create();
    for (let i = 0; i < questions.length; i++) {
      fake.queue(reply(answers[i]));
      const done = await client.runs.wait(thread.thread_id, 'lead_agent', { input: human(questions[i]) });
      assert.equal(done.messages.at(-1).content, answers[i]);
    }
    return thread.thread_id;
  }

  const stateOf = async (thread, who = admin) => (await api('GET', `/api/threads/${thread}/state`, undefined, who)).json;
  const texts = (messages) => messages.map((m) => `${m.type}:${typeof m.content === 'string' ? m.content : m.content.map((p) => p.text).join('')}`);
  /** Every kept checkpoint of the thread, newest first. */
  async function historyOf(thread) {
    const h = await api('POST', `/api/threads/${thread}/history`, { limit: 100 });
    assert.equal(h.status, 200, h.text);
    return h.json;
  }

  /** Starts the prepared run the way DeerFlow's UI does (thread.submit → runs.stream) and reads it to the end. */
  async function submitPrepared(thread, prepared, who = admin) {
    const events = [];
    for await (const part of sdk(srv, who.token).runs.stream(thread, 'lead_agent', {
      input: prepared.input,
      checkpoint: prepared.checkpoint,
      metadata: prepared.metadata,
      config: { recursion_limit: 1000 },
      context: { thinking_enabled: true, is_plan_mode: false, subagent_enabled: false, thread_id: thread },
      streamMode: ['values', 'messages-tuple', 'updates', 'custom'],
      onDisconnect: 'continue',
    })) events.push(part);
    return events;
  }

  it('regenerates the last answer from the checkpoint before its question; the replaced answer stays in the history', async () => {
    const thread = await conversation(['First question', 'Second question'], ['First answer', 'Second answer']);
    const before = await stateOf(thread);
    const [h1, a1, h2, a2] = before.values.messages;
    const runs = (await api('GET', `/api/threads/${thread}/runs`)).json;
    const second = runs[0].run_id;

    const prep = await prepare(thread, { message_id: a2.id });
    assert.equal(prep.status, 200, prep.text);
    assert.deepEqual(Object.keys(prep.json).sort(), ['checkpoint', 'input', 'metadata', 'target_run_id']);
    assert.equal(prep.json.target_run_id, second);
    assert.deepEqual(prep.json.input.messages, [{ type: 'human', content: 'Second question', id: h2.id, additional_kwargs: {} }]);
    assert.equal(prep.json.input.title, before.values.title);
    const cp = prep.json.checkpoint;
    assert.deepEqual(Object.keys(cp).sort(), ['checkpoint_id', 'checkpoint_map', 'checkpoint_ns']);
    assert.equal(cp.checkpoint_ns, '');
    assert.equal(cp.checkpoint_map, null);
    assert.deepEqual(prep.json.metadata, {
      regenerate_from_message_id: a2.id, regenerate_from_run_id: second, regenerate_checkpoint_id: cp.checkpoint_id,
    });
    // The base is the state the first turn ended with: the second question not yet asked.
    const base = (await historyOf(thread)).find((s) => s.checkpoint_id === cp.checkpoint_id);
    assert.deepEqual(base.values.messages.map((m) => m.id), [h1.id, a1.id]);

    fake.queue(reply('Second answer, again'));
    const asked = fake.requests.length;
    const events = await submitPrepared(thread, prep.json);
    assert.ok(events.some((e) => e.event === 'values'), JSON.stringify(events.map((e) => e.event)));
    // The model was given the conversation up to the question again, not the replaced answer.
    const sent = fake.requests[asked].body.messages.filter((m) => m.role !== 'system');
    assert.deepEqual(sent.map((m) => m.role), ['user', 'assistant', 'user']);
    assert.deepEqual(sent.slice(0, 2).map((m) => m.content), ['First question', 'First answer']);
    assert.match(sent[2].content, /Second question/);
    assert.doesNotMatch(JSON.stringify(fake.requests[asked].body), /Second answer/);

    const after = await stateOf(thread);
    assert.deepEqual(texts(after.values.messages), ['human:First question', 'ai:First answer', 'human:Second question', 'ai:Second answer, again']);
    assert.deepEqual(after.values.messages.slice(0, 3).map((m) => m.id), [h1.id, a1.id, h2.id]);
    assert.notEqual(after.values.messages[3].id, a2.id);
    assert.equal(after.values.title, before.values.title);

    // The new run carries the metadata that ties it to the one it replaced.
    const regen = (await api('GET', `/api/threads/${thread}/runs`)).json[0];
    assert.equal(regen.metadata.regenerate_from_run_id, second);
    assert.equal(regen.kwargs.checkpoint_id, cp.checkpoint_id);
    assert.equal(regen.status, 'success');

    // The history keeps the old branch: the replaced head, and a fork from the base.
    const history = await historyOf(thread);
    const ids = history.map((s) => s.checkpoint_id);
    assert.ok(ids.includes(before.checkpoint_id), 'the replaced head is kept');
    const old = history.find((s) => s.checkpoint_id === before.checkpoint_id);
    assert.deepEqual(old.values.messages.map((m) => m.id), [h1.id, a1.id, h2.id, a2.id]);
    const children = history.filter((s) => s.parent_checkpoint_id === cp.checkpoint_id);
    assert.equal(children.length, 2, 'the base has two children: the old turn and the new one');
    // Walking back from the new head reaches the base, and never the old branch.
    const byId = new Map(history.map((s) => [s.checkpoint_id, s]));
    const lineage = [];
    for (let s = history[0]; s; s = byId.get(s.parent_checkpoint_id)) lineage.push(s.checkpoint_id);
    assert.ok(lineage.includes(cp.checkpoint_id));
    assert.ok(!lineage.includes(before.checkpoint_id));

    // DeerFlow's canonical history (messages/page) is the new branch.
    const page = (await api('GET', `/api/threads/${thread}/messages/page`)).json;
    assert.deepEqual(page.data.map((row) => row.content.id).slice(0, 3), [h1.id, a1.id, h2.id]);
    assert.equal(page.data.at(-1).content.content, 'Second answer, again');
    assert.equal(page.data.length, 4);

    // Regenerating again forks from the same base; only the latest answer may be regenerated.
    const again = await prepare(thread, { message_id: after.values.messages[3].id });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.checkpoint.checkpoint_id, cp.checkpoint_id);
    assert.equal(again.json.target_run_id, regen.run_id);
    const older = await prepare(thread, { message_id: a1.id });
    assert.deepEqual([older.status, older.json.detail], [409, 'Only the latest assistant message can be regenerated']);
    const question = await prepare(thread, { message_id: h2.id });
    assert.deepEqual([question.status, question.json.detail], [409, 'Only visible assistant messages can be regenerated']);
    const replaced = await prepare(thread, { message_id: a2.id });
    assert.deepEqual([replaced.status, replaced.json.detail], [404, `Message ${a2.id} not found`]);
  });

  it('edits the latest question and reruns it; the current title is kept', async () => {
    const thread = await conversation(['Plan a trip to Lisbon', 'Add a day in Sintra'], ['Day 1: Alfama', 'Day 4: Sintra']);
    assert.equal((await api('POST', `/api/threads/${thread}/state`, { values: { title: 'Renamed by hand' } })).status, 200);
    const before = await stateOf(thread);
    const [h1, a1, h2, a2] = before.values.messages;
    const source = (await api('GET', `/api/threads/${thread}/runs`)).json[0].run_id;

    const prep = await prepareEdit(thread, { human_message_id: h2.id, replacement_text: '  Add a day in Cascais \n' });
    assert.equal(prep.status, 200, prep.text);
    const p = prep.json;
    assert.deepEqual(Object.keys(p).sort(),
      ['checkpoint', 'input', 'metadata', 'replacement_human_message_id', 'source_message_ids', 'target_run_id']);
    assert.match(p.replacement_human_message_id, UUID);
    assert.deepEqual(p.source_message_ids, [h2.id, a2.id]);
    assert.equal(p.target_run_id, source);
    assert.deepEqual(p.input, {
      messages: [{ type: 'human', id: p.replacement_human_message_id, content: [{ type: 'text', text: 'Add a day in Cascais' }], additional_kwargs: {} }],
      title: 'Renamed by hand',
    });
    assert.deepEqual(p.metadata, {
      replay_kind: 'edit', regenerate_from_message_id: a2.id, regenerate_from_run_id: source,
      regenerate_checkpoint_id: p.checkpoint.checkpoint_id, edit_from_message_id: h2.id,
      edit_message_id: p.replacement_human_message_id, edit_version_group_id: h2.id,
    });

    fake.queue(reply('Day 4: Cascais'));
    await submitPrepared(thread, p);
    const after = await stateOf(thread);
    assert.deepEqual(texts(after.values.messages), ['human:Plan a trip to Lisbon', 'ai:Day 1: Alfama', 'human:Add a day in Cascais', 'ai:Day 4: Cascais']);
    assert.deepEqual(after.values.messages.slice(0, 3).map((m) => m.id), [h1.id, a1.id, p.replacement_human_message_id]);
    assert.equal(after.values.title, 'Renamed by hand', 'the rename made after the base is not rolled back');
    const old = (await historyOf(thread)).find((s) => s.checkpoint_id === before.checkpoint_id);
    assert.deepEqual(texts(old.values.messages).slice(2), ['human:Add a day in Sintra', 'ai:Day 4: Sintra']);

    // A second edit of the same question belongs to the same group of versions.
    const edited = after.values.messages[2];
    const second = await prepareEdit(thread, { human_message_id: edited.id, replacement_text: 'Add a day in Evora' });
    assert.equal(second.status, 200, second.text);
    assert.equal(second.json.metadata.edit_version_group_id, h2.id);

    // DeerFlow's rules: only the latest question, a changed text, some text.
    const refusals = [
      [{ human_message_id: h1.id, replacement_text: 'Plan a trip to Porto' }, 'Only the latest completed user turn can be edited'],
      [{ human_message_id: edited.id, replacement_text: ' Add a day in Cascais ' }, 'Edited message is unchanged'],
      [{ human_message_id: edited.id, replacement_text: ' \t\n ' }, 'Edited message cannot be empty'],
    ];
    for (const [body, detail] of refusals) {
      const r = await prepareEdit(thread, body);
      assert.deepEqual([r.status, r.json.detail], [409, detail], JSON.stringify(body));
    }
    for (const body of [{}, { human_message_id: edited.id }, { human_message_id: '', replacement_text: 'x' },
      { human_message_id: edited.id, replacement_text: 7 }, { human_message_id: edited.id, replacement_text: 'x', extra: 1 }]) {
      const r = await prepareEdit(thread, body);
      assert.equal(r.status, 422, JSON.stringify(body));
    }
    for (const body of [{}, { message_id: '' }, { message_id: ['x'] }, { message_id: 'x', human_message_id: 'y' }]) {
      const r = await prepare(thread, body);
      assert.equal(r.status, 422, JSON.stringify(body));
    }

    // A question of a client-chosen id (up to 128 characters) groups its edits under that id, whole.
    const long = `q-${'x'.repeat(120)}`;
    const chosen = await client.threads.create();
    fake.queue(reply('Noted'));
    await client.runs.wait(chosen.thread_id, 'lead_agent', { input: { messages: [{ type: 'human', content: 'Note this', id: long }] } });
    const grouped = await prepareEdit(chosen.thread_id, { human_message_id: long, replacement_text: 'Note that' });
    assert.equal(grouped.status, 200, grouped.text);
    assert.equal(grouped.json.metadata.edit_version_group_id, long);
    assert.deepEqual(grouped.json.source_message_ids[0], long);
  });

  it('edits an older question with a run from the checkpoint before it, through the SDK alone', async () => {
    const thread = await conversation(['Question one', 'Question two'], ['Answer one', 'Answer two']);
    const before = await stateOf(thread);
    const history = await historyOf(thread);
    // The checkpoint before the first question: the thread's root, its empty state.
    const root = history.at(-1);
    assert.equal(root.parent_checkpoint, null);
    assert.deepEqual(root.values.messages, []);
    assert.deepEqual([root.metadata.source, root.metadata.step], ['input', -1]);

    fake.queue(reply('Answer one, edited'));
    const done = await client.runs.wait(thread, 'lead_agent', { input: human('Question one, edited'), checkpointId: root.checkpoint_id });
    assert.deepEqual(texts(done.messages), ['human:Question one, edited', 'ai:Answer one, edited']);
    const after = await stateOf(thread);
    assert.deepEqual(texts(after.values.messages), ['human:Question one, edited', 'ai:Answer one, edited']);
    // The later turn stays in the history, on its own branch.
    const kept = (await historyOf(thread)).find((s) => s.checkpoint_id === before.checkpoint_id);
    assert.deepEqual(texts(kept.values.messages), ['human:Question one', 'ai:Answer one', 'human:Question two', 'ai:Answer two']);
    // The same through `checkpoint` (LangGraph's config object, with its thread id), from the middle.
    const middle = (await historyOf(thread)).find((s) => s.values.messages.length === 2 && s.values.messages[1].content === 'Answer one');
    fake.queue(reply('Answer three'));
    const third = await client.runs.wait(thread, 'lead_agent', {
      input: human('Question three'),
      checkpoint: { thread_id: thread, checkpoint_ns: '', checkpoint_id: middle.checkpoint_id },
    });
    assert.deepEqual(texts(third.messages), ['human:Question one', 'ai:Answer one', 'human:Question three', 'ai:Answer three']);
  });

  it('regenerates and edits the first turn from the thread\'s empty root checkpoint', async () => {
    const thread = await conversation(['Plan a trip to Lisbon'], ['Here is a plan']);
    const before = await stateOf(thread);
    const [h1, a1] = before.values.messages;
    const root = (await historyOf(thread)).at(-1);
    assert.deepEqual(root.values.messages, []);

    const prep = await prepare(thread, { message_id: a1.id });
    assert.equal(prep.status, 200, prep.text);
    assert.equal(prep.json.checkpoint.checkpoint_id, root.checkpoint_id);
    assert.equal(prep.json.input.title, 'Plan a trip to Lisbon');
    fake.queue(reply('Here is another plan'));
    await submitPrepared(thread, prep.json);
    let state = await stateOf(thread);
    assert.deepEqual(texts(state.values.messages), ['human:Plan a trip to Lisbon', 'ai:Here is another plan']);
    assert.equal(state.values.messages[0].id, h1.id);

    // An edit of the first question starts from the untitled root: the
    // title is made again from the edited question, not kept.
    const edit = await prepareEdit(thread, { human_message_id: h1.id, replacement_text: 'Plan a trip to Porto' });
    assert.equal(edit.status, 200, edit.text);
    assert.equal(edit.json.checkpoint.checkpoint_id, root.checkpoint_id);
    assert.equal('title' in edit.json.input, false);
    fake.queue(reply('Porto it is'));
    await submitPrepared(thread, edit.json);
    state = await stateOf(thread);
    assert.deepEqual(texts(state.values.messages), ['human:Plan a trip to Porto', 'ai:Porto it is']);
    assert.equal(state.values.title, 'Plan a trip to Porto');
    // Every version of the first turn is in the history, each a child of the root.
    const children = (await historyOf(thread)).filter((s) => s.parent_checkpoint_id === root.checkpoint_id);
    assert.equal(children.length, 3);

    // A thread whose first message a client wrote (POST /state) has no
    // checkpoint before it: there is nothing to start again from.
    const posted = await client.threads.create();
    await client.threads.updateState(posted.thread_id, { values: { messages: [{ type: 'human', content: 'Written by a client', id: 'client-q' }] } });
    fake.queue(reply('Answered'));
    await client.runs.wait(posted.thread_id, 'lead_agent', { input: null });
    const answered = (await stateOf(posted.thread_id)).values.messages.at(-1);
    const none = await prepare(posted.thread_id, { message_id: answered.id });
    assert.deepEqual([none.status, none.json.detail], [409, 'Could not find an addressable checkpoint before the target user message']);
    // A thread without a checkpoint has nothing to regenerate.
    const empty = await client.threads.create();
    const nothing = await prepare(empty.thread_id, { message_id: 'x' });
    assert.deepEqual([nothing.status, nothing.json.detail], [404, `Thread ${empty.thread_id} has no checkpoint`]);
  });

  it('finds no checkpoint of another user or thread, refuses malformed ones, and creates nothing for them', async () => {
    const thread = await conversation(['Mine'], ['Yours truly']);
    const state = await stateOf(thread);
    const mine = state.checkpoint_id;
    const answer = state.values.messages[1].id;
    // Bob asks about admin's thread: it is not his.
    for (const r of [await prepare(thread, { message_id: answer }, bob),
      await prepareEdit(thread, { human_message_id: state.values.messages[0].id, replacement_text: 'Stolen' }, bob)]) {
      assert.deepEqual([r.status, r.json.detail], [404, 'Thread not found']);
    }
    // Bob's own thread of the same id, and admin's checkpoint id: not found,
    // the same answer as for an id that exists nowhere; no run is made.
    const bobs = sdk(srv, bob.token);
    await bobs.threads.create({ threadId: thread });
    fake.queue(reply('Bob here'));
    await bobs.runs.wait(thread, 'lead_agent', { input: human('Bob asks') });
    const bobRuns = (await api('GET', `/api/threads/${thread}/runs`, undefined, bob)).json.length;
    const nowhere = '00000000-0000-4000-8000-000000000000';
    for (const id of [mine, nowhere]) {
      const r = await api('POST', `/api/threads/${thread}/runs/wait`, { assistant_id: 'lead_agent', input: human('Fork theirs'), checkpoint_id: id }, bob);
      assert.deepEqual([r.status, r.json.detail], [404, `Checkpoint ${id} not found`]);
      const s = await api('POST', `/api/threads/${thread}/runs/stream`, { input: human('Fork theirs'), checkpoint: { checkpoint_id: id } }, bob);
      assert.deepEqual([s.status, s.json.detail], [404, `Checkpoint ${id} not found`]);
    }
    assert.equal((await api('GET', `/api/threads/${thread}/runs`, undefined, bob)).json.length, bobRuns);
    assert.deepEqual(texts((await stateOf(thread, bob)).values.messages), ['human:Bob asks', 'ai:Bob here']);
    assert.deepEqual(texts((await stateOf(thread)).values.messages), ['human:Mine', 'ai:Yours truly']);
    // Another thread of the same user: its checkpoints are not this thread's.
    const other = await conversation(['Elsewhere'], ['There']);
    const cross = await api('POST', `/api/threads/${other}/runs`, { input: human('Cross'), checkpoint_id: mine });
    assert.deepEqual([cross.status, cross.json.detail], [404, `Checkpoint ${mine} not found`]);
    // Neither a stateless run nor if_not_exists makes a thread for a checkpoint it cannot have.
    const count = async () => (await api('POST', '/api/threads/search', { limit: 1000 })).json.length;
    const threads = await count();
    const stateless = await api('POST', '/api/runs/wait', { input: human('Anywhere'), checkpoint_id: mine });
    assert.equal(stateless.status, 404, stateless.text);
    const named = await api('POST', '/api/runs', { input: human('New'), checkpoint_id: mine, config: { configurable: { thread_id: 'never-made' } } });
    assert.equal(named.status, 404, named.text);
    const missing = await api('POST', '/api/threads/not-there/runs', { input: human('New'), checkpoint_id: mine, if_not_exists: 'create' });
    assert.equal(missing.status, 404, missing.text);
    assert.equal(await count(), threads);
    // Malformed, or naming another thread: 422.
    const malformed = [
      { checkpoint_id: '' }, { checkpoint_id: '../x' }, { checkpoint_id: 'a'.repeat(65) }, { checkpoint_id: 7 },
      { checkpoint_id: 'a\u0000b' }, { checkpoint: 'x' }, { checkpoint: { checkpoint_id: 'a/b' } },
      { checkpoint: { checkpoint_id: mine, checkpoint_ns: 'tools' } }, { checkpoint: { checkpoint_id: mine, checkpoint_map: { '': mine } } },
      { checkpoint: { checkpoint_id: mine, extra: 1 } }, { checkpoint: { checkpoint_id: mine, thread_id: other } },
      { checkpoint: { checkpoint_id: mine, thread_id: 5 } }, { checkpoint_id: mine, checkpoint: { checkpoint_id: nowhere } },
      { input: { messages: [], title: 5 } },
    ];
    for (const body of malformed) {
      const r = await api('POST', `/api/threads/${thread}/runs`, { input: human('Bad'), ...body });
      assert.equal(r.status, 422, `${JSON.stringify(body)}: ${r.status} ${r.text}`);
    }
    // What LangGraph takes for "the newest state": no run is refused for them.
    for (const body of [{ checkpoint: null }, { checkpoint: {} }, { checkpoint: { checkpoint_id: null, checkpoint_ns: '', checkpoint_map: null } }, { checkpoint_id: null }]) {
      fake.queue(reply('Latest'));
      const r = await api('POST', `/api/threads/${thread}/runs/wait`, { input: human('Go on'), ...body });
      assert.equal(r.status, 200, `${JSON.stringify(body)}: ${r.text}`);
      assert.equal(r.json.messages.at(-1).content, 'Latest');
    }
  });

  it('follows the thread\'s multitask rules while a run is active, and regenerates an answer an interrupt cut short', async () => {
    const thread = await conversation(['Start'], ['Started']);
    const [, a1] = (await stateOf(thread)).values.messages;
    const hold = held('never seen', 'Half an ans');
    try {
      fake.queue(hold.step);
      const asked = fake.requests.length;
      const active = await client.runs.create(thread, 'lead_agent', { input: human('Keep going') });
      await waitFor(() => fake.requests.length > asked, undefined, 'the active run to ask the model');
      // The answer being written has not reached the state: the latest answer is still a1.
      const prep = await prepare(thread, { message_id: a1.id });
      assert.equal(prep.status, 200, prep.text);
      const body = { assistant_id: 'lead_agent', input: prep.json.input, checkpoint: prep.json.checkpoint, metadata: prep.json.metadata };
      // reject (the default): 409, and the active run goes on.
      const refused = await api('POST', `/api/threads/${thread}/runs`, body);
      assert.equal(refused.status, 409, refused.text);
      assert.equal((await client.runs.get(thread, active.run_id)).status, 'running');
      // interrupt: the active run is cancelled first, then the fork runs.
      fake.queue(reply('Started again'));
      const replaced = await sdkStatus(() => client.runs.wait(thread, 'lead_agent', {
        input: prep.json.input, checkpoint: prep.json.checkpoint, metadata: prep.json.metadata, multitaskStrategy: 'interrupt',
      }));
      assert.equal(replaced, 200);
      assert.equal((await client.runs.get(thread, active.run_id)).status, 'interrupted');
      assert.deepEqual(texts((await stateOf(thread)).values.messages), ['human:Start', 'ai:Started again']);
    } finally {
      hold.release();
    }

    // A run stopped while the model spoke leaves no answer in the state; the
    // UI regenerates the message it streamed, whose id the state never had:
    // the question of the interrupted run is asked again.
    const stopped = held('never seen', 'Partial');
    try {
      fake.queue(stopped.step);
      const asked = fake.requests.length;
      const run = await client.runs.create(thread, 'lead_agent', { input: human('Tell me more') });
      await waitFor(() => fake.requests.length > asked, undefined, 'the run to ask the model');
      const cancel = await api('POST', `/api/threads/${thread}/runs/${run.run_id}/cancel?wait=1`);
      assert.equal(cancel.status, 204, cancel.text);
      const state = await stateOf(thread);
      const question = state.values.messages.at(-1);
      assert.equal(question.content, 'Tell me more');
      const prep = await prepare(thread, { message_id: 'streamed-but-never-stored' });
      assert.equal(prep.status, 200, prep.text);
      assert.equal(prep.json.target_run_id, run.run_id);
      assert.equal(prep.json.input.messages[0].id, question.id);
      fake.queue(reply('More, at last'));
      await submitPrepared(thread, prep.json);
      assert.deepEqual(texts((await stateOf(thread)).values.messages), ['human:Start', 'ai:Started again', 'human:Tell me more', 'ai:More, at last']);
      // After a run that succeeded, an unknown id is just not found.
      const unknown = await prepare(thread, { message_id: 'streamed-but-never-stored' });
      assert.deepEqual([unknown.status, unknown.json.detail], [404, 'Message streamed-but-never-stored not found']);
    } finally {
      stopped.release();
    }
  });
});
