// Sign-in throttling behind a reverse proxy: with server.trusted_proxies,
// the address the proxy forwards is what gets locked out, not the proxy;
// without it, X-Forwarded-For is never believed.
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

  it('does not believe X-Forwarded-For from an untrusted peer', async () => {
    /* 127.0.0.3 is not a trusted proxy: its forwarded address is ignored,
     * so its failures count against 127.0.0.3 itself. */
    for (let i = 0; i < FAILURES; i++) {
      assert.equal(await failFrom(srv, `198.51.100.${i}`, '127.0.0.3'), 401);
    }
    assert.equal(await failFrom(srv, '198.51.100.99', '127.0.0.3'), 429);
  });
});
