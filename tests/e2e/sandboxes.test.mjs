// GET /api/sandboxes (admins only) and `fawn sandbox ls` against a running
// gateway: both show the sandbox manager's view.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { FawnServer, request, runFawn, setupAdmin, setupUser } from './lib/server.mjs';

describe('sandbox observability', () => {
  let srv;
  let admin;
  let user;

  before(async () => {
    srv = await FawnServer.start();
    admin = await setupAdmin(srv);
    user = await setupUser(srv, 'plain-user');
  });
  after(async () => {
    await srv?.stop();
  });

  it('lists the manager\'s sandboxes to an admin', async () => {
    const r = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    assert.equal(r.status, 200, r.text);
    assert.ok(Array.isArray(r.json.sandboxes));
  });

  it('refuses everyone else', async () => {
    const r = await request(srv, 'GET', '/api/sandboxes', { bearer: user.token });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.detail, 'Permission denied: sandboxes:read');
    const anonymous = await request(srv, 'GET', '/api/sandboxes');
    assert.equal(anonymous.status, 401);
  });

  it('fawn sandbox ls asks the running gateway', async () => {
    const r = await runFawn(['sandbox', 'ls', '--config', srv.configPath], { home: srv.home });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^SANDBOX\s+USER\s+THREAD\s+GENERATION\s+STATE/);
    assert.doesNotMatch(r.stderr, /no gateway answered/);
  });
});
