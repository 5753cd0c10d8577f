// Two gateways on one PostgreSQL database (run under
// scripts/pg-test-server.sh): sign-in throttling and API-token checks hold
// across them. Each gateway has its own home (and so its own config.yaml);
// they share the database and the session secret, as gateways behind one
// load balancer do.
//
// A revocation made on one gateway returns only once every other gateway's
// watcher has seen it (docs/http-api.md, "Several gateways"): the other
// gateway refuses on the very next request.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from './lib/test.mjs';

import {
  ADMIN_NAME,
  ADMIN_PASSWORD,
  FawnServer,
  createToken,
  login,
  request,
  setupAdmin,
} from './lib/server.mjs';
import { pgDatabase } from './lib/pg.mjs';

describe('two gateways on one PostgreSQL: auth', () => {
  let a, b, admin;

  before(async () => {
    const dsn = pgDatabase('cluster_auth');
    const env = { FAWN_JWT_SECRET: randomBytes(32).toString('hex') };
    const config = (id) => ({ store: { backend: 'postgres', postgres: { dsn } }, cluster: { gateway_id: id } });
    a = await FawnServer.start(config('gw-a'), { env });
    b = await FawnServer.start(config('gw-b'), { env });
    admin = await setupAdmin(a);
  });

  after(async () => {
    await a?.stop();
    await b?.stop();
  });

  it('failed sign-ins spread over both gateways lock the address out on both', async () => {
    const from = { localAddress: '127.0.0.5' };
    for (let i = 0; i < 5; i++) {
      const { res } = await login(i % 2 ? b : a, ADMIN_NAME, `wrong password ${i}`, from);
      assert.equal(res.status, 401, `attempt ${i + 1} (${i % 2 ? 'b' : 'a'}): ${res.text}`);
    }
    for (const [name, gw] of [
      ['a', a],
      ['b', b],
    ]) {
      const { res, jar } = await login(gw, ADMIN_NAME, ADMIN_PASSWORD, from);
      assert.equal(res.status, 429, `${name}: ${res.text}`);
      const retry = Number(res.headers['retry-after']);
      assert.ok(Number.isInteger(retry) && retry > 0 && retry <= 300, `${name}: Retry-After ${res.headers['retry-after']}`);
      assert.equal(jar.get('access_token'), undefined);
    }
    // Another address is not affected, on either gateway.
    for (const gw of [a, b]) {
      const { res } = await login(gw, ADMIN_NAME, ADMIN_PASSWORD, { localAddress: '127.0.0.6' });
      assert.equal(res.status, 200, res.text);
    }
  });

  it('a token revoked on one gateway is refused by the other on the very next request', async () => {
    for (let round = 0; round < 3; round++) {
      const token = await createToken(a, admin.jar, `cluster-${round}`);
      const list = await request(a, 'GET', '/api/v1/auth/tokens', { jar: admin.jar });
      const id = list.json.tokens.find((t) => t.name === `cluster-${round}`).id;
      // B verifies it and keeps it in its cache (the second answer is from memory).
      for (let i = 0; i < 2; i++) {
        const me = await request(b, 'GET', '/api/v1/auth/me', { bearer: token });
        assert.equal(me.status, 200, me.text);
      }
      const del = await request(a, 'DELETE', `/api/v1/auth/tokens/${id}`, { bearer: token });
      assert.equal(del.status, 200, del.text);
      const after = await request(b, 'GET', '/api/v1/auth/me', { bearer: token });
      assert.equal(after.status, 401, `round ${round}: ${after.text}`);
      assert.equal(after.json.detail.code, 'token_invalid');
    }
  });

  it('a new password set on one gateway ends the sessions the other holds', async () => {
    const jar = (await login(a, ADMIN_NAME, ADMIN_PASSWORD)).jar;
    for (let i = 0; i < 2; i++) {
      const me = await request(b, 'GET', '/api/v1/auth/me', { jar: admin.jar });
      assert.equal(me.status, 200, 'B accepts a session A signed (one secret)');
    }
    const pw = await request(a, 'POST', '/api/v1/auth/change-password', {
      jar,
      csrf: true,
      body: { current_password: ADMIN_PASSWORD, new_password: 'a new cluster password' },
    });
    assert.equal(pw.status, 200, pw.text);
    const stale = await request(b, 'GET', '/api/v1/auth/me', { jar: admin.jar });
    assert.equal(stale.status, 401, stale.text);
  });
});
