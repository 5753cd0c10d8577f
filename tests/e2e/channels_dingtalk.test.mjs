// IM channels, DingTalk in Stream mode, against a fake DingTalk on loopback:
// bindings with one-time connect codes (owner-scoped connections API), unbound
// chat users refused, a message with a picture and a file run as the bound user
// with the files in the thread's uploads and the artifact the run presents sent
// back as a file, redeliveries run once, a follow-up during a run answered
// after it, hostile, oversize, failing and symlink-targeted attachments, a role
// without sandbox:execute, runtime credentials never answered back, and
// queued messages kept across kill -9.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from './lib/test.mjs';

import { FAWN_BIN, FawnServer, request, setupAdmin, setupUser, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, held, reply } from './lib/fake_openai.mjs';
import { CLIENT_SECRET, FakeDingTalk, robotMessage } from './lib/fake_dingtalk.mjs';

const uniq = (p) => `${p}-${Math.random().toString(16).slice(2, 10)}`;

/** Model requests whose messages mention m. */
const requestsFor = (fake, m) => fake.requests.filter((r) => JSON.stringify(r.body?.messages ?? []).includes(m));
/** The last user message of a model request, as text. */
const humanText = (r) => {
  const users = (r.body?.messages ?? []).filter((x) => x.role === 'user');
  const c = users[users.length - 1]?.content;
  return typeof c === 'string' ? c : JSON.stringify(c);
};

describe('DingTalk channel', { concurrency: 1 }, () => {
  let srv;
  let fake;
  let ding;
  let admin;
  let bob;

  before(async () => {
    fake = await FakeOpenAI.start();
    ding = await FakeDingTalk.start();
    srv = await FawnServer.start({
      models: [fake.model()],
      channels: { dingtalk: ding.config() },
      authorization: {
        enabled: true,
        roles: { admin: {}, user: {}, nosbx: { sandbox: { deny: ['execute'] } } },
      },
    });
    admin = await setupAdmin(srv);
    bob = await setupUser(srv, 'bob');
    await ding.connected();
  });
  after(async () => {
    await srv?.stop();
    await ding?.stop();
    await fake?.stop();
  });

  const api = (method, p, body, who = admin) => request(srv, method, p, { bearer: who.token, body });

  /** Binds DingTalk staff id sender to the fawn user who. */
  async function bind(sender, who) {
    const r = await api('POST', '/api/channels/dingtalk/connect', undefined, who);
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.code, /^[A-HJ-NP-Z2-9]{8}$/);
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender, text: `/connect ${r.json.code.toLowerCase()}` }));
    await ding.waitText(sender, /Connected/);
    return r.json.code;
  }

  /** Starts a new conversation of sender (/new); resolves with its thread id (/status). */
  async function fresh(sender) {
    const before = ding.textsTo(sender).length;
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender, text: '/new' }));
    await waitFor(() => ding.textsTo(sender).slice(before).some((t) => /Started a new conversation/.test(t)), undefined, '/new');
    const mid = ding.textsTo(sender).length;
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender, text: '/status' }));
    const status = await waitFor(() => ding.textsTo(sender).slice(mid).find((t) => /^(No conversation|Thread )/.test(t)), undefined, '/status');
    return status;
  }

  /** The thread id of sender's conversation, once it has one (/status). */
  async function threadOf(sender) {
    const mid = ding.textsTo(sender).length;
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender, text: '/status' }));
    const status = await waitFor(() => ding.textsTo(sender).slice(mid).find((t) => /^Thread /.test(t)), undefined, '/status');
    return /^Thread ([0-9a-f-]{36})/.exec(status)[1];
  }

  it('answers the stream ping with its data', async () => {
    const pong = await ding.ping();
    assert.equal(pong.code, 200);
    assert.match(pong.data, /opaque/);
  });

  it('reconnects when the stream drops, with a new ticket', async () => {
    const n = ding.connections;
    ding.ws.terminate();
    await ding.connected(n + 1);
    const pong = await ding.ping();
    assert.equal(pong.code, 200);
  });

  it('refuses an unbound chat user and runs nothing', async () => {
    const m = uniq('stranger');
    const ack = await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'stranger', text: `hello ${m}` }));
    assert.equal(ack.code, 200);
    await ding.waitText('stranger', /not connected to a fawn account/);
    assert.equal(requestsFor(fake, m).length, 0);
  });

  it('binds with a one-time code, lists and unbinds owner-scoped', async () => {
    const code = await bind('u-bob', bob);
    // the code is single use
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-mallory', text: `/connect ${code}` }));
    await ding.waitText('u-mallory', /not valid/);
    const list = await api('GET', '/api/channels/connections', undefined, bob);
    assert.equal(list.status, 200);
    const mine = list.json.connections.find((c) => c.platform_user_id === 'u-bob');
    assert.ok(mine, JSON.stringify(list.json));
    const theirs = await api('GET', '/api/channels/connections', undefined, admin);
    assert.ok(!theirs.json.connections.some((c) => c.id === mine.id));
    const del = await api('DELETE', `/api/channels/connections/${mine.id}`, undefined, admin);
    assert.equal(del.status, 404);
    const bad = await api('DELETE', '/api/channels/connections/..%2f..', undefined, bob);
    assert.equal(bad.status, 404);
    const ok = await api('DELETE', `/api/channels/connections/${mine.id}`, undefined, bob);
    assert.equal(ok.status, 200, ok.text);
    const m = uniq('after-unbind');
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-bob', text: m }));
    await ding.waitText('u-bob', /not connected/);
    assert.equal(requestsFor(fake, m).length, 0);
    await bind('u-bob', bob);
    // guessing codes: after a few failures even a valid code is refused for a while
    for (let i = 0; i < 5; i++) {
      const mid = ding.textsTo('u-eve').length;
      await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-eve', text: '/connect AAAAAAAA' }));
      await waitFor(() => ding.textsTo('u-eve').slice(mid).some((t) => /not valid/.test(t)), undefined, 'a refusal');
    }
    const good = await api('POST', '/api/channels/dingtalk/connect', undefined, bob);
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-eve', text: `/connect ${good.json.code}` }));
    await ding.waitText('u-eve', /Too many connect attempts/);
    assert.ok(!(await api('GET', '/api/channels/connections', undefined, bob)).json.connections.some((c) => c.platform_user_id === 'u-eve'));
    // the other commands
    for (const [text, answer] of [['/models', /Models you may use:\n- fake \(default\)/], ['/help', /^Commands:/],
      ['/frobnicate', /Unknown command/], ['/status', /No conversation yet/]]) {
      const mid = ding.textsTo('u-bob').length;
      await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-bob', text }));
      await waitFor(() => ding.textsTo('u-bob').slice(mid).some((t) => answer.test(t)), undefined, `the answer to ${text}`);
    }
  });

  it('runs a picture and a file as the bound user and sends the artifact back', async () => {
    await bind('u-admin', admin);
    await fresh('u-admin');
    const m = uniq('report');
    ding.serve('pic-code-1', Buffer.from('\x89PNG fake picture'));
    ding.serve('file-code-1', `quarterly numbers ${m}\n`);
    fake.route(`look at this ${m}`, reply('', [call('read_file', { path: '/mnt/user-data/uploads/image_1.png' })]));
    fake.route(`look at this ${m}`, reply('', [call('write_file', { path: '/mnt/user-data/outputs/summary.md', content: `# summary ${m}\n` })]));
    fake.route(`look at this ${m}`, reply('', [call('present_files', { filepaths: ['/mnt/user-data/outputs/summary.md'] })]));
    fake.route(`look at this ${m}`, reply(`the summary of ${m} is ready`));
    await ding.deliver(robotMessage({
      msgId: uniq('m'), sender: 'u-admin', msgtype: 'richText',
      content: { richText: [{ text: `look at this ${m}` }, { type: 'picture', downloadCode: 'pic-code-1' }] },
    }));
    // a message with a file and no text is run too
    ding.serve('file-code-1b', `quarterly numbers ${m}\n`);
    await ding.waitText('u-admin', new RegExp(`the summary of ${m} is ready`));
    const first = requestsFor(fake, `look at this ${m}`)[0];
    assert.match(humanText(first), /\/mnt\/user-data\/uploads\/image_1\.png/);
    await waitFor(() => ding.filesTo('u-admin').find((f) => f.name === 'summary.md'), undefined, 'the artifact');
    const sent = ding.filesTo('u-admin').find((f) => f.name === 'summary.md');
    assert.equal(String(sent.body), `# summary ${m}\n`);
    // now the file, without text
    await fresh('u-admin');
    fake.route('report.txt', reply('', [call('read_file', { path: '/mnt/user-data/uploads/report.txt' })]));
    fake.route('report.txt', reply(`read ${m}`));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', msgtype: 'file', content: { downloadCode: 'file-code-1', fileName: 'report.txt' } }));
    await ding.waitText('u-admin', new RegExp(`read ${m}`));
    const reads = requestsFor(fake, 'uploads/report.txt').flatMap((r) => r.body.messages).filter((x) => x.role === 'tool');
    assert.ok(reads.some((x) => JSON.stringify(x).includes(`quarterly numbers ${m}`)), JSON.stringify(reads));
    // the picture was read by the first run
    const pic = requestsFor(fake, `look at this ${m}`).flatMap((r) => r.body.messages).filter((x) => x.role === 'tool');
    assert.ok(pic.some((x) => JSON.stringify(x).includes('PNG fake picture')), JSON.stringify(pic));
  });

  it('runs a redelivered message once', async () => {
    await fresh('u-admin');
    const m = uniq('dup');
    const msg = robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `once ${m}` });
    fake.route(`once ${m}`, reply(`answered ${m}`));
    await ding.deliver(msg);
    await ding.deliver(msg);
    await ding.waitText('u-admin', new RegExp(`answered ${m}`));
    await ding.deliver(msg);
    const later = uniq('later');
    await fresh('u-admin');
    fake.route(`after ${later}`, reply(`answered ${later}`));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `after ${later}` }));
    await ding.waitText('u-admin', new RegExp(`answered ${later}`));
    assert.equal(requestsFor(fake, `once ${m}`).filter((r) => humanText(r).includes(`once ${m}`)).length, 1);
    assert.equal(ding.textsTo('u-admin').filter((t) => t.includes(`answered ${m}`)).length, 1);
    // one access token served every call so far (cached until it expires)
    assert.equal(ding.tokens.size, 1);
  });

  it('answers a follow-up sent during a run after the run', async () => {
    await fresh('u-admin');
    const a = uniq('first');
    const b = uniq('second');
    const h = held(`answer ${a}`);
    fake.route(`ask ${a}`, h.step);
    fake.route(`ask ${a}`, reply(`answer ${b}`));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `ask ${a}` }));
    await waitFor(() => requestsFor(fake, `ask ${a}`).length > 0, undefined, 'the first run');
    const runsBefore = requestsFor(fake, `ask ${a}`).length;
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `ask ${b}` }));
    await ding.waitText('u-admin', /Queued/);
    assert.equal(requestsFor(fake, `ask ${b}`).length, 0);
    assert.equal(requestsFor(fake, `ask ${a}`).length, runsBefore);
    h.release();
    await ding.waitText('u-admin', new RegExp(`answer ${b}`));
    const texts = ding.textsTo('u-admin');
    assert.ok(texts.findIndex((t) => t.includes(`answer ${a}`)) < texts.findIndex((t) => t.includes(`answer ${b}`)));
  });

  it('bounds a conversation\'s queue with a clear answer', async () => {
    await fresh('u-admin');
    const a = uniq('busy');
    const h = held(`done ${a}`);
    fake.route(`q ${a}`, h.step);
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `q ${a} 0` }));
    await waitFor(() => requestsFor(fake, `q ${a}`).length > 0, undefined, 'the held run');
    const before = ding.textsTo('u-admin').length;
    for (let i = 1; i <= 8; i++)
      await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `q ${a} ${i}` }));
    const told = await ding.waitText('u-admin', /Too many messages are waiting/);
    assert.match(told, /at most 8/);
    assert.equal(ding.textsTo('u-admin').slice(before).filter((t) => /Too many/.test(t)).length, 1);
    h.release();
    // the seven queued ones are answered, the refused eighth never runs
    await waitFor(() => requestsFor(fake, `q ${a}`).filter((r) => humanText(r).includes(`q ${a} 7`)).length === 1, undefined, 'the last queued');
    assert.equal(requestsFor(fake, `q ${a}`).filter((r) => humanText(r).includes(`q ${a} 8`)).length, 0);
  });

  it('handles hostile, oversize, failing and symlink-targeted attachments', async () => {
    const m = uniq('hostile');
    // the thread of u-admin's chat: its uploads directory, made by a first message
    await fresh('u-admin');
    fake.route(`${m} start`, reply(`started ${m}`), reply(`stored ${m} mixed`));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `${m} start` }));
    await ding.waitText('u-admin', new RegExp(`started ${m}`));
    const tid = await threadOf('u-admin');
    fs.mkdirSync(path.join(srv.userData(admin.id, tid), 'uploads'), { recursive: true });
    const uploads = path.join(srv.userData(admin.id, tid), 'uploads');
    const outside = path.join(srv.home, `outside-${m}.txt`);
    fs.writeFileSync(outside, 'untouched');
    fs.symlinkSync(outside, path.join(uploads, 'planted.txt'));
    ding.serve('code-traversal', 'traversal bytes');
    ding.serve('code-newline', 'newline bytes');
    ding.serve('code-planted', 'planted bytes');
    ding.serve('code-big', { size: 50 * 1024 * 1024 + 1 });
    ding.serve('code-fail', { status: 500 });
    ding.serve('code-good', 'good picture');
    // one message, three pictures: one good, one failing, one oversize
    await ding.deliver(robotMessage({
      msgId: uniq('m'), sender: 'u-admin', msgtype: 'richText',
      content: { richText: [{ text: `${m} mixed` }, { downloadCode: 'code-good', type: 'picture' }, { downloadCode: 'code-fail', type: 'picture' }, { downloadCode: 'code-big', type: 'picture' }] },
    }));
    await ding.waitText('u-admin', new RegExp(`stored ${m} mixed`));
    const mixed = humanText(requestsFor(fake, `${m} mixed`)[0]);
    assert.match(mixed, /\/mnt\/user-data\/uploads\/image_1\.png/);
    assert.match(mixed, /\[failed to load image: image_2\.png\]/);
    assert.match(mixed, /\[failed to load image: image_3\.png\]/);
    assert.equal(fs.readFileSync(path.join(uploads, 'image_1.png'), 'utf8'), 'good picture');
    // hostile file names: directories stripped, control characters refused
    for (const [code, fileName, , stored] of [
      ['code-traversal', '../../x', 'traversal', 'x'],
      ['code-newline', 'evil\nname.txt', 'newline', 'dingtalk_code-newline.bin'],
      ['code-planted', 'planted.txt', 'planted', 'planted_1.txt'],
    ]) {
      await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', msgtype: 'file', content: { downloadCode: code, fileName } }));
      await waitFor(() => requestsFor(fake, `uploads/${stored}`).length > 0, undefined, `the run with ${stored}`);
      assert.ok(fs.lstatSync(path.join(uploads, stored)).isFile(), stored);
    }
    assert.equal(fs.readFileSync(outside, 'utf8'), 'untouched');
    assert.ok(fs.lstatSync(path.join(uploads, 'planted.txt')).isSymbolicLink());
    assert.ok(!fs.existsSync(path.join(srv.userData(admin.id, tid), 'x')));
    // a download URL pointing at an address the policy does not open is not fetched
    ding.serve('code-internal', { redirectTo: `http://127.0.0.2:${ding.port}/files/code-good` });
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', msgtype: 'file', content: { downloadCode: 'code-internal', fileName: 'internal.txt' } }));
    await waitFor(() => requestsFor(fake, '[failed to load file: internal.txt]').length > 0, undefined, 'the refused download');
    assert.match(srv.stderr, /address is not one fawn may reach/);
    // a failing file alone: the message still reaches the agent with the marker
    const before = ding.textsTo('u-admin').length;
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', msgtype: 'file', content: { downloadCode: 'code-fail', fileName: 'broken.bin' } }));
    await waitFor(() => requestsFor(fake, '[failed to load file: broken.bin]').length > 0, undefined, 'the marker');
    await waitFor(() => ding.textsTo('u-admin').length > before, undefined, 'the answer');
  });

  it('stores files of a role without sandbox:execute', async () => {
    const carol = await setupUser(srv, 'carol');
    const r = await srv.cli(['user', 'role', '--username', 'carol', '--role', 'nosbx']);
    assert.equal(r.code, 0, r.stderr);
    await bind('u-carol', carol);
    const m = uniq('nosbx');
    ding.serve('code-carol', `carol file ${m}`);
    fake.route(`${m}`, reply(`carol ok ${m}`));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-carol', msgtype: 'richText', content: { richText: [{ text: m }, { downloadCode: 'code-carol', type: 'picture' }] } }));
    await ding.waitText('u-carol', new RegExp(`carol ok ${m}`));
    assert.match(humanText(requestsFor(fake, m)[0]), /\/mnt\/user-data\/uploads\/image_1\.png/);
    const tid = await threadOf('u-carol');
    assert.equal(fs.readFileSync(path.join(srv.userData(carol.id, tid), 'uploads', 'image_1.png'), 'utf8'), `carol file ${m}`);
  });

  it('keeps runtime credentials secret and admin-only', async () => {
    const denied = await api('POST', '/api/channels/dingtalk/runtime-config', { client_secret: 'x' }, bob);
    assert.equal(denied.status, 403, denied.text);
    const unknown = await api('POST', '/api/channels/dingtalk/runtime-config', { password: 'x' });
    assert.ok([400, 422].includes(unknown.status), unknown.text);
    const saved = await api('POST', '/api/channels/dingtalk/runtime-config', { client_secret: CLIENT_SECRET, card_template_id: 'tpl-1' });
    assert.equal(saved.status, 200, saved.text);
    assert.ok(!saved.text.includes(CLIENT_SECRET), saved.text);
    assert.equal(saved.json.runtime_settings.client_secret, true);
    const status = await api('GET', '/api/channels/', undefined, bob);
    assert.equal(status.status, 200);
    assert.ok(!status.text.includes(CLIENT_SECRET));
    await ding.connected(2);
    await waitFor(async () => (await api('GET', '/api/channels/')).json.channels.dingtalk.state === 'connected', undefined, 'reconnected');
    // with a card template the reply streams into a card
    await fresh('u-admin');
    const m = uniq('card');
    fake.route(m, reply(`card answer ${m}`));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: m }));
    await waitFor(() => ding.cards.find((c) => c.op === 'stream' && c.body.isFinalize && c.body.content.includes(`card answer ${m}`)), undefined, 'the final card');
    const del = await api('DELETE', '/api/channels/dingtalk/runtime-config');
    assert.equal(del.status, 200, del.text);
    assert.ok(!del.text.includes(CLIENT_SECRET));
  });

  it('runs queued messages after a kill -9', async () => {
    await ding.connected();
    await fresh('u-admin');
    const a = uniq('before-kill');
    const q1 = uniq('queued-one');
    const q2 = uniq('queued-two');
    const h = held(`never ${a}`);
    fake.route(`kill ${a}`, h.step);
    fake.route(`kill ${a}`, reply(`after restart ${q1}`), reply(`after restart ${q2}`));
    const n = ding.connections;
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `kill ${a}` }));
    await waitFor(() => requestsFor(fake, `kill ${a}`).length > 0, undefined, 'the held run');
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `kill ${q1}` }));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender: 'u-admin', text: `kill ${q2}` }));
    await srv.kill9();
    h.release();
    await srv.restart();
    await ding.connected(n + 1);
    await ding.waitText('u-admin', new RegExp(`after restart ${q1}`));
    await ding.waitText('u-admin', new RegExp(`after restart ${q2}`));
    assert.equal(requestsFor(fake, `kill ${q1}`).filter((r) => humanText(r).includes(`kill ${q1}`)).length, 1);
    await ding.waitText('u-admin', /restarted while answering/);
  });
});

// Where boxes do not share the host's thread files (remote placement through
// the loopback control plane), a chat attachment is copied into the thread's
// box, but only for a role that holds sandbox:execute.
describe('DingTalk channel with remote boxes', { concurrency: 1 }, () => {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const SCRIPT = path.resolve(here, '..', 'remote', 'loopback-provider.sh');
  const sandboxId = (user, thread) => crypto.createHash('sha256').update(`${user}:${thread}`).digest('hex').slice(0, 16);
  let srv;
  let fake;
  let ding;
  let state;
  let admin;
  let dave;

  before(async () => {
    state = fs.mkdtempSync(path.join(fs.realpathSync('/tmp'), 'fawn-e2e-chremote-'));
    fake = await FakeOpenAI.start();
    ding = await FakeDingTalk.start();
    const command = (op) => [SCRIPT, op];
    srv = await FawnServer.start({
      models: [fake.model()],
      channels: { dingtalk: ding.config() },
      authorization: { enabled: true, roles: { admin: {}, user: {}, nosbx: { sandbox: { deny: ['execute'] } } } },
      sandbox: {
        provider: 'remote',
        remote: {
          create_command: command('create'), status_command: command('status'),
          destroy_command: command('destroy'), list_command: command('list'), start_timeout_s: 60,
          env_passthrough: ['LOOPBACK_STATE_DIR', 'FAWN_BIN', 'FAWN_HOME', 'ASAN_OPTIONS', 'UBSAN_OPTIONS'],
        },
      },
    }, { env: { LOOPBACK_STATE_DIR: state, FAWN_BIN } });
    admin = await setupAdmin(srv);
    dave = await setupUser(srv, 'dave');
    const r = await srv.cli(['user', 'role', '--username', 'dave', '--role', 'nosbx']);
    assert.equal(r.code, 0, r.stderr);
    await ding.connected();
  });
  after(async () => {
    await srv?.stop();
    await ding?.stop();
    await fake?.stop();
    if (state) fs.rmSync(state, { recursive: true, force: true });
  });

  async function bindAndThread(sender, who, m) {
    const c = await request(srv, 'POST', '/api/channels/dingtalk/connect', { bearer: who.token });
    assert.equal(c.status, 200, c.text);
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender, text: `/connect ${c.json.code}` }));
    await ding.waitText(sender, /Connected/);
    ding.serve(`code-${m}`, `bytes of ${m}`);
    fake.route(m, reply(`ok ${m}`));
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender, msgtype: 'richText', content: { richText: [{ text: m }, { downloadCode: `code-${m}`, type: 'picture' }] } }));
    await ding.waitText(sender, new RegExp(`ok ${m}`));
    const mid = ding.textsTo(sender).length;
    await ding.deliver(robotMessage({ msgId: uniq('m'), sender, text: '/status' }));
    const status = await waitFor(() => ding.textsTo(sender).slice(mid).find((t) => /^Thread /.test(t)), undefined, '/status');
    return /^Thread ([0-9a-f-]{36})/.exec(status)[1];
  }

  it('copies an attachment into the box with sandbox:execute, not without', async () => {
    const m1 = uniq('exec');
    const t1 = await bindAndThread('u-root', admin, m1);
    assert.equal(fs.readFileSync(path.join(srv.userData(admin.id, t1), 'uploads', 'image_1.png'), 'utf8'), `bytes of ${m1}`);
    const inBox = path.join(state, sandboxId(admin.id, t1), 'user-data', 'uploads', 'image_1.png');
    assert.equal(fs.readFileSync(inBox, 'utf8'), `bytes of ${m1}`);
    const m2 = uniq('noexec');
    const t2 = await bindAndThread('u-dave', dave, m2);
    assert.equal(fs.readFileSync(path.join(srv.userData(dave.id, t2), 'uploads', 'image_1.png'), 'utf8'), `bytes of ${m2}`);
    assert.ok(!fs.existsSync(path.join(state, sandboxId(dave.id, t2))), 'no box for a role without sandbox:execute');
    assert.match(humanText(requestsFor(fake, m2)[0]), /\/mnt\/user-data\/uploads\/image_1\.png/);
  });
});
