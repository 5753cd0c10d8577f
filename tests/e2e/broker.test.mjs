// The credential broker through the gateway: a model's bash call runs a
// brokered CLI (tests/broker/fake_cli.sh, which prints what it received)
// with the signed-in user's credentials, whose output reaches the model
// while the credentials stay out of the sandbox; a subcommand off the
// allow-list is refused; another user's run gets that user's credentials;
// every call is audited without its secrets.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, request, setupAdmin, setupUser } from './lib/server.mjs';
import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const FAKE_CLI = path.resolve(here, '..', 'broker', 'fake_cli.sh');
const TOKENS = { admin: 'e2e-admin-token-3f9a', other: 'e2e-other-token-77c1' };

/** Puts a user's credential file where the broker reads it (as an operator would). */
function putCredentials(srv, uid, token) {
  const dir = path.join(srv.home, 'users', String(uid), 'credentials', 'fake-cli');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  fs.writeFileSync(path.join(dir, 'token'), `${token}\n`, { mode: 0o600 });
}

/** Runs one turn whose model calls bash with command; returns the tool message's text. */
async function bashThroughModel(srv, fake, who, command) {
  const created = await request(srv, 'POST', '/api/threads', { bearer: who.token, body: {} });
  assert.equal(created.status, 200, created.text);
  const tid = created.json.thread_id;
  fake.queue(reply('', [call('bash', { description: 'use the CLI', command })]), reply('done'));
  const r = await request(srv, 'POST', `/api/threads/${tid}/runs/wait`, {
    bearer: who.token,
    body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'go' }] } },
  });
  assert.equal(r.status, 200, r.text);
  const tool = r.json.messages.find((m) => m.type === 'tool');
  assert.ok(tool, r.text);
  return { tid, text: String(tool.content) };
}

describe('credential broker', () => {
  let srv;
  let fake;
  let admin;
  let other;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({
      models: [fake.model()],
      broker: {
        clis: [{
          name: 'fake-cli',
          binary: FAKE_CLI,
          allow: ['echo', 'fail'],
          env: { FAKE_TOKEN: 'file:token', FAKE_DIR: 'dir' },
        }],
      },
    });
    admin = await setupAdmin(srv);
    other = await setupUser(srv, 'broker-other');
    putCredentials(srv, admin.id, TOKENS.admin);
    putCredentials(srv, other.id, TOKENS.other);
  });
  after(async () => {
    await srv?.stop();
    await fake?.stop();
  });

  it('runs the CLI with the user\'s credentials; its output reaches the model, the credentials never the sandbox', async () => {
    const { text } = await bashThroughModel(srv, fake, admin,
      `echo from-the-sandbox | fake-cli echo --flag; echo rc=$?; grep -rsl -D skip ${TOKENS.admin} /mnt /tmp /etc /home /root; echo grep=$?`);
    assert.match(text, /args: echo --flag/);
    assert.match(text, new RegExp(`token=${TOKENS.admin}`));
    assert.match(text, /from-the-sandbox/);
    assert.match(text, /rc=0/);
    assert.doesNotMatch(text, /grep=0/);
    // What the model saw is the CLI's output; the sandbox's files never held the token.
    const sent = fake.requests.at(-1).body.messages.find((m) => m.role === 'tool');
    assert.ok(sent.content.includes(TOKENS.admin));
  });

  it('refuses a subcommand off the allow-list without running it', async () => {
    const { text } = await bashThroughModel(srv, fake, admin, 'fake-cli auth export; echo rc=$?');
    assert.match(text, /rc=126/);
    assert.match(text, /not allowed/);
    assert.doesNotMatch(text, /token=/);
  });

  it('gives another user\'s run that user\'s credentials, never the first user\'s', async () => {
    const { text } = await bashThroughModel(srv, fake, other, 'fake-cli echo </dev/null; echo rc=$?');
    assert.match(text, new RegExp(`token=${TOKENS.other}`));
    assert.ok(!text.includes(TOKENS.admin));
  });

  it('audits every call without its secrets', async () => {
    const audit = fs.readFileSync(path.join(srv.home, 'audit', 'broker.log'), 'utf8');
    assert.match(audit, new RegExp(`user=${admin.id} thread=\\S+ run=\\S+ sandbox=[0-9a-f]{16} cli=fake-cli subcommand="echo" args=2 exit=0`));
    assert.match(audit, /subcommand="-" args=2 exit=126/);
    assert.match(audit, new RegExp(`user=${other.id} .*exit=0`));
    for (const secret of [TOKENS.admin, TOKENS.other, '--flag', 'export']) assert.ok(!audit.includes(secret), secret);
  });
});
