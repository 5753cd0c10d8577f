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

import { Client } from '@langchain/langgraph-sdk';
import { FAWN_BIN, FawnServer, eventually, request, setupAdmin, setupUser, skillsDirWith } from './lib/server.mjs';
import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const SCRIPT = path.resolve(here, '..', 'remote', 'loopback-provider.sh');

function sandboxId(user, thread) {
  return crypto.createHash('sha256').update(`${user}:${thread}`).digest('hex').slice(0, 16);
}

describe('remote placement', () => {
  let srv;
  let admin;
  let state;
  let fake;
  let skillsDir;

  before(async () => {
    state = fs.mkdtempSync(path.join(fs.realpathSync('/tmp'), 'fawn-e2e-remote-'));
    fake = await FakeOpenAI.start();
    skillsDir = skillsDirWith({
      shown: '---\nname: shown\ndescription: Shown\n---\nSHOWN-BODY\n',
      hidden: '---\nname: hidden\ndescription: Hidden\n---\nHIDDEN-BODY\n',
    });
    const command = (op) => [SCRIPT, op];
    srv = await FawnServer.start(
      {
        models: [fake.model()],
        sandbox: {
          skills_dir: skillsDir,
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
    await fake?.stop();
    if (skillsDir) fs.rmSync(skillsDir, { recursive: true, force: true });
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

  /* The create command gets the user's skills view; the loopback control
   * plane hands it to the box, which shows only the enabled skills. */
  it('a remote box shows only the enabled skills at /mnt/skills, read-only', async () => {
    assert.equal((await request(srv, 'PUT', '/api/skills/hidden', { bearer: admin.token, body: { enabled: false } })).status, 200);
    fake.queue(reply('', [call('bash', {
      description: 'look',
      command: 'ls -A /mnt/skills; cat /mnt/skills/shown/SKILL.md; (echo x > /mnt/skills/new) 2>/dev/null && echo WROTE; echo END',
    })]));
    fake.queue(reply('seen'));
    const client = new Client({
      apiUrl: `${srv.base}/api`,
      defaultHeaders: { Authorization: `Bearer ${admin.token}` },
      callerOptions: { maxRetries: 0 },
    });
    const thread = await client.threads.create();
    const first = fake.requests.length;
    await client.runs.wait(thread.thread_id, 'lead_agent', { input: { messages: [{ type: 'human', content: 'look' }] } });
    const tool = fake.requests[first + 1].body.messages.find((m) => m.role === 'tool');
    assert.ok(tool.content.includes('SHOWN-BODY') && tool.content.includes('END'), tool.content);
    assert.doesNotMatch(tool.content, /hidden|WROTE/);
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
