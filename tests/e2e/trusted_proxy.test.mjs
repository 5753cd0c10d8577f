// Sign-in behind a reverse proxy: with server.trusted_proxies, the address
// the proxy forwards is what gets locked out, not the proxy, and the host it
// forwards is what the Origin check compares with; from any other peer,
// X-Forwarded-For and X-Forwarded-Host are never believed.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { ADMIN_NAME, ADMIN_PASSWORD, FawnServer, initAdmin, login } from './lib/server.mjs';

const FAILURES = 5;

async function failFrom(srv, forwarded, localAddress) {
  const { res } = await login(srv, ADMIN_NAME, 'not the password', {
    headers: { 'X-Forwarded-For': forwarded },
    localAddress,
  });
  return res.status;
}

describe('sign-in throttling behind a trusted proxy', () => {
  let srv;

  before(async () => {
    srv = await FawnServer.start({ server: { trusted_proxies: ['127.0.0.1'] } });
    assert.equal((await initAdmin(srv)).res.status, 201);
  });
  after(async () => {
    await srv?.stop();
  });

  it('locks out the forwarded client, not the proxy', async () => {
    for (let i = 0; i < FAILURES; i++) assert.equal(await failFrom(srv, '203.0.113.5'), 401);
    assert.equal(await failFrom(srv, '203.0.113.5'), 429);
    /* Another client behind the same proxy can still sign in. */
    const ok = await login(srv, ADMIN_NAME, ADMIN_PASSWORD, { headers: { 'X-Forwarded-For': '203.0.113.6' } });
    assert.equal(ok.res.status, 200, ok.res.text);
  });

  it("takes the Origin check's host from X-Forwarded-Host of a trusted proxy only", async () => {
    /* A proxy on another port that rewrites Host, as a Next.js rewrite does. */
    const proxied = { Origin: 'http://localhost:3000', 'X-Forwarded-Host': 'localhost:3000' };
    const ok = await login(srv, ADMIN_NAME, ADMIN_PASSWORD, { headers: proxied });
    assert.equal(ok.res.status, 200, ok.res.text);
    const forged = { Origin: 'https://evil.example', 'X-Forwarded-Host': 'localhost:3000' };
    const evil = await login(srv, ADMIN_NAME, ADMIN_PASSWORD, { headers: forged });
    assert.equal(evil.res.status, 403, evil.res.text);
    const untrusted = await login(srv, ADMIN_NAME, ADMIN_PASSWORD, { headers: proxied, localAddress: '127.0.0.4' });
    assert.equal(untrusted.res.status, 403, untrusted.res.text);
    assert.match(untrusted.res.text, /Cross-origin request refused/);
  });

  it('does not believe X-Forwarded-For from an untrusted peer', async () => {
    /* 127.0.0.3 is not a trusted proxy: its forwarded address is ignored,
     * so its failures count against 127.0.0.3 itself. */
    for (let i = 0; i < FAILURES; i++) {
      assert.equal(await failFrom(srv, `198.51.100.${i}`, '127.0.0.3'), 401);
    }
    assert.equal(await failFrom(srv, '198.51.100.99', '127.0.0.3'), 429);
  });
});
