// CSRF double-submit on cookie sessions, the Origin check of the sign-in
// routes, and API tokens (create, list, use, revoke, owner scoping).
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import {
  ADMIN_NAME,
  ADMIN_PASSWORD,
  CookieJar,
  FawnServer,
  form,
  initAdmin,
  request,
  setupUser,
  signIn,
} from './lib/server.mjs';

describe('CSRF and API tokens', () => {
  let srv;
  let jar; // the admin's cookie session
  let tid; // a thread of the admin's

  before(async () => {
    srv = await FawnServer.start();
    const init = await initAdmin(srv);
    assert.equal(init.res.status, 201, init.res.text);
    jar = init.jar;
    const t = await request(srv, 'POST', '/api/threads', { jar, csrf: true, body: { thread_id: 'csrf-thread' } });
    assert.equal(t.status, 200, t.text);
    tid = t.json.thread_id;
  });
  after(async () => {
    await srv?.stop();
  });

  // Every state-changing route family, as a cookie session would call it.
  const stateChanging = () => [
    ['POST', '/api/threads', { thread_id: 'csrf-new' }],
    ['PATCH', `/api/threads/${tid}`, { metadata: { touched: true } }],
    ['DELETE', `/api/threads/${tid}`, undefined],
    ['PUT', `/api/threads/${tid}/artifacts/mnt/user-data/outputs/x.txt`, { content: 'x', expected_sha256: '0'.repeat(64) }],
    ['POST', '/api/v1/auth/tokens', { name: 'via-csrf' }],
    ['POST', '/api/v1/auth/change-password', { current_password: ADMIN_PASSWORD, new_password: 'changed by csrf!' }],
  ];

  it('a cookie-authenticated POST/PATCH/DELETE/PUT without X-CSRF-Token is 403 "CSRF token missing"', async () => {
    for (const [method, p, body] of stateChanging()) {
      const res = await request(srv, method, p, { jar, body });
      assert.equal(res.status, 403, `${method} ${p}: ${res.status} ${res.text}`);
      assert.equal(res.json.detail, 'CSRF token missing', `${method} ${p}`);
    }
    // Nothing happened: the thread is untouched and still there.
    const t = await request(srv, 'GET', `/api/threads/${tid}`, { jar });
    assert.equal(t.status, 200);
    assert.deepEqual(t.json.metadata, {});
    const created = await request(srv, 'GET', '/api/threads/csrf-new', { jar });
    assert.equal(created.status, 404);
  });

  it('an empty header, or a header without the cookie, is "CSRF token missing"', async () => {
    const empty = await request(srv, 'POST', '/api/threads', { jar, body: {}, headers: { 'X-CSRF-Token': '' } });
    assert.equal(empty.status, 403);
    assert.equal(empty.json.detail, 'CSRF token missing');
    const noCookie = new CookieJar();
    noCookie.set('access_token', jar.get('access_token'));
    const res = await request(srv, 'POST', '/api/threads', {
      jar: noCookie,
      body: {},
      headers: { 'X-CSRF-Token': jar.get('csrf_token') },
    });
    assert.equal(res.status, 403);
    assert.equal(res.json.detail, 'CSRF token missing');
  });

  it('a wrong X-CSRF-Token is 403 "CSRF token mismatch"', async () => {
    const real = jar.get('csrf_token');
    const wrongs = [
      real.slice(0, -1) + (real.endsWith('0') ? '1' : '0'), // same length, one digit off
      real + '00', // longer
      real.slice(0, 10), // a prefix
      'x',
    ];
    for (const [method, p, body] of stateChanging()) {
      for (const wrong of wrongs) {
        const res = await request(srv, method, p, { jar, body, headers: { 'X-CSRF-Token': wrong } });
        assert.equal(res.status, 403, `${method} ${p} with ${wrong}`);
        assert.equal(res.json.detail, 'CSRF token mismatch');
      }
    }
  });

  it('the csrf cookie of another session does not pass either', async () => {
    const other = await signIn(srv, ADMIN_NAME, ADMIN_PASSWORD);
    const res = await request(srv, 'POST', '/api/threads', {
      jar,
      body: {},
      headers: { 'X-CSRF-Token': other.get('csrf_token') },
    });
    assert.equal(res.status, 403);
    assert.equal(res.json.detail, 'CSRF token mismatch');
  });

  it('the correct X-CSRF-Token passes', async () => {
    const patch = await request(srv, 'PATCH', `/api/threads/${tid}`, { jar, csrf: true, body: { metadata: { ok: 1 } } });
    assert.equal(patch.status, 200, patch.text);
    assert.deepEqual(patch.json.metadata, { ok: 1 });
    const post = await request(srv, 'POST', '/api/threads', { jar, csrf: true, body: { thread_id: 'csrf-ok' } });
    assert.equal(post.status, 200, post.text);
    const del = await request(srv, 'DELETE', '/api/threads/csrf-ok', { jar, csrf: true });
    assert.equal(del.status, 200, del.text);
  });

  it('reads need no CSRF token', async () => {
    const res = await request(srv, 'GET', `/api/threads/${tid}`, { jar });
    assert.equal(res.status, 200);
  });

  it('login, register, initialize and logout refuse a cross-site Origin (403)', async () => {
    const evil = { Origin: 'https://evil.example' };
    const loginRes = await request(srv, 'POST', '/api/v1/auth/login/local', {
      body: form({ username: ADMIN_NAME, password: ADMIN_PASSWORD }),
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', ...evil },
    });
    assert.equal(loginRes.status, 403, loginRes.text);
    assert.equal(loginRes.headers['set-cookie'], undefined);
    for (const origin of ['null', `http://127.0.0.1:${srv.port + 1}`, `http://localhost:${srv.port}`, `ftp://127.0.0.1:${srv.port}`]) {
      const r = await request(srv, 'POST', '/api/v1/auth/login/local', {
        body: form({ username: ADMIN_NAME, password: ADMIN_PASSWORD }),
        headers: { 'Content-Type': 'application/x-www-form-urlencoded', Origin: origin },
      });
      assert.equal(r.status, 403, `Origin ${origin}`);
    }
    const init = await request(srv, 'POST', '/api/v1/auth/initialize', {
      body: { email: 'x@example.com', password: 'long enough password' },
      headers: evil,
    });
    assert.equal(init.status, 403);
    const reg = await request(srv, 'POST', '/api/v1/auth/register', {
      body: { email: 'y@example.com', password: 'long enough password' },
      headers: evil,
    });
    assert.ok(reg.status === 403, `register: ${reg.status}`);
    const j = jar.clone();
    const out = await request(srv, 'POST', '/api/v1/auth/logout', { jar: j, headers: evil });
    assert.equal(out.status, 403);
    assert.ok(j.get('access_token'), 'a refused logout clears nothing');
  });

  it('login from the same Origin works', async () => {
    const res = await request(srv, 'POST', '/api/v1/auth/login/local', {
      body: form({ username: ADMIN_NAME, password: ADMIN_PASSWORD }),
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://127.0.0.1:${srv.port}` },
    });
    assert.equal(res.status, 200, res.text);
  });

  // ---- API tokens ----

  let token;
  let tokenId;

  it('creating a token shows it once, starting with fawn_', async () => {
    const res = await request(srv, 'POST', '/api/v1/auth/tokens', { jar, csrf: true, body: { name: 'ci-script' } });
    assert.equal(res.status, 201, res.text);
    assert.match(res.json.token, /^fawn_[0-9a-f]{64}$/);
    assert.equal(res.json.name, 'ci-script');
    assert.equal(typeof res.json.id, 'number');
    assert.equal(res.json.last_used_at, null);
    token = res.json.token;
    tokenId = res.json.id;
    const second = await request(srv, 'POST', '/api/v1/auth/tokens', { jar, csrf: true, body: { name: 'ci-script' } });
    assert.equal(second.status, 201);
    assert.notEqual(second.json.token, token, 'every token is new');
  });

  it('a token needs a name (400)', async () => {
    for (const body of [{}, { name: '' }, { name: 5 }, { name: 'x', scope: 'all' }, { name: 'a\u0001b' }, { name: 'line\nbreak' }, { name: 'n'.repeat(129) }]) {
      const res = await request(srv, 'POST', '/api/v1/auth/tokens', { jar, csrf: true, body });
      assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.status} ${res.text}`);
    }
  });

  it('listing tokens never shows their values', async () => {
    const res = await request(srv, 'GET', '/api/v1/auth/tokens', { jar });
    assert.equal(res.status, 200);
    assert.ok(Array.isArray(res.json.tokens) && res.json.tokens.length >= 2);
    for (const t of res.json.tokens) {
      assert.deepEqual(Object.keys(t).sort(), ['created_at', 'id', 'last_used_at', 'name']);
    }
    assert.ok(!res.text.includes('fawn_'), 'no token value in the listing');
  });

  it('a token works as a Bearer without CSRF, and records its use', async () => {
    const me = await request(srv, 'GET', '/api/v1/auth/me', { bearer: token });
    assert.equal(me.status, 200);
    assert.equal(me.json.email, ADMIN_NAME);
    const post = await request(srv, 'POST', '/api/threads', { bearer: token, body: { thread_id: 'by-token' } });
    assert.equal(post.status, 200, post.text);
    const patch = await request(srv, 'PATCH', '/api/threads/by-token', { bearer: token, body: { metadata: { t: 1 } } });
    assert.equal(patch.status, 200, patch.text);
    const del = await request(srv, 'DELETE', '/api/threads/by-token', { bearer: token });
    assert.equal(del.status, 200, del.text);
    const lower = await request(srv, 'GET', '/api/v1/auth/me', { headers: { Authorization: `bearer ${token}` } });
    assert.equal(lower.status, 200, 'the scheme is case-insensitive');
    const list = await request(srv, 'GET', '/api/v1/auth/tokens', { jar });
    const mine = list.json.tokens.find((t) => t.id === tokenId);
    assert.ok(mine.last_used_at, 'last_used_at is set after use');
  });

  it('an unknown fawn_ token is 401 token_invalid', async () => {
    const res = await request(srv, 'GET', '/api/v1/auth/me', { bearer: `fawn_${'0'.repeat(64)}` });
    assert.equal(res.status, 401);
    assert.equal(res.json.detail.code, 'token_invalid');
    const cut = await request(srv, 'GET', '/api/v1/auth/me', { bearer: token.slice(0, -1) });
    assert.equal(cut.status, 401);
  });

  it('another user cannot revoke my token (404), and it keeps working', async () => {
    const bob = await setupUser(srv, 'bob');
    const res = await request(srv, 'DELETE', `/api/v1/auth/tokens/${tokenId}`, { bearer: bob.token });
    assert.equal(res.status, 404, res.text);
    const viaCookie = await request(srv, 'DELETE', `/api/v1/auth/tokens/${tokenId}`, { jar: bob.jar, csrf: true });
    assert.equal(viaCookie.status, 404);
    const bobList = await request(srv, 'GET', '/api/v1/auth/tokens', { bearer: bob.token });
    assert.ok(!bobList.json.tokens.some((t) => t.id === tokenId), "bob does not see the admin's tokens");
    const still = await request(srv, 'GET', '/api/v1/auth/me', { bearer: token });
    assert.equal(still.status, 200);
    assert.equal(still.json.email, ADMIN_NAME);
  });

  it('ids that are not token ids are 404', async () => {
    for (const id of ['abc', '-1', '0', '99999', '1e3', '%31']) {
      const res = await request(srv, 'DELETE', `/api/v1/auth/tokens/${id}`, { jar, csrf: true });
      assert.equal(res.status, 404, `id ${id}: ${res.status}`);
    }
  });

  it('a revoked token is 401', async () => {
    const res = await request(srv, 'DELETE', `/api/v1/auth/tokens/${tokenId}`, { jar, csrf: true });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.success, true);
    const me = await request(srv, 'GET', '/api/v1/auth/me', { bearer: token });
    assert.equal(me.status, 401);
    assert.equal(me.json.detail.code, 'token_invalid');
    const again = await request(srv, 'DELETE', `/api/v1/auth/tokens/${tokenId}`, { jar, csrf: true });
    assert.equal(again.status, 404, 'revoking twice is 404');
  });

  it('a session token as a Bearer is checked like the cookie', async () => {
    const me = await request(srv, 'GET', '/api/v1/auth/me', { bearer: jar.get('access_token') });
    assert.equal(me.status, 200);
  });
});
