// Authentication: first admin, sign-in, throttling, sign-out, password
// changes, registration, session tokens and how unknown routes answer.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import {
  ADMIN_NAME,
  ADMIN_PASSWORD,
  CookieJar,
  FawnServer,
  createToken,
  form,
  freePort,
  initAdmin,
  login,
  makeHome,
  parseSetCookie,
  request,
  runFawn,
  sanitizerReport,
  signIn,
  toYaml,
} from './lib/server.mjs';

const SESSION_TTL_S = 604800; // auth.session_ttl_s default

function b64urlJson(obj) {
  return Buffer.from(JSON.stringify(obj)).toString('base64url');
}

describe('auth (registration disabled, the default)', () => {
  let srv;
  let adminJar;

  before(async () => {
    srv = await FawnServer.start();
  });
  after(async () => {
    await srv?.stop();
  });

  it('setup-status says setup is needed before the first admin exists', async () => {
    const res = await request(srv, 'GET', '/api/v1/auth/setup-status');
    assert.equal(res.status, 200);
    assert.deepEqual(res.json, { needs_setup: true, registration_enabled: false });
  });

  it('initialize creates the first admin with session cookies (201)', async () => {
    const { res, jar } = await initAdmin(srv);
    assert.equal(res.status, 201, res.text);
    assert.equal(res.json.system_role, 'admin');
    assert.equal(res.json.email, ADMIN_NAME);
    assert.equal(typeof res.json.id, 'string');
    assert.ok(!('password' in res.json) && !('password_hash' in res.json));
    const setCookie = res.headers['set-cookie'];
    const access = parseSetCookie(setCookie, 'access_token');
    const csrf = parseSetCookie(setCookie, 'csrf_token');
    assert.ok(access && access.value.split('.').length === 3, 'access_token is a JWT');
    assert.equal(access.attrs.get('httponly'), true, 'access_token is HttpOnly');
    assert.equal(access.attrs.get('samesite'), 'Lax');
    assert.equal(access.attrs.get('path'), '/');
    assert.equal(access.attrs.get('max-age'), String(SESSION_TTL_S));
    assert.ok(!access.attrs.has('secure'), 'no Secure unless auth.cookie_secure');
    assert.ok(csrf && /^[0-9a-f]{64}$/.test(csrf.value), 'csrf_token is random hex');
    assert.ok(!csrf.attrs.has('httponly'), 'csrf_token is readable by the page');
    assert.equal(csrf.attrs.get('samesite'), 'Strict');
    adminJar = jar;
    const me = await request(srv, 'GET', '/api/v1/auth/me', { jar });
    assert.equal(me.status, 200);
    assert.equal(me.json.username, ADMIN_NAME);
  });

  it('setup-status no longer asks for setup', async () => {
    const res = await request(srv, 'GET', '/api/v1/auth/setup-status');
    assert.equal(res.status, 200);
    assert.equal(res.json.needs_setup, false);
  });

  it('a second initialize is 409 system_already_initialized and signs nobody in', async () => {
    const { res, jar } = await initAdmin(srv, 'intruder@example.com', 'another long password');
    assert.equal(res.status, 409, res.text);
    assert.equal(res.json.detail.code, 'system_already_initialized');
    assert.equal(jar.get('access_token'), undefined);
    const again = await initAdmin(srv); // same name as the real admin
    assert.equal(again.res.status, 409);
  });

  it('login/local with form fields returns expires_in and sets both cookies', async () => {
    const { res, jar } = await login(srv, ADMIN_NAME, ADMIN_PASSWORD);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.expires_in, SESSION_TTL_S);
    assert.equal(res.json.needs_setup, false);
    assert.ok(parseSetCookie(res.headers['set-cookie'], 'access_token').attrs.get('httponly'));
    assert.ok(jar.get('access_token') && jar.get('csrf_token'));
    assert.notEqual(jar.get('csrf_token'), adminJar.get('csrf_token'), 'each sign-in gets a fresh csrf token');
    const me = await request(srv, 'GET', '/api/v1/auth/me', { jar });
    assert.equal(me.status, 200);
    assert.equal(me.json.system_role, 'admin');
  });

  it('login accepts the username in any case, and a JSON body', async () => {
    const upper = await login(srv, ADMIN_NAME.toUpperCase(), ADMIN_PASSWORD);
    assert.equal(upper.res.status, 200, upper.res.text);
    const res = await request(srv, 'POST', '/api/v1/auth/login/local', {
      body: { username: ADMIN_NAME, password: ADMIN_PASSWORD },
    });
    assert.equal(res.status, 200, res.text);
  });

  it('a wrong password and an unknown user get the same 401 invalid_credentials', async () => {
    const from = { localAddress: '127.0.0.2' };
    const wrong = await login(srv, ADMIN_NAME, 'not the password at all', from);
    const unknown = await login(srv, 'nobody@example.com', 'not the password at all', from);
    assert.equal(wrong.res.status, 401);
    assert.equal(wrong.res.json.detail.code, 'invalid_credentials');
    assert.equal(unknown.res.status, wrong.res.status);
    assert.deepEqual(unknown.res.json, wrong.res.json);
    assert.equal(wrong.jar.get('access_token'), undefined);
    assert.equal(wrong.res.headers['set-cookie'], undefined);
  });

  it('after 5 failures the 6th attempt is 429 with Retry-After, even with the right password', async () => {
    const from = { localAddress: '127.0.0.3' };
    for (let i = 0; i < 5; i++) {
      const { res } = await login(srv, ADMIN_NAME, `wrong password ${i}`, from);
      assert.equal(res.status, 401, `attempt ${i + 1}`);
    }
    const { res, jar } = await login(srv, ADMIN_NAME, ADMIN_PASSWORD, from);
    assert.equal(res.status, 429, res.text);
    const retry = Number(res.headers['retry-after']);
    assert.ok(Number.isInteger(retry) && retry > 0 && retry <= 300, `Retry-After ${res.headers['retry-after']}`);
    assert.equal(jar.get('access_token'), undefined);
    // A locked-out address cannot try passwords through change-password either.
    const change = await request(srv, 'POST', '/api/v1/auth/change-password', {
      jar: adminJar,
      csrf: true,
      localAddress: '127.0.0.3',
      body: { current_password: ADMIN_PASSWORD, new_password: 'locked out new password' },
    });
    assert.equal(change.status, 429, change.text);
    assert.ok(Number(change.headers['retry-after']) > 0);
    // The lockout is per client address: this one still signs in.
    const other = await login(srv, ADMIN_NAME, ADMIN_PASSWORD);
    assert.equal(other.res.status, 200);
    const me = await request(srv, 'GET', '/api/v1/auth/me', { jar: adminJar });
    assert.equal(me.status, 200, 'the refused change changed nothing');
  });

  it('logout clears both cookies', async () => {
    const jar = await signIn(srv, ADMIN_NAME, ADMIN_PASSWORD);
    const res = await request(srv, 'POST', '/api/v1/auth/logout', { jar });
    assert.equal(res.status, 200, res.text);
    for (const name of ['access_token', 'csrf_token']) {
      const c = parseSetCookie(res.headers['set-cookie'], name);
      assert.ok(c, `${name} is cleared`);
      assert.equal(c.value, '');
      assert.equal(c.attrs.get('max-age'), '0');
    }
    assert.equal(jar.cookies.size, 0);
    const me = await request(srv, 'GET', '/api/v1/auth/me', { jar });
    assert.equal(me.status, 401);
    assert.equal(me.json.detail.code, 'not_authenticated');
  });

  it('me describes the signed-in user', async () => {
    const res = await request(srv, 'GET', '/api/v1/auth/me', { jar: adminJar });
    assert.equal(res.status, 200);
    assert.equal(res.json.email, ADMIN_NAME);
    assert.equal(res.json.system_role, 'admin');
    assert.equal(res.json.needs_setup, false);
  });

  it('change-password: a wrong current password is 400 invalid_credentials', async () => {
    const res = await request(srv, 'POST', '/api/v1/auth/change-password', {
      jar: adminJar,
      csrf: true,
      localAddress: '127.0.0.4',
      body: { current_password: 'not my password', new_password: 'a brand new password' },
    });
    assert.equal(res.status, 400, res.text);
    assert.equal(res.json.detail.code, 'invalid_credentials');
    const me = await request(srv, 'GET', '/api/v1/auth/me', { jar: adminJar });
    assert.equal(me.status, 200, 'a failed change keeps the session');
  });

  it('change-password refuses a common or short new password (400)', async () => {
    for (const bad of ['password123', 'short']) {
      const res = await request(srv, 'POST', '/api/v1/auth/change-password', {
        jar: adminJar,
        csrf: true,
        body: { current_password: ADMIN_PASSWORD, new_password: bad },
      });
      assert.equal(res.status, 400, `${bad}: ${res.text}`);
    }
  });

  it('change-password revokes the old session and hands out a new one', async () => {
    const oldJar = adminJar.clone();
    const newJar = adminJar.clone();
    const newPassword = 'the second admin password';
    const apiToken = await createToken(srv, adminJar, 'survives-password-change');
    const res = await request(srv, 'POST', '/api/v1/auth/change-password', {
      jar: newJar,
      csrf: true,
      body: { current_password: ADMIN_PASSWORD, new_password: newPassword },
    });
    assert.equal(res.status, 200, res.text);
    assert.notEqual(newJar.get('access_token'), oldJar.get('access_token'));
    const stale = await request(srv, 'GET', '/api/v1/auth/me', { jar: oldJar });
    assert.equal(stale.status, 401);
    assert.equal(stale.json.detail.code, 'token_invalid');
    const fresh = await request(srv, 'GET', '/api/v1/auth/me', { jar: newJar });
    assert.equal(fresh.status, 200);
    const bearerOld = await request(srv, 'GET', '/api/v1/auth/me', { bearer: oldJar.get('access_token') });
    assert.equal(bearerOld.status, 401, 'the old session token is revoked as a bearer too');
    const api = await request(srv, 'GET', '/api/v1/auth/me', { bearer: apiToken });
    assert.equal(api.status, 200, 'API tokens are not revoked by a password change');
    const oldPw = await login(srv, ADMIN_NAME, ADMIN_PASSWORD, { localAddress: '127.0.0.5' });
    assert.equal(oldPw.res.status, 401);
    const newPw = await login(srv, ADMIN_NAME, newPassword);
    assert.equal(newPw.res.status, 200);
    // Change it back so the rest of the file signs in as before.
    const back = await request(srv, 'POST', '/api/v1/auth/change-password', {
      jar: newJar,
      csrf: true,
      body: { current_password: newPassword, new_password: ADMIN_PASSWORD },
    });
    assert.equal(back.status, 200, back.text);
    adminJar = newJar;
  });

  it('register is 403 registration_disabled by default', async () => {
    const jar = new CookieJar();
    const res = await request(srv, 'POST', '/api/v1/auth/register', {
      body: { email: 'newcomer@example.com', password: 'a perfectly good password' },
      jar,
    });
    assert.equal(res.status, 403, res.text);
    assert.equal(res.json.detail.code, 'registration_disabled');
    assert.equal(jar.get('access_token'), undefined);
    const probe = await login(srv, 'newcomer@example.com', 'a perfectly good password', { localAddress: '127.0.0.6' });
    assert.equal(probe.res.status, 401, 'no account was created');
  });

  it('a tampered, forged or garbage session token is 401 token_invalid', async () => {
    const token = adminJar.get('access_token');
    const [h, p, sig] = token.split('.');
    const claims = JSON.parse(Buffer.from(p, 'base64url').toString());
    const cases = {
      'payload changed, signature kept': `${h}.${b64urlJson({ ...claims, sub: '2' })}.${sig}`,
      'expiry extended, signature kept': `${h}.${b64urlJson({ ...claims, exp: claims.exp + 1000 })}.${sig}`,
      'signature flipped': `${h}.${p}.${sig.slice(0, -2)}${sig.endsWith('AA') ? 'BB' : 'AA'}`,
      'alg none': `${b64urlJson({ alg: 'none', typ: 'JWT' })}.${p}.`,
      garbage: 'not-a-jwt',
    };
    for (const [what, forged] of Object.entries(cases)) {
      const jar = new CookieJar();
      jar.set('access_token', forged);
      const res = await request(srv, 'GET', '/api/v1/auth/me', { jar });
      assert.equal(res.status, 401, `${what}: ${res.text}`);
      assert.equal(res.json.detail.code, 'token_invalid', what);
      const bearer = await request(srv, 'GET', '/api/v1/auth/me', { bearer: forged });
      assert.equal(bearer.status, 401, `${what} as bearer`);
    }
  });

  it('no cookie is 401 not_authenticated', async () => {
    const res = await request(srv, 'GET', '/api/v1/auth/me');
    assert.equal(res.status, 401);
    assert.equal(res.json.detail.code, 'not_authenticated');
    const threads = await request(srv, 'POST', '/api/threads/search', { body: {} });
    assert.equal(threads.status, 401);
  });

  it('an unknown /api path is 401 without a session and 404 with one', async () => {
    const anon = await request(srv, 'GET', '/api/no-such-route');
    assert.equal(anon.status, 401);
    assert.equal(anon.json.detail.code, 'not_authenticated');
    const signed = await request(srv, 'GET', '/api/no-such-route', { jar: adminJar });
    assert.equal(signed.status, 404);
    const deep = await request(srv, 'GET', '/api/threads/x/y/z/nothing', { jar: adminJar });
    assert.equal(deep.status, 404);
  });

  it('an unknown path outside /api is 404 without a session', async () => {
    for (const p of ['/nothing-here', '/index.html', '/healthz', '/apix']) {
      const res = await request(srv, 'GET', p);
      assert.equal(res.status, 404, p);
    }
  });

  it('a known path with the wrong method is 405', async () => {
    const health = await request(srv, 'DELETE', '/health');
    assert.equal(health.status, 405);
    const threads = await request(srv, 'PUT', '/api/threads', { jar: adminJar, csrf: true, body: {} });
    assert.equal(threads.status, 405);
    const list = await request(srv, 'GET', '/api/threads', { jar: adminJar });
    assert.equal(list.status, 405);
    const tokens = await request(srv, 'PATCH', '/api/v1/auth/tokens', { jar: adminJar, csrf: true, body: {} });
    assert.equal(tokens.status, 405);
  });

  it('a sign-in path with the wrong method is 401 without a session (as every /api path), 405 with one', async () => {
    const anon = await request(srv, 'GET', '/api/v1/auth/login/local');
    assert.equal(anon.status, 401, anon.text);
    const signed = await request(srv, 'GET', '/api/v1/auth/login/local', { jar: adminJar });
    assert.equal(signed.status, 405, signed.text);
    for (const method of ['HEAD', 'OPTIONS']) {
      const res = await request(srv, method, '/health');
      assert.equal(res.status, 405, `${method} /health`);
    }
  });

  it('login refuses a malformed form (400) and never answers 500', async () => {
    const cases = [
      ['username=a%ZZ&password=x', 'bad escape'],
      ['username=a%00b&password=xxxxxxxxxx', 'NUL'],
      ['password=only', 'no username'],
      [`username=${'a'.repeat(20000)}&password=x`, 'too large'],
    ];
    for (const [body, what] of cases) {
      const res = await request(srv, 'POST', '/api/v1/auth/login/local', {
        body,
        headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
        localAddress: '127.0.0.7',
      });
      assert.ok(res.status >= 400 && res.status < 500, `${what}: ${res.status} ${res.text}`);
    }
  });
});

describe('auth (registration enabled)', () => {
  let srv;

  before(async () => {
    srv = await FawnServer.start({ auth: { registration_enabled: true, cookie_secure: true, session_ttl_s: 300 } });
  });
  after(async () => {
    await srv?.stop();
  });

  it('setup-status reports registration enabled', async () => {
    const res = await request(srv, 'GET', '/api/v1/auth/setup-status');
    assert.deepEqual(res.json, { needs_setup: true, registration_enabled: true });
  });

  it('register creates a user (201) and signs them in', async () => {
    const jar = new CookieJar();
    const res = await request(srv, 'POST', '/api/v1/auth/register', {
      body: { email: 'Alice@Example.com', password: 'alice has a long password' },
      jar,
    });
    assert.equal(res.status, 201, res.text);
    assert.equal(res.json.system_role, 'user');
    assert.ok(jar.get('access_token') && jar.get('csrf_token'));
    for (const name of ['access_token', 'csrf_token']) {
      const c = parseSetCookie(res.headers['set-cookie'], name);
      assert.equal(c.attrs.get('secure'), true, `${name} is Secure with auth.cookie_secure`);
      assert.equal(c.attrs.get('max-age'), '300', `${name} lasts auth.session_ttl_s`);
    }
    const claims = JSON.parse(Buffer.from(jar.get('access_token').split('.')[1], 'base64url').toString());
    assert.equal(claims.exp - claims.iat, 300);
    const me = await request(srv, 'GET', '/api/v1/auth/me', { jar });
    assert.equal(me.status, 200);
    assert.equal(me.json.email, 'Alice@Example.com');
    // A registered user is not an admin: setup is still needed.
    const status = await request(srv, 'GET', '/api/v1/auth/setup-status');
    assert.equal(status.json.needs_setup, true);
  });

  it('registering the same name in another case is 400 email_already_exists', async () => {
    const res = await request(srv, 'POST', '/api/v1/auth/register', {
      body: { email: 'alice@example.COM', password: 'somebody else entirely' },
    });
    assert.equal(res.status, 400, res.text);
    assert.equal(res.json.detail.code, 'email_already_exists');
    const orig = await login(srv, 'alice@example.com', 'alice has a long password');
    assert.equal(orig.res.status, 200, 'the first account keeps its password');
  });

  it('a short or common password is 400 and creates nobody', async () => {
    for (const password of ['short', '1234567', 'password123', 'PassWord1', '12345678']) {
      const res = await request(srv, 'POST', '/api/v1/auth/register', {
        body: { email: `weak-${password.length}-${password}@example.com`, password },
      });
      assert.equal(res.status, 400, `${password}: ${res.status} ${res.text}`);
      assert.equal(res.headers['set-cookie'], undefined);
    }
  });

  it('an invalid username or a missing field is 400', async () => {
    const bodies = [
      { email: 'has space@example.com', password: 'good long password' },
      { email: 'semi;colon', password: 'good long password' },
      { email: 'x@example.com' },
      { password: 'good long password' },
      { email: 'x@example.com', password: 'good long password', role: 'admin' },
    ];
    for (const body of bodies) {
      const res = await request(srv, 'POST', '/api/v1/auth/register', { body });
      assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.status} ${res.text}`);
    }
  });

  it('a registered user cannot make themselves admin through initialize once an admin exists', async () => {
    const first = await initAdmin(srv);
    assert.equal(first.res.status, 201);
    const second = await request(srv, 'POST', '/api/v1/auth/initialize', {
      body: { email: 'alice2@example.com', password: 'alice has a long password' },
    });
    assert.equal(second.status, 409);
  });

  it('login form with remember_me and extra fields still works', async () => {
    const res = await request(srv, 'POST', '/api/v1/auth/login/local', {
      body: form({ username: 'alice@example.com', password: 'alice has a long password', remember_me: 'true' }),
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.expires_in, 300);
  });
});

describe('session tokens signed with a known secret (FAWN_JWT_SECRET)', () => {
  const secretHex = 'a1'.repeat(32);
  const secret = Buffer.from(secretHex, 'hex');
  let srv;
  let adminId;

  function jwt(claims, { header = { alg: 'HS256', typ: 'JWT' }, key = secret, rawHeader } = {}) {
    const h = rawHeader ?? Buffer.from(JSON.stringify(header)).toString('base64url');
    const p = Buffer.from(JSON.stringify(claims)).toString('base64url');
    const mac = createHmac('sha256', key).update(`${h}.${p}`).digest('base64url');
    return `${h}.${p}.${mac}`;
  }

  const now = () => Math.floor(Date.now() / 1000);

  before(async () => {
    srv = await FawnServer.start({}, { env: { FAWN_JWT_SECRET: secretHex } });
  });
  after(async () => {
    await srv?.stop();
  });

  it('concurrent initialize calls create exactly one admin', async () => {
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => initAdmin(srv, `admin${i}@example.com`, `admin password number ${i}`)),
    );
    const created = results.filter((r) => r.res.status === 201);
    assert.equal(created.length, 1, results.map((r) => r.res.status).join(','));
    for (const r of results) if (r.res.status !== 201) assert.equal(r.res.json.detail.code, 'system_already_initialized');
    adminId = created[0].res.json.id;
    assert.equal(fs.existsSync(path.join(srv.home, 'jwt.secret')), false, 'the secret comes from the environment');
  });

  it('a token signed with the secret for the admin is accepted (the forging below is right)', async () => {
    const token = jwt({ sub: adminId, ver: 0, iat: now(), exp: now() + 600 });
    const res = await request(srv, 'GET', '/api/v1/auth/me', { bearer: token });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.id, adminId);
  });

  it('an expired token is 401 token_expired', async () => {
    const token = jwt({ sub: adminId, ver: 0, iat: now() - 1000, exp: now() - 10 });
    const jar = new CookieJar();
    jar.set('access_token', token);
    const res = await request(srv, 'GET', '/api/v1/auth/me', { jar });
    assert.equal(res.status, 401);
    assert.equal(res.json.detail.code, 'token_expired');
  });

  it('well-signed tokens with the wrong version, user, header or claim types are token_invalid', async () => {
    const good = { sub: adminId, ver: 0, iat: now(), exp: now() + 600 };
    const cases = {
      'another token version': jwt({ ...good, ver: 1 }),
      'a user that does not exist': jwt({ ...good, sub: '999' }),
      'sub as a number': jwt({ ...good, sub: Number(adminId) }),
      'sub zero': jwt({ ...good, sub: '0' }),
      'exp as a string': jwt({ ...good, exp: String(good.exp) }),
      'no exp': jwt({ sub: adminId, ver: 0, iat: now() }),
      'header keys reordered': jwt(good, { header: { typ: 'JWT', alg: 'HS256' } }),
      'alg HS512 header': jwt(good, { header: { alg: 'HS512', typ: 'JWT' } }),
      'alg none, signed anyway': jwt(good, { header: { alg: 'none', typ: 'JWT' } }),
      'another secret': jwt(good, { key: Buffer.alloc(32, 7) }),
      'four segments': `${jwt(good)}.x`,
    };
    for (const [what, token] of Object.entries(cases)) {
      const res = await request(srv, 'GET', '/api/v1/auth/me', { bearer: token });
      assert.equal(res.status, 401, `${what}: ${res.status} ${res.text}`);
      assert.equal(res.json.detail.code, 'token_invalid', what);
    }
    const huge = jwt({ ...good, pad: 'x'.repeat(5000) });
    const res = await request(srv, 'GET', '/api/v1/auth/me', { bearer: huge });
    assert.equal(res.status, 401, 'a token over 4096 bytes');
  });
});

describe('the session secret file', () => {
  async function serveWithSecretFile(prepare) {
    const home = makeHome();
    try {
      prepare(path.join(home, 'jwt.secret'));
      const cfg = path.join(home, 'config.yaml');
      fs.writeFileSync(cfg, toYaml({ server: { host: '127.0.0.1', port: await freePort(), threads: 2 } }));
      return await runFawn(['serve', '--config', cfg], { home, timeoutMs: 15000 });
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
  }

  it('serve refuses a secret readable by others, a symlinked one, or one of the wrong size', async () => {
    const cases = {
      'mode 0644': (p) => fs.writeFileSync(p, Buffer.alloc(32, 1), { mode: 0o644 }),
      symlink: (p) => {
        const target = `${p}.real`;
        fs.writeFileSync(target, Buffer.alloc(32, 1), { mode: 0o600 });
        fs.symlinkSync(target, p);
      },
      'wrong size': (p) => fs.writeFileSync(p, Buffer.alloc(16, 1), { mode: 0o600 }),
    };
    for (const [what, prepare] of Object.entries(cases)) {
      const r = await serveWithSecretFile(prepare);
      assert.equal(r.signal, null, `${what}: serve did not refuse\n${r.stderr}`);
      assert.notEqual(r.code, 0, what);
      assert.match(r.stderr, /jwt\.secret/, what);
      assert.ok(!sanitizerReport(r.stderr), r.stderr);
    }
  });
});
