// auth.disabled: a development mode where every request acts as one local
// admin. A browser page of another site must still not drive it, and the
// mode is refused when FAWN_ENV=production.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, freePort, makeHome, multipart, request, runFawn, sanitizerReport, toYaml } from './lib/server.mjs';

describe('auth.disabled', () => {
  let srv;

  before(async () => {
    srv = await FawnServer.start({ auth: { disabled: true } });
  });
  after(async () => {
    await srv?.stop();
  });

  it('acts as the local admin without signing in', async () => {
    const me = await request(srv, 'GET', '/api/v1/auth/me');
    assert.equal(me.status, 200, me.text);
    assert.equal(me.json.system_role, 'admin');
    assert.equal(me.json.username, 'local-admin');
    assert.equal(me.json.email, 'local-admin@fawn.invalid', 'a well-formed address that never delivers');
  });

  it('threads, uploads and artifacts work without a session or CSRF token', async () => {
    const t = await request(srv, 'POST', '/api/threads', { body: { thread_id: 'dev-thread', metadata: { a: 1 } } });
    assert.equal(t.status, 200, t.text);
    const patch = await request(srv, 'PATCH', '/api/threads/dev-thread', { body: { metadata: { b: 2 } } });
    assert.equal(patch.status, 200, patch.text);
    assert.deepEqual(patch.json.metadata, { a: 1, b: 2 });
    const fd = new FormData();
    fd.append('files', new Blob(['dev bytes']), 'dev.txt');
    const up = await fetch(`${srv.base}/api/threads/dev-thread/uploads`, { method: 'POST', body: fd });
    assert.equal(up.status, 200, await up.clone().text());
    const art = await request(srv, 'GET', '/api/threads/dev-thread/artifacts/mnt/user-data/uploads/dev.txt');
    assert.equal(art.status, 200);
    assert.equal(art.text, 'dev bytes');
    const search = await request(srv, 'POST', '/api/threads/search', { body: {} });
    assert.equal(search.status, 200);
    assert.ok(search.json.some((x) => x.thread_id === 'dev-thread'));
    const del = await request(srv, 'DELETE', '/api/threads/dev-thread');
    assert.equal(del.status, 200, del.text);
  });

  it('refuses a cross-origin state-changing request (403) and does nothing', async () => {
    const evil = { Origin: 'https://evil.example' };
    const post = await request(srv, 'POST', '/api/threads', { body: { thread_id: 'evil-thread' }, headers: evil });
    assert.equal(post.status, 403, post.text);
    assert.match(post.json.detail, /cross-origin/i);
    const gone = await request(srv, 'GET', '/api/threads/evil-thread');
    assert.equal(gone.status, 404, 'the thread was not created');

    const t = await request(srv, 'POST', '/api/threads', { body: { thread_id: 'victim', metadata: { v: 1 } } });
    assert.equal(t.status, 200);
    const patch = await request(srv, 'PATCH', '/api/threads/victim', { body: { metadata: { v: 2 } }, headers: evil });
    assert.equal(patch.status, 403);
    const del = await request(srv, 'DELETE', '/api/threads/victim', { headers: evil });
    assert.equal(del.status, 403);
    const mp = multipart([{ filename: 'evil.txt', content: 'x' }]);
    const up = await request(srv, 'POST', '/api/threads/victim/uploads', {
      body: mp.body,
      headers: { ...evil, 'Content-Type': mp.contentType },
    });
    assert.equal(up.status, 403);
    const tok = await request(srv, 'POST', '/api/v1/auth/tokens', { body: { name: 'stolen' }, headers: evil });
    assert.equal(tok.status, 403);
    const after = await request(srv, 'GET', '/api/threads/victim', { headers: evil });
    assert.equal(after.status, 200, 'reads are not state-changing');
    assert.deepEqual(after.json.metadata, { v: 1 });
    const list = await request(srv, 'GET', '/api/threads/victim/uploads/list');
    assert.equal(list.json.count, 0);
  });

  it('initialize is 409 and change-password is 400 invalid_credentials (the local admin has no password)', async () => {
    const init = await request(srv, 'POST', '/api/v1/auth/initialize', { body: { email: 'x@example.com', password: 'long enough password' } });
    assert.equal(init.status, 409);
    assert.equal(init.json.detail.code, 'system_already_initialized');
    const change = await request(srv, 'POST', '/api/v1/auth/change-password', {
      body: { current_password: '!no-password', new_password: 'a brand new password' },
      localAddress: '127.0.0.11',
    });
    assert.equal(change.status, 400, change.text);
    assert.equal(change.json.detail.code, 'invalid_credentials');
    const login = await request(srv, 'POST', '/api/v1/auth/login/local', {
      body: 'username=local-admin&password=%21no-password',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      localAddress: '127.0.0.11',
    });
    assert.equal(login.status, 401, 'nobody signs in as local-admin');
  });

  it('accepts a same-origin state-changing request', async () => {
    const res = await request(srv, 'PATCH', '/api/threads/victim', {
      body: { metadata: { v: 3 } },
      headers: { Origin: `http://127.0.0.1:${srv.port}` },
    });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json.metadata, { v: 3 });
  });
});

describe('auth.disabled with FAWN_ENV=production', () => {
  it('fawn serve refuses to start, naming production', async () => {
    const home = makeHome();
    try {
      const cfg = path.join(home, 'config.yaml');
      fs.writeFileSync(cfg, toYaml({ server: { host: '127.0.0.1', port: await freePort(), threads: 2 }, auth: { disabled: true } }));
      const r = await runFawn(['serve', '--config', cfg], { home, env: { FAWN_ENV: 'production' }, timeoutMs: 15000 });
      assert.equal(r.signal, null, `serve was killed (${r.signal}): it did not refuse\n${r.stderr}`);
      assert.notEqual(r.code, 0);
      assert.match(r.stderr, /production/);
      assert.ok(!sanitizerReport(r.stderr), r.stderr);
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
  });
});
