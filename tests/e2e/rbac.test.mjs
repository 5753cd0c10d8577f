// Role-based authorization of routes: a `user` role limited to
// threads:read, an unrestricted admin, and configurations serve refuses.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import {
  FawnServer,
  freePort,
  makeHome,
  multipart,
  request,
  runFawn,
  sanitizerReport,
  setupAdmin,
  setupUser,
  toYaml,
} from './lib/server.mjs';

const AUTHZ = {
  authorization: {
    enabled: true,
    fail_closed: true,
    default_role: 'user',
    roles: {
      admin: {},
      user: { routes: { allow: ['threads:read'] } },
    },
  },
};

describe('RBAC route permissions', () => {
  let srv;
  let admin;
  let user;

  before(async () => {
    srv = await FawnServer.start(AUTHZ);
    admin = await setupAdmin(srv);
    user = await setupUser(srv, 'reader');
  });
  after(async () => {
    await srv?.stop();
  });

  it('a user limited to threads:read can create and read their thread', async () => {
    const t = await request(srv, 'POST', '/api/threads', { bearer: user.token, body: { thread_id: 'ro-thread', metadata: { m: 1 } } });
    assert.equal(t.status, 200, t.text);
    const get = await request(srv, 'GET', '/api/threads/ro-thread', { bearer: user.token });
    assert.equal(get.status, 200, get.text);
    const search = await request(srv, 'POST', '/api/threads/search', { bearer: user.token, body: {} });
    assert.equal(search.status, 200);
    assert.equal(search.json.length, 1);
    const list = await request(srv, 'GET', '/api/threads/ro-thread/uploads/list', { bearer: user.token });
    assert.equal(list.status, 200);
  });

  it('PATCH is 403 "Permission denied: threads:write" and changes nothing', async () => {
    for (const who of [{ bearer: user.token }, { jar: user.jar, csrf: true }]) {
      const res = await request(srv, 'PATCH', '/api/threads/ro-thread', { ...who, body: { metadata: { m: 2 } } });
      assert.equal(res.status, 403, res.text);
      assert.equal(res.json.detail, 'Permission denied: threads:write');
    }
    const get = await request(srv, 'GET', '/api/threads/ro-thread', { bearer: user.token });
    assert.deepEqual(get.json.metadata, { m: 1 });
  });

  it('DELETE is 403 "Permission denied: threads:delete" and the thread stays', async () => {
    const res = await request(srv, 'DELETE', '/api/threads/ro-thread', { bearer: user.token });
    assert.equal(res.status, 403, res.text);
    assert.equal(res.json.detail, 'Permission denied: threads:delete');
    const get = await request(srv, 'GET', '/api/threads/ro-thread', { bearer: user.token });
    assert.equal(get.status, 200);
    assert.ok(fs.existsSync(srv.threadDir(user.id, 'ro-thread')));
  });

  it('uploads and artifact edits need threads:write, upload deletion threads:delete', async () => {
    const mp = multipart([{ filename: 'a.txt', content: 'a' }]);
    const up = await request(srv, 'POST', '/api/threads/ro-thread/uploads', {
      bearer: user.token,
      body: mp.body,
      headers: { 'Content-Type': mp.contentType },
    });
    assert.equal(up.status, 403, up.text);
    assert.equal(up.json.detail, 'Permission denied: threads:write');
    assert.deepEqual(fs.readdirSync(path.join(srv.userData(user.id, 'ro-thread'), 'uploads')), []);
    const put = await request(srv, 'PUT', '/api/threads/ro-thread/artifacts/mnt/user-data/outputs/a.txt', {
      bearer: user.token,
      body: { content: 'x', expected_sha256: '0'.repeat(64) },
    });
    assert.equal(put.status, 403);
    assert.equal(put.json.detail, 'Permission denied: threads:write');
    const del = await request(srv, 'DELETE', '/api/threads/ro-thread/uploads/a.txt', { bearer: user.token });
    assert.equal(del.status, 403);
    assert.equal(del.json.detail, 'Permission denied: threads:delete');
  });

  it('the admin role is unrestricted', async () => {
    const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'admin-thread' } });
    assert.equal(t.status, 200, t.text);
    const patch = await request(srv, 'PATCH', '/api/threads/admin-thread', { bearer: admin.token, body: { metadata: { x: 1 } } });
    assert.equal(patch.status, 200, patch.text);
    const mp = multipart([{ filename: 'adm.txt', content: 'admin' }]);
    const up = await request(srv, 'POST', '/api/threads/admin-thread/uploads', {
      bearer: admin.token,
      body: mp.body,
      headers: { 'Content-Type': mp.contentType },
    });
    assert.equal(up.status, 200, up.text);
    const delUp = await request(srv, 'DELETE', '/api/threads/admin-thread/uploads/adm.txt', { jar: admin.jar, csrf: true });
    assert.equal(delUp.status, 200, delUp.text);
    const del = await request(srv, 'DELETE', '/api/threads/admin-thread', { bearer: admin.token });
    assert.equal(del.status, 200, del.text);
  });

  it("permissions do not reach across owners: the admin gets 404 for the user's thread", async () => {
    const res = await request(srv, 'GET', '/api/threads/ro-thread', { bearer: admin.token });
    assert.equal(res.status, 404);
  });
});

describe('RBAC with a role that is not configured', () => {
  for (const failClosed of [true, false]) {
    it(`fail_closed: ${failClosed} ${failClosed ? 'denies every route permission' : 'allows them'}`, async () => {
      const srv = await FawnServer.start({
        authorization: {
          enabled: true,
          fail_closed: failClosed,
          default_role: 'guest',
          roles: { admin: {}, guest: { routes: { allow: ['threads:read'] } } },
        },
      });
      try {
        await setupAdmin(srv);
        const carol = await setupUser(srv, 'carol'); // role "user", which this policy does not define
        const t = await request(srv, 'POST', '/api/threads', { bearer: carol.token, body: { thread_id: 'c1' } });
        assert.equal(t.status, 200, 'routes that only need a signed-in user still work');
        const get = await request(srv, 'GET', '/api/threads/c1', { bearer: carol.token });
        const patch = await request(srv, 'PATCH', '/api/threads/c1', { bearer: carol.token, body: { metadata: { a: 1 } } });
        if (failClosed) {
          assert.equal(get.status, 403, get.text);
          assert.equal(get.json.detail, 'Permission denied: threads:read');
          assert.equal(patch.status, 403);
        } else {
          assert.equal(get.status, 200, get.text);
          assert.equal(patch.status, 200, patch.text);
        }
      } finally {
        await srv.stop();
      }
    });
  }
});

describe('RBAC configuration errors', () => {
  async function serveWith(authorization) {
    const home = makeHome();
    try {
      const cfg = path.join(home, 'config.yaml');
      fs.writeFileSync(cfg, toYaml({ server: { host: '127.0.0.1', port: await freePort(), threads: 2 }, authorization }));
      return await runFawn(['serve', '--config', cfg], { home, timeoutMs: 15000 });
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
  }

  it('an unknown resource key makes serve refuse to start, naming the key', async () => {
    const r = await serveWith({ enabled: true, roles: { admin: {}, user: { tool: { allow: ['bash'] } } } });
    assert.equal(r.signal, null, `serve did not refuse:\n${r.stderr}`);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /authorization\.roles\.user\.tool\b/);
    assert.match(r.stderr, /unknown resource/);
    assert.ok(!sanitizerReport(r.stderr), r.stderr);
  });

  it('an unknown route permission is refused, naming it', async () => {
    const r = await serveWith({ enabled: true, roles: { admin: {}, user: { routes: { allow: ['threads:admin'] } } } });
    assert.equal(r.signal, null, `serve did not refuse:\n${r.stderr}`);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /threads:admin/);
    assert.ok(!sanitizerReport(r.stderr), r.stderr);
  });

  it('a default_role that is not a role is refused', async () => {
    const r = await serveWith({ enabled: true, default_role: 'guest', roles: { admin: {}, user: {} } });
    assert.equal(r.signal, null, `serve did not refuse:\n${r.stderr}`);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /default_role/);
  });
});
