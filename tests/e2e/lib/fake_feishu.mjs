// A fake Feishu/Lark open platform on loopback, written from the platform's
// documented shapes: the tenant token, message resource download, message
// send/reply, interactive card update (PATCH), image and file upload. It
// records everything it receives; tests read `sent`, `patches`, `uploads`
// and `downloads`. It also plays the platform's other half: event callbacks
// to fawn, schema 2.0, encrypted (AES-256-CBC, key = SHA-256 of the encrypt
// key, IV first) and signed (sha256 hex of timestamp + nonce + key + body).
import crypto from 'node:crypto';
import http from 'node:http';

import { WAIT_CEILING_MS, sleep } from './server.mjs';

// The platform's own upload limits (10 MiB image, 30 MiB file).
export const IMAGE_UPLOAD_MAX = 10 << 20;
export const FILE_UPLOAD_MAX = 30 << 20;
// A request body the fake reads at most: past the largest upload.
const BODY_MAX = FILE_UPLOAD_MAX + (1 << 20);

function json(res, status, obj) {
  const text = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

async function readBody(req) {
  const chunks = [];
  let n = 0;
  for await (const c of req) {
    n += c.length;
    if (n > BODY_MAX) throw new Error('request body too large');
    chunks.push(c);
  }
  return Buffer.concat(chunks);
}

export class FakeFeishu {
  constructor({ appId = 'cli_fake_app', appSecret = 'fake-app-secret', tokenExpire = 7200 } = {}) {
    this.appId = appId;
    this.appSecret = appSecret;
    this.tokenExpire = tokenExpire;
    this.tokens = new Set(); // tokens handed out and still valid
    this.tokenRequests = 0;
    this.resources = new Map(); // `${message_id}/${key}` -> {data, type} | {fail: {status, code, msg}}
    this.sent = []; // {kind: 'send'|'reply', chatId, replyTo, msgType, content, messageId}
    this.patches = []; // {messageId, content}
    this.uploads = []; // {kind: 'image'|'file', name, fileType, data, key}
    this.downloads = []; // {messageId, key, type}
    this.requests = []; // {method, path}
    this.failNext = []; // {match: (method, path) => bool, status, body}
    this.inboundChats = new Map(); // message_id of an event delivered -> its chat_id
    this.nextId = 1;
  }

  static async start(opts) {
    const f = new FakeFeishu(opts);
    f.server = http.createServer((req, res) => {
      f.#handle(req, res).catch((e) => json(res, 500, { code: 1, msg: String(e) }));
    });
    await new Promise((resolve) => f.server.listen(0, '127.0.0.1', resolve));
    f.port = f.server.address().port;
    f.apiBase = `http://127.0.0.1:${f.port}`;
    return f;
  }

  async stop() {
    this.server.closeAllConnections?.();
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** Makes a resource of message messageId downloadable: data (a Buffer). */
  addResource(messageId, key, data, type = 'file') {
    this.resources.set(`${messageId}/${key}`, { data, type });
  }

  /** Makes a resource fail with the platform's error answer. */
  failResource(messageId, key, status = 400, code = 234003, msg = 'File not in msg.') {
    this.resources.set(`${messageId}/${key}`, { fail: { status, code, msg } });
  }

  /** The next request that match(method, path) accepts is answered with status and body. */
  failOnce(match, status, body) {
    this.failNext.push({ match, status, body });
  }

  /** Every token handed out so far stops being valid (the platform rotated them). */
  expireTokens() {
    this.tokens.clear();
  }

  /** Resolves with pred()'s first truthy value, polling; throws past the ceiling. */
  async waitFor(pred, what = 'the fake Feishu platform to see it') {
    const until = Date.now() + WAIT_CEILING_MS;
    for (;;) {
      const v = pred();
      if (v) return v;
      if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
      await sleep(50);
    }
  }

  /** Messages (sends and replies) sent into chatId, in order. */
  messagesTo(chatId) {
    return this.sent.filter((m) => m.chatId === chatId);
  }

  /** Delivers an event callback to fawn's url (postEvent), remembering its chat for replies. */
  deliver(url, payload, opts) {
    const m = payload?.event?.message;
    if (m) this.inboundChats.set(m.message_id, m.chat_id);
    return postEvent(url, payload, opts);
  }

  #id(prefix) {
    return `${prefix}_fake_${this.nextId++}`;
  }

  #authorized(req) {
    const m = /^Bearer (\S+)$/.exec(req.headers.authorization || '');
    return m && this.tokens.has(m[1]);
  }

  async #handle(req, res) {
    const url = new URL(req.url, this.apiBase);
    const path = url.pathname;
    this.requests.push({ method: req.method, path });
    const body = await readBody(req);
    const injected = this.failNext.findIndex((f) => f.match(req.method, path));
    if (injected >= 0) {
      const [f] = this.failNext.splice(injected, 1);
      return json(res, f.status, f.body);
    }
    if (req.method === 'POST' && path === '/open-apis/auth/v3/tenant_access_token/internal') return this.#token(res, body);
    if (!this.#authorized(req)) return json(res, 400, { code: 99991663, msg: 'Invalid access token for authorization' });
    let m;
    if (req.method === 'GET' && (m = /^\/open-apis\/im\/v1\/messages\/([^/]+)\/resources\/([^/]+)$/.exec(path)))
      return this.#resource(res, m[1], m[2], url.searchParams.get('type'));
    if (req.method === 'POST' && path === '/open-apis/im/v1/messages') return this.#send(res, body, url);
    if (req.method === 'POST' && (m = /^\/open-apis\/im\/v1\/messages\/([^/]+)\/reply$/.exec(path))) return this.#reply(res, body, m[1]);
    if (req.method === 'PATCH' && (m = /^\/open-apis\/im\/v1\/messages\/([^/]+)$/.exec(path))) return this.#patch(res, body, m[1]);
    if (req.method === 'POST' && path === '/open-apis/im/v1/images') return this.#upload(req, res, body, 'image');
    if (req.method === 'POST' && path === '/open-apis/im/v1/files') return this.#upload(req, res, body, 'file');
    return json(res, 404, { code: 404, msg: `no route ${req.method} ${path}` });
  }

  #token(res, body) {
    this.tokenRequests++;
    let req;
    try {
      req = JSON.parse(body.toString('utf8'));
    } catch {
      return json(res, 400, { code: 10003, msg: 'invalid param' });
    }
    if (req.app_id !== this.appId || req.app_secret !== this.appSecret) return json(res, 400, { code: 10014, msg: 'app secret invalid' });
    const token = `t-${crypto.randomBytes(16).toString('hex')}`;
    this.tokens.add(token);
    return json(res, 200, { code: 0, msg: 'ok', tenant_access_token: token, expire: this.tokenExpire });
  }

  #resource(res, messageId, key, type) {
    this.downloads.push({ messageId, key, type });
    const r = this.resources.get(`${messageId}/${key}`);
    if (!r || (type !== 'image' && type !== 'file')) return json(res, 400, { code: 234003, msg: 'File not in msg.' });
    if (r.fail) return json(res, r.fail.status, { code: r.fail.code, msg: r.fail.msg });
    res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': r.data.length });
    res.end(r.data);
  }

  #message(res, body, record) {
    let req;
    try {
      req = JSON.parse(body.toString('utf8'));
    } catch {
      return json(res, 400, { code: 230001, msg: 'invalid request body' });
    }
    let content;
    try {
      content = JSON.parse(req.content);
    } catch {
      return json(res, 400, { code: 230001, msg: 'content is not a JSON string' });
    }
    const messageId = this.#id('om');
    this.sent.push({ ...record(req), msgType: req.msg_type, content, messageId });
    return json(res, 200, { code: 0, msg: 'success', data: { message_id: messageId, msg_type: req.msg_type } });
  }

  #send(res, body, url) {
    if (url.searchParams.get('receive_id_type') !== 'chat_id') return json(res, 400, { code: 99992402, msg: 'field validation failed' });
    return this.#message(res, body, (req) => ({ kind: 'send', chatId: req.receive_id, replyTo: null }));
  }

  #reply(res, body, messageId) {
    return this.#message(res, body, () => ({ kind: 'reply', chatId: this.inboundChats.get(messageId) ?? null, replyTo: messageId }));
  }

  #patch(res, body, messageId) {
    const msg = this.sent.find((m) => m.messageId === messageId);
    if (!msg || msg.msgType !== 'interactive') return json(res, 400, { code: 230001, msg: 'not a card this app sent' });
    let content;
    try {
      content = JSON.parse(JSON.parse(body.toString('utf8')).content);
    } catch {
      return json(res, 400, { code: 230001, msg: 'invalid request body' });
    }
    this.patches.push({ messageId, content });
    msg.content = content;
    return json(res, 200, { code: 0, msg: 'success', data: {} });
  }

  async #upload(req, res, body, kind) {
    const form = await new Response(body, { headers: { 'content-type': req.headers['content-type'] || '' } }).formData();
    const file = form.get(kind === 'image' ? 'image' : 'file');
    if (!file || typeof file === 'string') return json(res, 400, { code: 234001, msg: 'no file' });
    const data = Buffer.from(await file.arrayBuffer());
    if (data.length > (kind === 'image' ? IMAGE_UPLOAD_MAX : FILE_UPLOAD_MAX)) return json(res, 400, { code: 234006, msg: 'file size exceed the max value' });
    if (kind === 'image' && form.get('image_type') !== 'message') return json(res, 400, { code: 234001, msg: 'image_type' });
    const key = this.#id(kind === 'image' ? 'img' : 'file');
    this.uploads.push({ kind, name: kind === 'file' ? form.get('file_name') : file.name, fileType: form.get('file_type'), data, key });
    return json(res, 200, { code: 0, msg: 'success', data: kind === 'image' ? { image_key: key } : { file_key: key } });
  }
}

// ---- the platform's event callbacks to fawn ----

let eventCounter = 0;

/**
 * An im.message.receive_v1 event (schema 2.0). content is the message's
 * content object (it is sent as a JSON string, as the platform does).
 */
export function messageEvent({ token, chatId = 'oc_fake_chat', chatType = 'p2p', openId = 'ou_fake_user', messageId, eventId, type = 'text', content, mentions = [], senderType = 'user' }) {
  eventCounter++;
  return {
    schema: '2.0',
    header: {
      event_id: eventId || crypto.randomBytes(16).toString('hex'),
      event_type: 'im.message.receive_v1',
      create_time: String(Date.now()),
      token,
      app_id: 'cli_fake_app',
      tenant_key: 'fake_tenant',
    },
    event: {
      sender: { sender_id: { open_id: openId, union_id: `on_${openId}`, user_id: `u_${eventCounter}` }, sender_type: senderType, tenant_key: 'fake_tenant' },
      message: {
        message_id: messageId || `om_in_${crypto.randomBytes(8).toString('hex')}`,
        root_id: '',
        parent_id: '',
        create_time: String(Date.now()),
        chat_id: chatId,
        chat_type: chatType,
        message_type: type,
        content: JSON.stringify(content),
        mentions,
      },
    },
  };
}

/** base64(iv + AES-256-CBC(SHA-256(encryptKey), iv, plain)) as the platform sends it. */
export function encrypt(encryptKey, plain) {
  const key = crypto.createHash('sha256').update(encryptKey).digest();
  const iv = crypto.randomBytes(16);
  const c = crypto.createCipheriv('aes-256-cbc', key, iv);
  return Buffer.concat([iv, c.update(plain, 'utf8'), c.final()]).toString('base64');
}

/** X-Lark-Signature: sha256 hex of timestamp + nonce + encrypt key + body. */
export function sign(timestamp, nonce, encryptKey, body) {
  return crypto.createHash('sha256').update(timestamp + nonce + encryptKey + body).digest('hex');
}

/**
 * POSTs an event callback to url the way the platform does: encrypted
 * with encryptKey (when given) and signed with it. Options to play an
 * attacker: signWith (another key), timestamp, plaintext (no encryption
 * even with a key), rawBody (sent as is), noSignature.
 */
export async function postEvent(url, payload, { encryptKey, signWith, timestamp, plaintext = false, rawBody, noSignature = false } = {}) {
  const plain = JSON.stringify(payload);
  const body = rawBody ?? (encryptKey && !plaintext ? JSON.stringify({ encrypt: encrypt(encryptKey, plain) }) : plain);
  const headers = { 'Content-Type': 'application/json; charset=utf-8' };
  const key = signWith ?? encryptKey;
  if (key && !noSignature) {
    const ts = timestamp ?? String(Math.floor(Date.now() / 1000));
    const nonce = crypto.randomBytes(8).toString('hex');
    headers['X-Lark-Request-Timestamp'] = ts;
    headers['X-Lark-Request-Nonce'] = nonce;
    headers['X-Lark-Signature'] = sign(ts, nonce, key, body);
  }
  const res = await fetch(url, { method: 'POST', headers, body });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: left null
  }
  return { status: res.status, text, json: parsed };
}
