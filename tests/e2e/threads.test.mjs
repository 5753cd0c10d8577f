// Threads through the LangGraph JS SDK and raw HTTP: ids, idempotence,
// metadata, search, owner scoping, deletion on disk, concurrency.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { Client } from '@langchain/langgraph-sdk';

import { FawnServer, UUID_RE, multipart, request, setupAdmin, setupUser, sha256 } from './lib/server.mjs';

function sdk(srv, token) {
  return new Client({
    apiUrl: `${srv.base}/api`,
    defaultHeaders: { Authorization: `Bearer ${token}` },
    callerOptions: { maxRetries: 0 },
  });
}

/** Runs fn and returns the HTTP status of the SDK error it throws. */
async function sdkStatus(fn) {
  try {
    await fn();
  } catch (e) {
    return e.status;
  }
  return 200;
}

describe('threads', () => {
  let srv;
  let admin;
  let bob;
  let client;

  before(async () => {
    srv = await FawnServer.start();
    admin = await setupAdmin(srv);
    bob = await setupUser(srv, 'bob@example.com');
    client = sdk(srv, admin.token);
  });
  after(async () => {
    await srv?.stop();
  });

  const api = (method, p, body, who) => request(srv, method, p, { bearer: (who || admin).token, body });

  it('SDK create without an id gets a UUID, with the LangGraph thread shape', async () => {
    const t = await client.threads.create({ metadata: { purpose: 'sdk' } });
    assert.match(t.thread_id, UUID_RE);
    assert.equal(t.status, 'idle');
    assert.deepEqual(t.metadata, { purpose: 'sdk' });
    for (const k of ['created_at', 'updated_at']) assert.ok(!Number.isNaN(Date.parse(t[k])), `${k} is a date`);
    assert.deepEqual(t.values, {});
    assert.ok(fs.existsSync(path.join(srv.userData(admin.id, t.thread_id), 'outputs')), 'its directories exist');
    const other = await client.threads.create();
    assert.notEqual(other.thread_id, t.thread_id);
  });

  it('SDK create with an id, get, update (merge), search and delete', async () => {
    const t = await client.threads.create({ threadId: 'sdk-thread-1', metadata: { a: 1, tag: 'sdk' } });
    assert.equal(t.thread_id, 'sdk-thread-1');
    const got = await client.threads.get('sdk-thread-1');
    assert.equal(got.thread_id, 'sdk-thread-1');
    assert.deepEqual(got.metadata, { a: 1, tag: 'sdk' });
    const upd = await client.threads.update('sdk-thread-1', { metadata: { b: 2 } });
    assert.deepEqual(upd.metadata, { a: 1, b: 2, tag: 'sdk' });
    const found = await client.threads.search({ metadata: { tag: 'sdk' } });
    assert.deepEqual(found.map((x) => x.thread_id), ['sdk-thread-1']);
    await client.threads.delete('sdk-thread-1');
    assert.equal(await sdkStatus(() => client.threads.get('sdk-thread-1')), 404);
    assert.equal(fs.existsSync(srv.threadDir(admin.id, 'sdk-thread-1')), false);
  });

  it('SDK ifExists raise on an existing id is 409; do_nothing returns the thread', async () => {
    await client.threads.create({ threadId: 'sdk-exists', metadata: { first: true } });
    assert.equal(await sdkStatus(() => client.threads.create({ threadId: 'sdk-exists', ifExists: 'raise' })), 409);
    const same = await client.threads.create({ threadId: 'sdk-exists', ifExists: 'do_nothing', metadata: { second: true } });
    assert.equal(same.thread_id, 'sdk-exists');
    assert.deepEqual(same.metadata, { first: true }, 'an existing thread is returned as it is');
  });

  it('SDK options fawn does not implement are refused with 422, not ignored', async () => {
    assert.equal(await sdkStatus(() => client.threads.search({ select: ['context'] })), 422);
    assert.equal(await sdkStatus(() => client.threads.search({ extract: { m: 'values.messages' } })), 422);
    assert.equal(await sdkStatus(() => client.threads.search({ sortBy: 'created_at' })), 422);
    assert.equal(await sdkStatus(() => client.threads.create({ ttl: 60 })), 422);
    const ok = await client.threads.search({ sortBy: 'updated_at', sortOrder: 'desc', values: {} });
    assert.ok(Array.isArray(ok));
  });

  it('a search whose metadata match is beyond its bounds is refused with 422, not run', async () => {
    // Threads with large metadata: a match of thousands of keys would cost
    // each of them thousands of lookups.
    const big = Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`key${i}`, 'v'.repeat(100)]));
    for (let i = 0; i < 5; i++) assert.equal((await api('POST', '/api/threads', { metadata: big })).status, 200);
    const keys = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`key${i}`, 'v'.repeat(100)]));
    const many = await api('POST', '/api/threads/search', { metadata: keys });
    assert.equal(many.status, 422, many.text);
    assert.match(many.json.detail, /more than 32 keys|larger than 8192 bytes/);
    const long = await api('POST', '/api/threads/search', { metadata: { key0: 'v'.repeat(9000) } });
    assert.equal(long.status, 422, long.text);
    assert.match(long.json.detail, /larger than 8192 bytes/);
    const few = Object.fromEntries(Array.from({ length: 32 }, (_, i) => [`key${i}`, 'v'.repeat(100)]));
    const found = await api('POST', '/api/threads/search', { metadata: few });
    assert.equal(found.status, 200, found.text);
    assert.equal(found.json.length, 5);
    assert.equal((await request(srv, 'GET', '/health')).status, 200);
  });

  it('creating the same id twice is idempotent', async () => {
    const a = await api('POST', '/api/threads', { thread_id: 'idem-1', metadata: { v: 1 } });
    const b = await api('POST', '/api/threads', { thread_id: 'idem-1', metadata: { v: 2 } });
    assert.equal(a.status, 200);
    assert.equal(b.status, 200);
    assert.equal(b.json.thread_id, 'idem-1');
    assert.equal(b.json.created_at, a.json.created_at);
    assert.deepEqual(b.json.metadata, { v: 1 });
    const raise = await api('POST', '/api/threads', { thread_id: 'idem-1', if_exists: 'raise' });
    assert.equal(raise.status, 409);
    const search = await api('POST', '/api/threads/search', { metadata: { v: 1 } });
    assert.equal(search.json.filter((x) => x.thread_id === 'idem-1').length, 1);
  });

  it('invalid thread ids are 422 and create nothing', async () => {
    const before = fs.readdirSync(path.join(srv.home, 'users', admin.id, 'threads')).sort();
    const bad = ['', 'a/b', 'x'.repeat(65), '..', '.', 'a b', 'a\\b', 'a%2Fb', 'ü', 'a\u0000b', 'a.b', 5, true, {}, []];
    for (const id of bad) {
      const res = await api('POST', '/api/threads', { thread_id: id });
      assert.equal(res.status, 422, `${JSON.stringify(id)}: ${res.status} ${res.text}`);
    }
    const ok64 = await api('POST', '/api/threads', { thread_id: 'y'.repeat(64) });
    assert.equal(ok64.status, 200, '64 characters is the longest id');
    const after = fs.readdirSync(path.join(srv.home, 'users', admin.id, 'threads')).sort();
    assert.deepEqual(after, [...before, 'y'.repeat(64)].sort());
    const badOpt = await api('POST', '/api/threads', { if_exists: 'overwrite' });
    assert.equal(badOpt.status, 422);
    const badMeta = await api('POST', '/api/threads', { metadata: ['not', 'an', 'object'] });
    assert.equal(badMeta.status, 422);
    const unknownKey = await api('POST', '/api/threads', { thread_id: 'unk-key', owner: 'someone' });
    assert.equal(unknownKey.status, 422);
  });

  it('reserved metadata keys owner_id and user_id are stripped on create and on PATCH', async () => {
    const t = await api('POST', '/api/threads', { thread_id: 'reserved', metadata: { owner_id: bob.id, user_id: 'x', keep: 'yes' } });
    assert.equal(t.status, 200);
    assert.deepEqual(t.json.metadata, { keep: 'yes' });
    const p = await api('PATCH', '/api/threads/reserved', { metadata: { owner_id: '999', user_id: '999', more: 1 } });
    assert.equal(p.status, 200);
    assert.deepEqual(p.json.metadata, { keep: 'yes', more: 1 });
    // The thread is still the admin's, not bob's.
    const asBob = await api('GET', '/api/threads/reserved', undefined, bob);
    assert.equal(asBob.status, 404);
    const byOwner = await api('POST', '/api/threads/search', { metadata: { owner_id: bob.id } });
    assert.deepEqual(byOwner.json, []);
  });

  it('search matches metadata exactly, value and type', async () => {
    await api('POST', '/api/threads', { thread_id: 'm-num', metadata: { kind: 'match', n: 1 } });
    await api('POST', '/api/threads', { thread_id: 'm-str', metadata: { kind: 'match', n: '1' } });
    await api('POST', '/api/threads', { thread_id: 'm-other', metadata: { kind: 'other', n: 1 } });
    await api('POST', '/api/threads', { thread_id: 'm-nested', metadata: { kind: 'match', obj: { x: [1, 2] } } });
    const ids = async (metadata) => (await api('POST', '/api/threads/search', { metadata })).json.map((x) => x.thread_id).sort();
    assert.deepEqual(await ids({ kind: 'match' }), ['m-nested', 'm-num', 'm-str']);
    assert.deepEqual(await ids({ kind: 'match', n: 1 }), ['m-num']);
    assert.deepEqual(await ids({ kind: 'match', n: '1' }), ['m-str']);
    assert.deepEqual(await ids({ kind: 'matc' }), [], 'no prefix match');
    assert.deepEqual(await ids({ kind: 'MATCH' }), [], 'no case folding');
    assert.deepEqual(await ids({ kind: 'match', missing: null }), [], 'an absent key is not null');
    assert.deepEqual(await ids({ obj: { x: [1, 2] } }), ['m-nested']);
    assert.deepEqual(await ids({ "kind') OR 1=1 --": 'x' }), [], 'keys are data, not SQL');
  });

  it('search limit, offset and status', async () => {
    for (let i = 0; i < 5; i++) {
      const r = await api('POST', '/api/threads', { thread_id: `page-${i}`, metadata: { page: true } });
      assert.equal(r.status, 200);
    }
    const all = (await api('POST', '/api/threads/search', { metadata: { page: true }, limit: 10 })).json;
    assert.equal(all.length, 5);
    const times = all.map((t) => Date.parse(t.updated_at));
    assert.deepEqual([...times].sort((a, b) => b - a), times, 'newest update first');
    const first = (await api('POST', '/api/threads/search', { metadata: { page: true }, limit: 2 })).json;
    assert.deepEqual(first.map((t) => t.thread_id), all.slice(0, 2).map((t) => t.thread_id));
    const second = (await api('POST', '/api/threads/search', { metadata: { page: true }, limit: 2, offset: 2 })).json;
    assert.deepEqual(second.map((t) => t.thread_id), all.slice(2, 4).map((t) => t.thread_id));
    const last = (await api('POST', '/api/threads/search', { metadata: { page: true }, limit: 10, offset: 4 })).json;
    assert.equal(last.length, 1);
    const past = (await api('POST', '/api/threads/search', { metadata: { page: true }, offset: 50 })).json;
    assert.deepEqual(past, []);
    const idle = (await api('POST', '/api/threads/search', { metadata: { page: true }, status: 'idle' })).json;
    assert.equal(idle.length, 5);
    const busy = (await api('POST', '/api/threads/search', { metadata: { page: true }, status: 'busy' })).json;
    assert.deepEqual(busy, []);
    for (const body of [{ limit: 0 }, { limit: 1001 }, { limit: -1 }, { limit: 'ten' }, { offset: -1 }, { status: 'sleeping' }, { metadata: 'x' }, { sort_by: 'thread_id' }]) {
      const res = await api('POST', '/api/threads/search', body);
      assert.equal(res.status, 422, `${JSON.stringify(body)}: ${res.status} ${res.text}`);
    }
    const sdkPage = await client.threads.search({ metadata: { page: true }, limit: 3, offset: 1 });
    assert.deepEqual(sdkPage.map((t) => t.thread_id), all.slice(1, 4).map((t) => t.thread_id));
  });

  it("another user gets 404 for the thread on GET, PATCH, DELETE, uploads and artifacts", async () => {
    const t = await api('POST', '/api/threads', { thread_id: 'private', metadata: { secret: 'a' } });
    assert.equal(t.status, 200);
    const out = path.join(srv.userData(admin.id, 'private'), 'outputs');
    fs.writeFileSync(path.join(out, 'secret.txt'), 'admin only');
    const up = path.join(srv.userData(admin.id, 'private'), 'uploads');
    fs.writeFileSync(path.join(up, 'mine.txt'), 'admin upload');

    const asBob = (method, p, body) => api(method, p, body, bob);
    assert.equal((await asBob('GET', '/api/threads/private')).status, 404);
    assert.equal((await asBob('PATCH', '/api/threads/private', { metadata: { secret: 'b' } })).status, 404);
    assert.equal((await asBob('DELETE', '/api/threads/private')).status, 404);
    const list = await asBob('GET', '/api/threads/private/uploads/list');
    assert.equal(list.status, 404, list.text);
    assert.ok(!list.text.includes('mine.txt'), 'no file names leak');
    // The upload limits are the same for every id, so they tell Bob nothing.
    const limits = await asBob('GET', '/api/threads/private/uploads/limits');
    assert.equal(limits.status, 200);
    assert.equal(limits.text, (await asBob('GET', '/api/threads/no-such-thread/uploads/limits')).text);
    assert.equal((await asBob('DELETE', '/api/threads/private/uploads/mine.txt')).status, 404);
    const art = await asBob('GET', '/api/threads/private/artifacts/mnt/user-data/outputs/secret.txt');
    assert.equal(art.status, 404);
    assert.ok(!art.text.includes('admin only'));
    const upArt = await asBob('GET', '/api/threads/private/artifacts/mnt/user-data/uploads/mine.txt');
    assert.equal(upArt.status, 404);
    const put = await asBob('PUT', '/api/threads/private/artifacts/mnt/user-data/outputs/secret.txt', {
      content: 'overwritten',
      expected_sha256: sha256('admin only'),
    });
    assert.equal(put.status, 404);
    // Through the SDK, too.
    const bobClient = sdk(srv, bob.token);
    assert.equal(await sdkStatus(() => bobClient.threads.get('private')), 404);
    assert.equal(await sdkStatus(() => bobClient.threads.update('private', { metadata: { x: 1 } })), 404);
    assert.equal(await sdkStatus(() => bobClient.threads.delete('private')), 404);
    // Nothing changed, and bob has no directory of that name.
    const mine = await api('GET', '/api/threads/private');
    assert.equal(mine.status, 200);
    assert.deepEqual(mine.json.metadata, { secret: 'a' });
    assert.equal(fs.readFileSync(path.join(out, 'secret.txt'), 'utf8'), 'admin only');
    assert.deepEqual(fs.readdirSync(up), ['mine.txt']);
    assert.equal(fs.existsSync(srv.threadDir(bob.id, 'private')), false);
  });

  it("thread ids are per user: the same id for another user is that user's own thread", async () => {
    const asBob = (method, p, body) => api(method, p, body, bob);
    // An upload to the id creates bob's own thread; the admin's files are not involved.
    const mp = multipart([{ filename: 'planted.txt', content: 'from bob' }]);
    const upRes = await request(srv, 'POST', '/api/threads/private/uploads', {
      bearer: bob.token,
      body: mp.body,
      headers: { 'Content-Type': mp.contentType },
    });
    assert.equal(upRes.status, 200, upRes.text);
    const adminUploads = path.join(srv.userData(admin.id, 'private'), 'uploads');
    assert.deepEqual(fs.readdirSync(adminUploads), ['mine.txt']);
    assert.deepEqual(fs.readdirSync(path.join(srv.userData(bob.id, 'private'), 'uploads')), ['planted.txt']);
    const bobList = await asBob('GET', '/api/threads/private/uploads/list');
    assert.deepEqual(bobList.json.files.map((f) => f.filename), ['planted.txt']);
    const adminList = await api('GET', '/api/threads/private/uploads/list');
    assert.deepEqual(adminList.json.files.map((f) => f.filename), ['mine.txt']);
    const bobThread = await asBob('GET', '/api/threads/private');
    assert.equal(bobThread.status, 200);
    assert.deepEqual(bobThread.json.metadata, {}, "bob's thread is not the admin's");
    const bobSecret = await asBob('GET', '/api/threads/private/artifacts/mnt/user-data/outputs/secret.txt');
    assert.equal(bobSecret.status, 404);
    // Bob deleting his thread leaves the admin's alone.
    const del = await asBob('DELETE', '/api/threads/private');
    assert.equal(del.status, 200, del.text);
    assert.equal(fs.existsSync(srv.threadDir(bob.id, 'private')), false);
    assert.deepEqual(fs.readdirSync(adminUploads), ['mine.txt']);
    assert.equal((await api('GET', '/api/threads/private')).status, 200);
    // SDK create with the admin's id gives bob a new, empty thread of his own.
    const bobClient = sdk(srv, bob.token);
    const own = await bobClient.threads.create({ threadId: 'private', metadata: { bobs: true } });
    assert.deepEqual(own.metadata, { bobs: true });
    const adminView = await api('GET', '/api/threads/private');
    assert.deepEqual(adminView.json.metadata, { secret: 'a' });
  });

  it("another user's search never shows the thread", async () => {
    const bobClient = sdk(srv, bob.token);
    await bobClient.threads.create({ threadId: 'bobs-own', metadata: { owner: 'bob' } });
    const bobIds = ['bobs-own', 'private'];
    for (const metadata of [undefined, { secret: 'a' }, { page: true }, { kind: 'match' }, { batch: 'conc' }]) {
      const res = await api('POST', '/api/threads/search', { metadata, limit: 1000 }, bob);
      assert.equal(res.status, 200);
      for (const t of res.json) {
        assert.ok(bobIds.includes(t.thread_id), `${JSON.stringify(metadata)}: ${t.thread_id}`);
        assert.notEqual(t.metadata.secret, 'a', "the admin's thread is not listed");
      }
    }
    const all = await api('POST', '/api/threads/search', { limit: 1000 }, bob);
    assert.deepEqual(all.json.map((t) => t.thread_id).sort(), bobIds);
    const adminSees = await api('POST', '/api/threads/search', { metadata: { secret: 'a' } });
    assert.deepEqual(adminSees.json.map((t) => t.thread_id), ['private']);
    const adminNoBob = await api('POST', '/api/threads/search', { metadata: { owner: 'bob' } });
    assert.deepEqual(adminNoBob.json, []);
  });

  it('PATCH merges metadata (new keys added, existing ones replaced)', async () => {
    await api('POST', '/api/threads', { thread_id: 'merge', metadata: { a: 1, b: { deep: 1 } } });
    const p1 = await api('PATCH', '/api/threads/merge', { metadata: { c: 3 } });
    assert.deepEqual(p1.json.metadata, { a: 1, b: { deep: 1 }, c: 3 });
    const p2 = await api('PATCH', '/api/threads/merge', { metadata: { a: 'one', b: { other: 2 } } });
    assert.deepEqual(p2.json.metadata, { a: 'one', b: { other: 2 }, c: 3 });
    const p3 = await api('PATCH', '/api/threads/merge', {});
    assert.equal(p3.status, 200);
    assert.deepEqual(p3.json.metadata, { a: 'one', b: { other: 2 }, c: 3 });
    assert.ok(Date.parse(p2.json.updated_at) >= Date.parse(p1.json.updated_at));
    const bad = await api('PATCH', '/api/threads/merge', { metadata: 5 });
    assert.equal(bad.status, 422);
    const missing = await api('PATCH', '/api/threads/no-such-thread', { metadata: { a: 1 } });
    assert.equal(missing.status, 404);
  });

  it('DELETE removes the thread directory on disk, then GET is 404', async () => {
    await api('POST', '/api/threads', { thread_id: 'doomed' });
    const dir = srv.threadDir(admin.id, 'doomed');
    fs.writeFileSync(path.join(dir, 'user-data', 'outputs', 'f.txt'), 'x');
    fs.mkdirSync(path.join(dir, 'user-data', 'workspace', 'deep', 'er'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'user-data', 'workspace', 'deep', 'er', 'g.txt'), 'y');
    // A symlink out of the thread must be removed, not followed.
    const outside = fs.mkdtempSync(path.join(srv.home, 'outside-'));
    fs.writeFileSync(path.join(outside, 'keep.txt'), 'keep me');
    fs.symlinkSync(outside, path.join(dir, 'user-data', 'workspace', 'link'));
    const del = await api('DELETE', '/api/threads/doomed');
    assert.equal(del.status, 200, del.text);
    assert.equal(del.json.success, true);
    assert.equal(fs.existsSync(dir), false);
    const leftovers = fs.readdirSync(path.join(srv.home, 'users', admin.id, 'threads')).filter((n) => n.startsWith('.deleted-'));
    assert.deepEqual(leftovers, []);
    assert.equal(fs.readFileSync(path.join(outside, 'keep.txt'), 'utf8'), 'keep me');
    assert.equal((await api('GET', '/api/threads/doomed')).status, 404);
    assert.equal((await api('DELETE', '/api/threads/doomed')).status, 404);
    const search = await api('POST', '/api/threads/search', { limit: 1000 });
    assert.ok(!search.json.some((t) => t.thread_id === 'doomed'));
  });

  it('DELETE removes a tree deeper than any fixed bound, and a removal that fails keeps the thread', async () => {
    await api('POST', '/api/threads', { thread_id: 'abyss' });
    const dir = srv.threadDir(admin.id, 'abyss');
    process.chdir(path.join(dir, 'user-data', 'workspace'));
    for (let i = 0; i < 300; i++) {
      fs.mkdirSync('d'); // relative steps keep every path short
      process.chdir('d');
    }
    fs.writeFileSync('secret.txt', 'deep');
    process.chdir(srv.home);
    // A file the removal cannot delete (immutable) makes DELETE fail: the
    // thread is still there, its files back in place, and a retry succeeds.
    const stuck = path.join(dir, 'user-data', 'outputs', 'secret.txt');
    fs.writeFileSync(stuck, 'x');
    execFileSync('chattr', ['+i', stuck]);
    let del;
    try {
      del = await api('DELETE', '/api/threads/abyss');
    } finally {
      execFileSync('chattr', ['-i', stuck]);
    }
    assert.equal(del.status, 500, del.text);
    assert.match(srv.stderr, /Thread abyss's files could not be removed/);
    assert.equal((await api('GET', '/api/threads/abyss')).status, 200);
    assert.equal(fs.readFileSync(stuck, 'utf8'), 'x');
    const again = await api('DELETE', '/api/threads/abyss');
    assert.equal(again.status, 200, again.text);
    assert.equal(fs.existsSync(dir), false);
    const leftovers = fs.readdirSync(path.join(srv.home, 'users', admin.id, 'threads')).filter((n) => n.startsWith('.deleted-'));
    assert.deepEqual(leftovers, []);
    assert.equal((await api('GET', '/api/threads/abyss')).status, 404);
  });

  it('50 concurrent creates of distinct ids all succeed and all show up in search', async () => {
    const ids = Array.from({ length: 50 }, (_, i) => `conc-${i}`);
    const results = await Promise.all(ids.map((id) => api('POST', '/api/threads', { thread_id: id, metadata: { batch: 'conc' } })));
    for (const [i, r] of results.entries()) assert.equal(r.status, 200, `${ids[i]}: ${r.status} ${r.text}`);
    const found = await api('POST', '/api/threads/search', { metadata: { batch: 'conc' }, limit: 1000 });
    assert.deepEqual(found.json.map((t) => t.thread_id).sort(), [...ids].sort());
    for (const id of ids) assert.ok(fs.existsSync(srv.userData(admin.id, id)), id);
  });

  it('a state update stores only messages a run can send, and names the first that is not', async () => {
    assert.equal((await api('POST', '/api/threads', { thread_id: 'shaped' })).status, 200);
    const bad = [
      [{ type: 'tool', content: 'x' }, 'values.messages[0].tool_call_id'],
      [{ type: 'remove', content: 'x' }, 'values.messages[0]: type must be'],
      [{ type: 'ai', content: '', tool_calls: [{ id: 'c1', args: {} }] }, 'values.messages[0].tool_calls'],
      [{ type: 'human', content: 7 }, 'values.messages[0].content'],
    ];
    for (const [message, why] of bad) {
      const r = await api('POST', '/api/threads/shaped/state', { values: { messages: [message] } });
      assert.equal(r.status, 422, r.text);
      assert.match(r.json.detail, new RegExp(why.replace(/[[\].]/g, '\\$&')));
    }
    assert.equal((await api('GET', '/api/threads/shaped/state')).json.values.messages?.length ?? 0, 0);
    const good = [
      { type: 'human', content: 'hi', id: 'h1' },
      { type: 'ai', content: '', id: 'a1', tool_calls: [{ id: 'c1', name: 'bash', args: {} }] },
      { type: 'tool', content: 'ok', id: 't1', tool_call_id: 'c1' },
    ];
    const ok = await api('POST', '/api/threads/shaped/state', { values: { messages: good } });
    assert.equal(ok.status, 200, ok.text);
    const state = await api('GET', '/api/threads/shaped/state');
    assert.deepEqual(state.json.values.messages.map((m) => m.id), ['h1', 'a1', 't1']);
  });

  it('concurrent creates of one id give one thread', async () => {
    const results = await Promise.all(Array.from({ length: 10 }, () => api('POST', '/api/threads', { thread_id: 'race', metadata: { r: 1 } })));
    for (const r of results) assert.equal(r.status, 200, r.text);
    assert.equal(new Set(results.map((r) => r.json.created_at)).size, 1);
    const found = await api('POST', '/api/threads/search', { metadata: { r: 1 } });
    assert.equal(found.json.length, 1);
  });
});
