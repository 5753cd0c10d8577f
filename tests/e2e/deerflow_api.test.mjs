// The API DeerFlow's web frontend (Next.js, LangGraph SDK) calls, against
// fawn: through the LangGraph JS SDK where the frontend uses it, with
// fetch-like raw requests where it calls the gateway directly. Each test
// asks what the frontend asks, in the shapes its source parses.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';
import { Client } from '@langchain/langgraph-sdk';

import { FawnServer, request, setupAdmin, setupUser } from './lib/server.mjs';
import { FakeOpenAI, reply } from './lib/fake_openai.mjs';

function sdk(srv, token, base = '/api') {
  return new Client({
    apiUrl: `${srv.base}${base}`,
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

const human = (content, extra = {}) => ({ messages: [{ type: 'human', content, ...extra }] });

// DeerFlow's sidebar query (frontend/src/core/threads/thread-search-query.ts).
const SIDEBAR_SEARCH = {
  limit: 50,
  sortBy: 'updated_at',
  sortOrder: 'desc',
  select: ['thread_id', 'updated_at', 'values', 'metadata'],
};

describe("DeerFlow's web UI against fawn", () => {
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

  describe('thread search: select, ids, extract and titles', () => {
    let ran;
    let renamed;
    let untitled;

    before(async () => {
      ran = await client.threads.create({ metadata: { tags: ['a', 'b'] } });
      fake.queue(reply('Hello there'));
      await client.runs.wait(ran.thread_id, 'lead_agent', { input: human('Plan a trip to Lisbon') });
      renamed = await client.threads.create();
      await client.threads.updateState(renamed.thread_id, { values: { title: 'Renamed by hand' } });
      untitled = await client.threads.create();
    });

    it("the sidebar's search answers the selected fields, titles from a run and from POST /state", async () => {
      const rows = await client.threads.search(SIDEBAR_SEARCH);
      assert.deepEqual(rows.map((t) => t.thread_id), [untitled.thread_id, renamed.thread_id, ran.thread_id]);
      for (const t of rows) assert.deepEqual(Object.keys(t).sort(), ['metadata', 'thread_id', 'updated_at', 'values']);
      const byId = Object.fromEntries(rows.map((t) => [t.thread_id, t]));
      assert.equal(byId[ran.thread_id].values.title, 'Plan a trip to Lisbon');
      assert.equal(byId[renamed.thread_id].values.title, 'Renamed by hand');
      assert.deepEqual(byId[untitled.thread_id].values, {});
      assert.deepEqual(byId[ran.thread_id].metadata, { tags: ['a', 'b'] });
    });

    it('GET /api/threads/{id} carries values.title and state_updated_at', async () => {
      const got = await client.threads.get(ran.thread_id);
      assert.equal(got.values.title, 'Plan a trip to Lisbon');
      assert.ok(Date.parse(got.state_updated_at) >= Date.parse(got.created_at));
      const fresh = await client.threads.get(untitled.thread_id);
      assert.deepEqual(fresh.values, {});
      assert.equal(fresh.state_updated_at, fresh.created_at, 'a thread with no state yet');
      // A rename shows at once, in the thread and in the list.
      await client.threads.updateState(ran.thread_id, { values: { title: 'Lisbon, renamed' } });
      assert.equal((await client.threads.get(ran.thread_id)).values.title, 'Lisbon, renamed');
      const rows = await client.threads.search({ ids: [ran.thread_id], select: ['values'] });
      assert.deepEqual(rows, [{ values: { title: 'Lisbon, renamed' } }]);
    });

    it('ids name threads among the caller\'s own only', async () => {
      const two = await client.threads.search({ ids: [renamed.thread_id, untitled.thread_id, 'no-such-thread'] });
      assert.deepEqual(two.map((t) => t.thread_id).sort(), [renamed.thread_id, untitled.thread_id].sort());
      const bobs = await sdk(srv, bob.token).threads.search({ ids: [ran.thread_id, renamed.thread_id] });
      assert.deepEqual(bobs, [], "another user's ids name nothing");
      const all = await client.threads.search({ ids: [] });
      assert.equal(all.length, 3, 'an empty list names every thread');
    });

    it('extract returns each alias in "extracted", null where a path leads nowhere', async () => {
      const [t] = await client.threads.search({
        ids: [ran.thread_id],
        select: ['thread_id'],
        extract: { title: 'values.title', last_tag: 'metadata.tags[-1]', first_tag: 'metadata.tags[0]', none: 'metadata.missing.deep' },
      });
      assert.deepEqual(t, {
        thread_id: ran.thread_id,
        extracted: { title: 'Lisbon, renamed', last_tag: 'b', first_tag: 'a', none: null },
      });
    });

    it('what fawn threads do not have, and what is past the bounds, is refused with 422', async () => {
      const refused = async (body, pattern) => {
        const res = await api('POST', '/api/threads/search', body);
        assert.equal(res.status, 422, res.text);
        assert.match(res.json.detail, pattern);
      };
      await refused({ select: ['context'] }, /context/);
      await refused({ select: ['thread_id', 'secrets'] }, /select must name thread fields/);
      await refused({ select: 'thread_id' }, /select must be a list/);
      await refused({ extract: { m: 'values.messages[-1]' } }, /values\.title/);
      await refused({ extract: { m: 'owner.password' } }, /starts at a thread field/);
      await refused({ extract: { m: 'metadata..x' } }, /keys are not empty/);
      await refused({ extract: Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`a${i}`, 'status'])) }, /at most 10/);
      await refused({ extract: { m: `metadata.${'k'.repeat(300)}` } }, /at most 256 bytes/);
      await refused({ ids: ['../etc'] }, /ids\[0\]/);
      await refused({ ids: Array.from({ length: 1001 }, (_, i) => `t${i}`) }, /at most 1000/);
      await refused({ selected: ['thread_id'] }, /selected/);
      assert.equal((await request(srv, 'GET', '/health')).status, 200);
    });
  });
});
