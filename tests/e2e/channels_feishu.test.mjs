// IM channels, Feishu/Lark over HTTP event callbacks, against a fake Feishu
// open platform on loopback: the URL verification, forged callbacks (bad
// signature, wrong verification token, a body that does not decrypt, a
// plaintext body while the app has an encrypt key, a replay outside the
// timestamp window) refused with nothing run, an unbound user refused, a
// text answered in an interactive card updated while the run streams with
// the presented artifact sent back as a file, an image and a file stored in
// the thread's uploads for the agent, and a redelivered event run once.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, request, setupAdmin, setupUser, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, held, reply } from './lib/fake_openai.mjs';
import { FakeFeishu, messageEvent } from './lib/fake_feishu.mjs';

const TOKEN = 'e2e-verification-token';
const KEY = 'e2e-encrypt-key';
const uniq = (p) => `${p}-${Math.random().toString(16).slice(2, 10)}`;

/** Model requests whose messages mention m. */
const requestsFor = (fake, m) => fake.requests.filter((r) => JSON.stringify(r.body?.messages ?? []).includes(m));
/** The last user message of a model request, as text. */
const humanText = (r) => {
  const users = (r.body?.messages ?? []).filter((x) => x.role === 'user');
  const c = users[users.length - 1]?.content;
  return typeof c === 'string' ? c : JSON.stringify(c);
};
/** The Markdown of an interactive card, and whether it still shows the streaming note. */
const cardText = (card) => card?.elements?.find((e) => e.tag === 'markdown')?.content ?? '';
const cardStreaming = (card) => (card?.elements ?? []).some((e) => e.tag === 'note');

describe('Feishu channel', { concurrency: 1 }, () => {
  let srv;
  let fake;
  let feishu;
  let admin;
  let bob;
  let events; // fawn's callback URL

  before(async () => {
    fake = await FakeOpenAI.start();
    feishu = await FakeFeishu.start();
    srv = await FawnServer.start({
      models: [fake.model()],
      channels: {
        feishu: {
          app_id: feishu.appId,
          app_secret: feishu.appSecret,
          verification_token: TOKEN,
          encrypt_key: KEY,
          api_base: feishu.apiBase,
          allow_insecure: true, // the fake platform speaks http on loopback
        },
      },
    });
    admin = await setupAdmin(srv);
    bob = await setupUser(srv, 'bob');
    events = `${srv.base}/api/channels/feishu/events`;
  });
  after(async () => {
    await srv?.stop();
    await feishu?.stop();
    await fake?.stop();
  });

  const api = (method, p, body, who = admin) => request(srv, method, p, { bearer: who.token, body });
  /** Delivers an event the way the platform does (encrypted, signed); opts plays an attacker. */
  const deliver = (payload, opts = {}) => feishu.deliver(events, payload, { encryptKey: KEY, ...opts });
  const text = (openId, chatId, words, more = {}) => messageEvent({ token: TOKEN, openId, chatId, type: 'text', content: { text: words }, ...more });

  /** What fawn has shown in chatId: text messages and cards (as they stand now). */
  const shown = (chatId) =>
    feishu.messagesTo(chatId).map((m) => (m.msgType === 'text' ? m.content.text : m.msgType === 'interactive' ? cardText(m.content) : ''));
  const waitShown = (chatId, re) => waitFor(() => shown(chatId).find((t) => re.test(t)), undefined, `${re} in ${chatId}: ${JSON.stringify(shown(chatId))}`);

  /** Binds open id openId (chat chatId) to the fawn user who. */
  async function bind(openId, chatId, who) {
    const r = await api('POST', '/api/channels/feishu/connect', undefined, who);
    assert.equal(r.status, 200, r.text);
    const res = await deliver(text(openId, chatId, `/connect ${r.json.code}`));
    assert.equal(res.status, 200, res.text);
    await waitShown(chatId, /Connected/);
  }

  it('answers the URL verification with its challenge', async () => {
    const res = await deliver({ challenge: 'c-7f3a', token: TOKEN, type: 'url_verification' }, { noSignature: true });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json, { challenge: 'c-7f3a' });
    const forged = await deliver({ challenge: 'c-x', token: 'guess', type: 'url_verification' }, { noSignature: true });
    assert.equal(forged.status, 401, forged.text);
    assert.ok(!forged.text.includes('c-x'));
  });

  it('refuses forged callbacks and runs nothing', async () => {
    await bind('ou_forged_target', 'oc_forged', admin);
    const m = uniq('forged');
    const before = feishu.messagesTo('oc_forged').length;
    const evt = () => text('ou_forged_target', 'oc_forged', `run ${m}`);
    const attempts = {
      'bad signature': await deliver(evt(), { signWith: 'guessed-key' }),
      'no signature': await deliver(evt(), { noSignature: true }),
      'wrong token': await deliver({ ...evt(), header: { ...evt().header, token: 'guess' } }),
      'undecryptable body': await deliver(evt(), { rawBody: JSON.stringify({ encrypt: Buffer.alloc(48, 7).toString('base64') }) }),
      'not base64': await deliver(evt(), { rawBody: '{"encrypt":"%%%not base64%%%"}' }),
      plaintext: await deliver(evt(), { plaintext: true }),
      'replayed later': await deliver(evt(), { timestamp: String(Math.floor(Date.now() / 1000) - 3600) }),
    };
    for (const [what, res] of Object.entries(attempts)) assert.equal(res.status, 401, `${what}: ${res.status} ${res.text}`);
    // a genuine event afterwards is run: the refusals did not just lag behind
    const ok = uniq('genuine');
    fake.route(`run ${ok}`, reply(`ran ${ok}`));
    await deliver(text('ou_forged_target', 'oc_forged', `run ${ok}`));
    await waitShown('oc_forged', new RegExp(`ran ${ok}`));
    assert.equal(requestsFor(fake, m).length, 0);
    assert.ok(!shown('oc_forged').slice(before).some((t) => t.includes(m)));
  });

  it('refuses an unbound chat user and runs nothing', async () => {
    const m = uniq('stranger');
    const res = await deliver(text('ou_stranger', 'oc_stranger', `hello ${m}`));
    assert.equal(res.status, 200, res.text);
    await waitShown('oc_stranger', /not connected to a fawn account/);
    assert.equal(requestsFor(fake, m).length, 0);
    // the answer is a reply to the stranger's own message
    assert.ok(feishu.messagesTo('oc_stranger').every((x) => x.kind === 'reply'));
  });

  it('answers a text in a card updated while the run streams, and sends the artifact back as a file', async () => {
    await bind('ou_admin', 'oc_admin', admin);
    const chat = 'oc_admin_card';
    const m = uniq('report');
    const h = held(`the summary of ${m} is ready`, `writing the summary of ${m}`);
    fake.route(`summarize ${m}`, reply('', [call('write_file', { path: '/mnt/user-data/outputs/summary.md', content: `# summary ${m}\n` })]));
    fake.route(`summarize ${m}`, reply('', [call('present_files', { filepaths: ['/mnt/user-data/outputs/summary.md'] })]));
    fake.route(`summarize ${m}`, h.step);
    const before = feishu.patches.length;
    let card;
    try {
      const res = await deliver(text('ou_admin', chat, `summarize ${m}`));
      assert.equal(res.status, 200, res.text);
      // while the run is held, the card already shows its tool progress
      const progress = await waitFor(
        () => feishu.patches.slice(before).find((p) => /write_file|present_files/.test(cardText(p.content))),
        undefined,
        'a card showing the run\'s progress',
      );
      card = feishu.messagesTo(chat).find((x) => x.messageId === progress.messageId);
      assert.equal(card?.msgType, 'interactive');
      const during = feishu.patches.slice(before).filter((p) => p.messageId === card.messageId);
      assert.ok(during.every((p) => cardStreaming(p.content)), JSON.stringify(during));
      assert.ok(!during.some((p) => cardText(p.content).includes(`the summary of ${m} is ready`)));
    } finally {
      h.release();
    }
    // the last update: the answer, out of its streaming state
    await waitFor(
      () => feishu.patches.find((p) => p.messageId === card.messageId && !cardStreaming(p.content) && cardText(p.content).includes(`the summary of ${m} is ready`)),
      undefined,
      'the final card',
    );
    // the artifact: uploaded, then sent into the chat as a file message
    const up = await waitFor(() => feishu.uploads.find((u) => u.kind === 'file' && u.name === 'summary.md'), undefined, 'the artifact upload');
    assert.equal(up.data.toString(), `# summary ${m}\n`);
    await waitFor(() => feishu.messagesTo(chat).find((x) => x.msgType === 'file' && x.content.file_key === up.key), undefined, 'the file message');
  });

  it('stores an image and a file for the agent', async () => {
    const m = uniq('files');
    // a file message: named as sent
    const fileMsg = `om_file_${m.replace(/-/g, '_')}`;
    feishu.addResource(fileMsg, 'file_v3_report', Buffer.from(`quarterly numbers ${m}\n`), 'file');
    fake.route('report.txt', reply('', [call('read_file', { path: '/mnt/user-data/uploads/report.txt' })]));
    fake.route('report.txt', reply(`read ${m}`));
    await deliver(messageEvent({ token: TOKEN, openId: 'ou_admin', chatId: 'oc_admin_file', messageId: fileMsg, type: 'file', content: { file_key: 'file_v3_report', file_name: 'report.txt' } }));
    await waitShown('oc_admin_file', new RegExp(`read ${m}`));
    const toolResult = requestsFor(fake, 'report.txt').flatMap((r) => r.body.messages).find((x) => x.role === 'tool');
    assert.match(JSON.stringify(toolResult), new RegExp(`quarterly numbers ${m}`));
    assert.ok(feishu.downloads.some((d) => d.messageId === fileMsg && d.key === 'file_v3_report' && d.type === 'file'));
    // an image in a rich-text post with words
    const postMsg = `om_post_${m.replace(/-/g, '_')}`;
    const png = Buffer.from(`\x89PNG fake picture ${m}`);
    feishu.addResource(postMsg, 'img_v3_picture1', png, 'image');
    fake.route(`look ${m}`, reply(`saw ${m}`));
    await deliver(messageEvent({
      token: TOKEN, openId: 'ou_admin', chatId: 'oc_admin_image', messageId: postMsg, type: 'post',
      content: { title: '', content: [[{ tag: 'text', text: `look ${m}` }], [{ tag: 'img', image_key: 'img_v3_picture1' }]] },
    }));
    await waitShown('oc_admin_image', new RegExp(`saw ${m}`));
    const human = humanText(requestsFor(fake, `look ${m}`)[0]);
    const stored = /\/mnt\/user-data\/uploads\/([A-Za-z0-9_.-]+\.png)/.exec(human);
    assert.ok(stored, human);
    assert.ok(feishu.downloads.some((d) => d.messageId === postMsg && d.type === 'image'));
    // the picture, in the uploads of the conversation's thread
    const threads = await api('POST', '/api/threads/search', { limit: 50 });
    const copies = threads.json
      .map((t) => path.join(srv.userData(admin.id, t.thread_id), 'uploads', stored[1]))
      .filter((p) => fs.existsSync(p));
    assert.equal(copies.length, 1, JSON.stringify(copies));
    assert.deepEqual(fs.readFileSync(copies[0]), png);
    // a resource the platform will not give: the message still reaches the agent, marked
    const gone = `om_gone_${m.replace(/-/g, '_')}`;
    feishu.failResource(gone, 'file_v3_gone');
    fake.route('failed to load', reply(`noted ${m}`));
    await deliver(messageEvent({ token: TOKEN, openId: 'ou_admin', chatId: 'oc_admin_gone', messageId: gone, type: 'file', content: { file_key: 'file_v3_gone', file_name: 'gone.pdf' } }));
    await waitShown('oc_admin_gone', new RegExp(`noted ${m}`));
  });

  it('runs a redelivered event once', async () => {
    const m = uniq('dup');
    const evt = text('ou_admin', 'oc_admin_dup', `once ${m}`);
    fake.route(`once ${m}`, reply(`answered ${m}`));
    for (let i = 0; i < 3; i++) assert.equal((await deliver(evt)).status, 200);
    await waitShown('oc_admin_dup', new RegExp(`answered ${m}`));
    assert.equal((await deliver(evt)).status, 200);
    const later = uniq('later');
    fake.route(`after ${later}`, reply(`answered ${later}`));
    await deliver(text('ou_admin', 'oc_admin_later', `after ${later}`));
    await waitShown('oc_admin_later', new RegExp(`answered ${later}`));
    assert.equal(requestsFor(fake, `once ${m}`).filter((r) => humanText(r).includes(`once ${m}`)).length, 1);
    assert.equal(shown('oc_admin_dup').filter((t) => t.includes(`answered ${m}`)).length, 1);
  });

  it('binds owner-scoped: another user cannot take the binding', async () => {
    await bind('ou_bob', 'oc_bob', bob);
    const list = await api('GET', '/api/channels/connections', undefined, bob);
    assert.ok(list.json.connections.some((c) => c.provider === 'feishu' && c.platform_user_id === 'ou_bob'), list.text);
    const mine = list.json.connections.find((c) => c.platform_user_id === 'ou_bob');
    const del = await api('DELETE', `/api/channels/connections/${mine.id}`, undefined, admin);
    assert.equal(del.status, 404);
    const m = uniq('bob');
    fake.route(`bob asks ${m}`, reply(`bob answered ${m}`));
    await deliver(text('ou_bob', 'oc_bob', `bob asks ${m}`));
    await waitShown('oc_bob', new RegExp(`bob answered ${m}`));
    const theirs = await api('POST', '/api/threads/search', { limit: 50 }, bob);
    assert.ok(theirs.json.some((t) => t.metadata?.channel === 'feishu'), theirs.text);
  });
});
