// A fake DingTalk on loopback, written from the platform's documented
// shapes: the OpenAPI (access token, Stream connection ticket, robot file
// download, robot sends, media upload, AI cards), the download URLs it
// hands out, and the Stream mode WebSocket (SYSTEM ping, CALLBACK frames
// acknowledged by messageId). Tests deliver robot messages through the
// stream and read what the bot sent.
import http from 'node:http';
import { WebSocketServer } from 'ws';

import { WAIT_CEILING_MS, sleep } from './server.mjs';

export const CLIENT_ID = 'ding-client-e2e';
export const CLIENT_SECRET = 'ding-secret-e2e-7f3a';
export const ROBOT_CODE = 'robot-e2e';

let frameSeq = 1;

export class FakeDingTalk {
  constructor() {
    this.tokens = new Set();
    this.tickets = new Set();
    this.files = new Map(); // download code -> {body: Buffer} | {size} | {status}
    this.sent = []; // {kind, to, body, msgKey, param}
    this.cards = []; // {op, body}
    this.media = new Map(); // media_id -> {name, body}
    this.acks = new Map(); // frame messageId -> ack
    this.calls = []; // every OpenAPI request {path, body}
    this.connections = 0;
    this.ws = null;
    this.sockets = new Set();
  }

  static async start() {
    const f = new FakeDingTalk();
    f.server = http.createServer((req, res) => f.#handle(req, res).catch((e) => {
      res.writeHead(500);
      res.end(String(e));
    }));
    f.server.on('connection', (s) => {
      f.sockets.add(s);
      s.on('close', () => f.sockets.delete(s));
    });
    f.wss = new WebSocketServer({ noServer: true });
    f.server.on('upgrade', (req, socket, head) => {
      const url = new URL(req.url, 'http://x');
      if (url.pathname !== '/connect' || !f.tickets.has(url.searchParams.get('ticket'))) {
        socket.write('HTTP/1.1 401 Unauthorized\r\n\r\n');
        socket.destroy();
        return;
      }
      f.tickets.delete(url.searchParams.get('ticket')); // one use
      f.wss.handleUpgrade(req, socket, head, (ws) => f.#accept(ws));
    });
    await new Promise((resolve) => f.server.listen(0, '127.0.0.1', resolve));
    f.port = f.server.address().port;
    f.base = `http://127.0.0.1:${f.port}`;
    return f;
  }

  /** The channels.dingtalk config for fawn: everything on this loopback server. */
  config(extra = {}) {
    return {
      client_id: CLIENT_ID,
      client_secret: CLIENT_SECRET,
      robot_code: ROBOT_CODE,
      api_base: this.base,
      oapi_base: this.base,
      allow_insecure: true,
      download_allow: ['127.0.0.1'],
      ...extra,
    };
  }

  #accept(ws) {
    this.connections++;
    this.ws = ws;
    ws.on('message', (data) => {
      let m;
      try { m = JSON.parse(String(data)); } catch { return; }
      const id = m?.headers?.messageId;
      if (id) this.acks.set(id, m);
    });
    ws.on('close', () => {
      if (this.ws === ws) this.ws = null;
    });
  }

  /** Waits until fawn holds a stream connection (the n-th, when given). */
  async connected(n = 1) {
    await waitUntil(() => this.ws && this.connections >= n, `DingTalk stream connection ${n}`);
  }

  #frame(type, topic, data, messageId = `frame-${frameSeq++}`) {
    return { specVersion: '1.0', type, headers: { appId: 'app', connectionId: 'c', contentType: 'application/json', messageId, time: String(Date.now()), topic }, data };
  }

  /** Sends a SYSTEM ping; resolves with fawn's answer. */
  async ping() {
    const f = this.#frame('SYSTEM', 'ping', JSON.stringify({ opaque: `op-${frameSeq}` }));
    this.ws.send(JSON.stringify(f));
    return waitUntil(() => this.acks.get(f.headers.messageId), 'a pong');
  }

  /** Delivers a robot message (the callback data object); resolves with its ack. */
  async deliver(msg, { frameId } = {}) {
    await this.connected();
    const f = this.#frame('CALLBACK', '/v1.0/im/bot/messages/get', JSON.stringify(msg), frameId);
    this.acks.delete(f.headers.messageId);
    this.ws.send(JSON.stringify(f));
    return waitUntil(() => this.acks.get(f.headers.messageId), `the ack of ${msg.msgId}`);
  }

  /** A file served at a download code: bytes, or {size} of zeros, or {status}. */
  serve(code, content) {
    this.files.set(code, Buffer.isBuffer(content) || typeof content === 'string' ? { body: Buffer.from(content) } : content);
  }

  /** Texts sent to a user (one-to-one) or a group, in order. */
  textsTo(target) {
    return this.sent.filter((s) => s.to === target && (s.kind === 'text' || s.kind === 'markdown'))
      .map((s) => s.text);
  }

  async waitText(target, pattern, what = `a text to ${target} matching ${pattern}`) {
    return waitUntil(() => this.textsTo(target).find((t) => pattern.test(t)), what);
  }

  async stop() {
    for (const c of this.wss.clients) c.terminate();
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }

  #authorized(req) {
    return this.tokens.has(req.headers['x-acs-dingtalk-access-token']);
  }

  async #handle(req, res) {
    const url = new URL(req.url, 'http://x');
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks);
    let body = null;
    if ((req.headers['content-type'] || '').startsWith('application/json')) {
      try { body = JSON.parse(String(raw)); } catch { /* kept null */ }
    }
    this.calls.push({ method: req.method, path: url.pathname, body });
    const json = (status, obj) => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(obj));
    };
    const p = url.pathname;
    if (req.method === 'POST' && p === '/v1.0/oauth2/accessToken') {
      if (body?.appKey !== CLIENT_ID || body?.appSecret !== CLIENT_SECRET) return json(400, { code: 'invalidClient', message: 'bad app' });
      const t = `tok-${Math.random().toString(16).slice(2)}`;
      this.tokens.add(t);
      return json(200, { accessToken: t, expireIn: 7200 });
    }
    if (req.method === 'POST' && p === '/v1.0/gateway/connections/open') {
      if (body?.clientId !== CLIENT_ID || body?.clientSecret !== CLIENT_SECRET) return json(401, { message: 'bad client' });
      const topics = (body.subscriptions || []).map((s) => `${s.type} ${s.topic}`);
      if (!topics.includes('CALLBACK /v1.0/im/bot/messages/get')) return json(400, { message: 'no robot subscription' });
      const ticket = `ticket-${Math.random().toString(16).slice(2)}`;
      this.tickets.add(ticket);
      return json(200, { endpoint: `ws://127.0.0.1:${this.port}/connect`, ticket });
    }
    if (req.method === 'POST' && p === '/v1.0/robot/messageFiles/download') {
      if (!this.#authorized(req)) return json(401, { message: 'token' });
      if (body?.robotCode !== ROBOT_CODE) return json(400, { message: 'robotCode' });
      const f = this.files.get(body?.downloadCode);
      if (!f) return json(404, { message: 'unknown downloadCode' });
      if (f.redirectTo) return json(200, { downloadUrl: f.redirectTo });
      return json(200, { downloadUrl: `${this.base}/files/${encodeURIComponent(body.downloadCode)}` });
    }
    if (req.method === 'GET' && p.startsWith('/files/')) {
      const f = this.files.get(decodeURIComponent(p.slice('/files/'.length)));
      if (!f) return json(404, {});
      if (f.status) return json(f.status, { message: 'failing on purpose' });
      if (f.size) {
        res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
        const block = Buffer.alloc(1 << 20);
        let left = f.size;
        while (left > 0 && !res.destroyed) {
          const n = Math.min(left, block.length);
          if (!res.write(block.subarray(0, n))) await new Promise((r) => res.once('drain', r).once('close', r));
          left -= n;
        }
        return res.end();
      }
      res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
      return res.end(f.body);
    }
    if (req.method === 'POST' && (p === '/v1.0/robot/oToMessages/batchSend' || p === '/v1.0/robot/groupMessages/send')) {
      if (!this.#authorized(req)) return json(401, { message: 'token' });
      if (body?.robotCode !== ROBOT_CODE) return json(400, { message: 'robotCode' });
      const to = p.includes('group') ? body.openConversationId : body.userIds?.[0];
      const param = JSON.parse(body.msgParam || '{}');
      const kind = { sampleText: 'text', sampleMarkdown: 'markdown', sampleFile: 'file', sampleImageMsg: 'image' }[body.msgKey];
      if (!kind || !to) return json(400, { message: 'bad send' });
      this.sent.push({ kind, to, msgKey: body.msgKey, param, text: param.content ?? param.text });
      return json(200, { processQueryKey: `q-${this.sent.length}` });
    }
    if (req.method === 'POST' && p === '/media/upload') {
      if (!this.tokens.has(url.searchParams.get('access_token'))) return json(200, { errcode: 40014, errmsg: 'token' });
      const text = raw.toString('latin1');
      const name = /filename="([^"]*)"/.exec(text)?.[1];
      const start = text.indexOf('\r\n\r\n') + 4;
      const end = text.lastIndexOf('\r\n--');
      const id = `media-${this.media.size + 1}`;
      this.media.set(id, { name, type: url.searchParams.get('type'), body: raw.subarray(start, end) });
      return json(200, { errcode: 0, errmsg: 'ok', media_id: id, type: url.searchParams.get('type') });
    }
    if (p === '/v1.0/card/instances/createAndDeliver' || p === '/v1.0/card/streaming') {
      if (!this.#authorized(req)) return json(401, { message: 'token' });
      this.cards.push({ op: p.endsWith('streaming') ? 'stream' : 'create', body });
      return json(200, { success: true, result: {} });
    }
    return json(404, { message: `no route ${req.method} ${p}` });
  }

  /** The files sent to target: [{name, body}]. */
  filesTo(target) {
    return this.sent.filter((s) => s.to === target && (s.kind === 'file' || s.kind === 'image'))
      .map((s) => ({ kind: s.kind, ...this.media.get(s.param.mediaId || s.param.photoURL) }));
  }
}

/** A robot message as DingTalk's callback data has it. */
export function robotMessage({ msgId, sender, conv, group = false, msgtype = 'text', text, content }) {
  const m = {
    conversationId: conv || `conv-${sender}`,
    conversationType: group ? '2' : '1',
    chatbotUserId: 'bot',
    msgId,
    senderNick: `nick ${sender}`,
    senderStaffId: sender,
    senderId: `$:LWCP_v1:$${sender}`,
    sessionWebhook: 'https://oapi.dingtalk.com/robot/sendBySession?session=x',
    sessionWebhookExpiredTime: Date.now() + 3600000,
    createAt: Date.now(),
    robotCode: ROBOT_CODE,
    msgtype,
  };
  if (msgtype === 'text') m.text = { content: text };
  else m.content = content;
  return m;
}

async function waitUntil(pred, what) {
  const deadline = Date.now() + WAIT_CEILING_MS;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
