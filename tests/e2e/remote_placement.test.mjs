// Remote placement through the gateway: sandbox.provider remote with the
// loopback control plane (tests/remote/loopback-provider.sh), whose boxes
// are `fawn box --listen` processes with their own user-data directory.
// Uploads are copied into the thread's box; the manager shows the sandbox;
// deleting the thread destroys it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from './lib/test.mjs';

import { FAWN_BIN, FawnServer, eventually, request, setupAdmin, setupUser } from './lib/server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const SCRIPT = path.resolve(here, '..', 'remote', 'loopback-provider.sh');

function sandboxId(user, thread) {
  return crypto.createHash('sha256').update(`${user}:${thread}`).digest('hex').slice(0, 16);
}

describe('remote placement', () => {
  let srv;
  let admin;
  let state;

  before(async () => {
    state = fs.mkdtempSync(path.join(fs.realpathSync('/tmp'), 'fawn-e2e-remote-'));
    const command = (op) => [SCRIPT, op];
    srv = await FawnServer.start(
      {
        sandbox: {
          provider: 'remote',
          remote: {
            create_command: command('create'),
            status_command: command('status'),
            destroy_command: command('destroy'),
            list_command: command('list'),
            start_timeout_s: 60,
            env_passthrough: ['LOOPBACK_STATE_DIR', 'FAWN_BIN', 'FAWN_HOME', 'ASAN_OPTIONS', 'UBSAN_OPTIONS'],
          },
        },
      },
      { env: { LOOPBACK_STATE_DIR: state, FAWN_BIN } },
    );
    admin = await setupAdmin(srv);
  });
  after(async () => {
    await srv?.stop();
    /* Parked boxes outlive the gateway (a restart adopts them): remove them. */
    const env = { ...process.env, LOOPBACK_STATE_DIR: state, FAWN_BIN };
    for (const sid of fs.readdirSync(state)) {
      spawnSync(SCRIPT, ['destroy'], { env: { ...env, FAWN_SANDBOX_ID: sid }, stdio: 'ignore' });
    }
    fs.rmSync(state, { recursive: true, force: true });
  });

  it('copies uploads into the thread\'s box, shows it, adopts it after kill -9, destroys it with the thread', async () => {
    const created = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'far' } });
    assert.equal(created.status, 200, created.text);
    const fd = new FormData();
    fd.append('files', new Blob(['bytes for the remote box\n']), 'notes.txt');
    const res = await fetch(`${srv.base}/api/threads/far/uploads`, {
      method: 'POST',
      body: fd,
      headers: { Authorization: `Bearer ${admin.token}` },
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));

    const sid = sandboxId(admin.id, 'far');
    const inBox = path.join(state, sid, 'user-data', 'uploads', 'notes.txt');
    assert.equal(fs.readFileSync(inBox, 'utf8'), 'bytes for the remote box\n');

    const listed = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    assert.equal(listed.status, 200, listed.text);
    const mine = listed.json.sandboxes.find((s) => s.thread_id === 'far');
    assert.ok(mine, listed.text);
    assert.equal(mine.sandbox_id, sid);
    assert.equal(mine.state, 'idle'); /* the upload lease was released */
    assert.equal(mine.holders.upload, 0);
    assert.equal(mine.fenced, false);

    /* Killed and restarted, the gateway adopts the parked box: same generation. */
    await srv.kill9();
    await srv.restart();
    const adopted = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    const again = adopted.json.sandboxes.find((s) => s.thread_id === 'far');
    assert.ok(again, adopted.text);
    assert.equal(again.generation, mine.generation);
    assert.equal(again.state, 'idle');

    const deleted = await request(srv, 'DELETE', '/api/threads/far', { bearer: admin.token });
    assert.equal(deleted.status, 200, deleted.text);
    await eventually(() => assert.equal(fs.existsSync(path.join(state, sid)), false));
    const after = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    assert.equal(after.json.sandboxes.find((s) => s.thread_id === 'far'), undefined);
  });

  /* sandbox:execute is checked on every acquisition: once the user's role
   * loses it, the next upload is stored but no longer reaches the box, and
   * the box is not touched; the admin role keeps it. */
  it('a role that loses sandbox:execute no longer reaches the box', async () => {
    const user = await setupUser(srv, 'plain-user');
    const upload = async (who, thread, name) => {
      const fd = new FormData();
      fd.append('files', new Blob([`${name} content`]), name);
      const res = await fetch(`${srv.base}/api/threads/${thread}/uploads`, {
        method: 'POST',
        body: fd,
        headers: { Authorization: `Bearer ${who.token}` },
      });
      assert.equal(res.status, 200, await res.text());
    };
    const boxFile = (who, thread, name) =>
      path.join(state, sandboxId(who.id, thread), 'user-data', 'uploads', name);
    await upload(user, 'mine', 'before.txt');
    assert.equal(fs.readFileSync(boxFile(user, 'mine', 'before.txt'), 'utf8'), 'before.txt content');

    await srv.stop({ keepHome: true });
    srv.config.authorization = {
      enabled: true,
      roles: { admin: {}, user: { sandbox: { allow: false } } },
    };
    await srv.restart();
    await upload(user, 'mine', 'after.txt');
    assert.equal(fs.existsSync(boxFile(user, 'mine', 'after.txt')), false);
    assert.equal(fs.readFileSync(boxFile(user, 'mine', 'before.txt'), 'utf8'), 'before.txt content');
    await upload(admin, 'theirs', 'admin.txt');
    assert.equal(fs.readFileSync(boxFile(admin, 'theirs', 'admin.txt'), 'utf8'), 'admin.txt content');
  });
});
