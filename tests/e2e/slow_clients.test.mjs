// Slow clients: connections that send half a request head and then trickle
// (slowloris). One address holds at most its share of the connection slots,
// another address is still served, a head that has not arrived by the
// deadline is cut off however slowly it trickles, and a long-lived SSE
// follower (whose head arrived long ago) is not. On loopback every 127.x.y.z
// is this host, so distinct source addresses stand for distinct clients.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, eventually, request, setupAdmin } from './lib/server.mjs';
import { FakeOpenAI, held as heldReply } from './lib/fake_openai.mjs';

// Ceilings that only catch a hang: the events they wait for take a second or two.
const CLOSE_CEILING_MS = 60000;
const SETTLE_CEILING_MS = 30000;

/**
 * A connection from localAddress that sends the start of a request head and
 * never finishes it; with trickleMs it sends one more header byte that often.
 * Resolves once connected; .closed resolves when the server closed it.
 */
function halfSent(srv, localAddress, { trickleMs } = {}) {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port: srv.port, localAddress });
    const held = { socket, isClosed: false };
    let timer;
    held.closed = new Promise((done) => {
      socket.on('close', () => {
        clearInterval(timer);
        held.isClosed = true;
        done();
      });
    });
    socket.on('error', () => {}); // a refused or reset connection is just closed
    socket.once('connect', () => {
      socket.write('GET /health HTTP/1.1\r\nHost: fawn\r\nX-Slow: ');
      if (trickleMs) timer = setInterval(() => socket.writable && socket.write('a'), trickleMs);
      resolve(held);
    });
    socket.once('error', (e) => !socket.connecting || reject(e));
  });
}

async function openMany(srv, localAddress, n, opts) {
  const all = [];
  for (let i = 0; i < n; i++) all.push(await halfSent(srv, localAddress, opts));
  return all;
}

/** Resolves as promise does; rejects with what when that takes past ms (a hang). */
async function within(promise, ms, what) {
  let timer;
  const ceiling = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(what)), ms)));
  try {
    return await Promise.race([promise, ceiling]);
  } finally {
    clearTimeout(timer);
  }
}

const health = (srv, localAddress) => request(srv, 'GET', '/health', { localAddress, timeoutMs: 20000 });

function closeAll(held) {
  for (const h of held) h.socket.destroy();
}

describe('one address cannot take every connection slot', () => {
  let srv;
  const held = [];
  before(async () => {
    srv = await FawnServer.start({
      server: { max_connections: 32, max_connections_per_address: 8, request_head_timeout_s: 600 },
    });
  });
  after(async () => {
    closeAll(held);
    await srv?.stop();
  });

  it('keeps 8 of 40 half-sent connections from one address and serves another address', async () => {
    held.push(...(await openMany(srv, '127.0.0.1', 40)));
    await eventually(() => assert.ok(held.filter((h) => h.isClosed).length >= 32), SETTLE_CEILING_MS);
    assert.equal(held.filter((h) => !h.isClosed).length, 8, 'the cap holds, and only the cap');
    const other = await health(srv, '127.0.0.2');
    assert.equal(other.status, 200, other.text);
    assert.equal(other.json.status, 'healthy');
    // The address at its cap gets no further connection...
    await assert.rejects(health(srv, '127.0.0.1'));
    // ...until one of its own closes.
    held.find((h) => !h.isClosed).socket.destroy();
    await eventually(async () => assert.equal((await health(srv, '127.0.0.1')).status, 200), SETTLE_CEILING_MS);
  });
});

describe('a trusted proxy speaks for many clients', () => {
  let srv;
  const held = [];
  before(async () => {
    srv = await FawnServer.start({
      server: { max_connections: 32, max_connections_per_address: 4, trusted_proxies: ['127.0.0.3'] },
    });
  });
  after(async () => {
    closeAll(held);
    await srv?.stop();
  });

  it('is not held to the per-address cap', async () => {
    held.push(...(await openMany(srv, '127.0.0.3', 10)));
    const res = await health(srv, '127.0.0.3');
    assert.equal(res.status, 200, res.text);
    assert.ok(held.every((h) => !h.isClosed), 'the proxy keeps every connection');
  });
});

describe('the request head deadline', () => {
  let srv;
  let fake;
  const held = [];
  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model()], server: { request_head_timeout_s: 2 } });
  });
  after(async () => {
    closeAll(held);
    await srv?.stop();
    await fake?.stop();
  });

  it('closes connections whose head trickles in past it, and serves others meanwhile', async () => {
    // A byte every 200 ms: an idle timeout would never fire.
    const slow = await openMany(srv, '127.0.0.1', 20, { trickleMs: 200 });
    held.push(...slow);
    const other = await health(srv, '127.0.0.2');
    assert.equal(other.status, 200, other.text);
    await within(Promise.all(slow.map((h) => h.closed)), CLOSE_CEILING_MS, 'slow heads were not cut off');
  });

  it('does not cut off an SSE follower whose run outlives it', async () => {
    const admin = await setupAdmin(srv);
    const thread = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: {} });
    assert.equal(thread.status, 200, thread.text);
    const { step, release } = heldReply('finally done');
    fake.queue(step);
    // The stream over a raw connection: a client library would reconnect.
    let text = '';
    const stream = new Promise((resolve, reject) => {
      const req = http.request({
        host: '127.0.0.1', port: srv.port, method: 'POST', agent: false,
        path: `/api/threads/${thread.json.thread_id}/runs/stream`,
        headers: { Authorization: `Bearer ${admin.token}`, 'Content-Type': 'application/json' },
      }, (res) => {
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', resolve);
        res.on('aborted', () => reject(new Error('the stream was cut off')));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'wait' }] } }));
    });
    await eventually(() => assert.match(text, /event: metadata/), SETTLE_CEILING_MS);
    // A connection opened after the stream began is cut off at its deadline,
    // which is past the one the stream would have had.
    const canary = await halfSent(srv, '127.0.0.1');
    held.push(canary);
    await within(canary.closed, CLOSE_CEILING_MS, 'the canary was not cut off');
    release();
    await within(stream, CLOSE_CEILING_MS, 'the stream did not end');
    assert.match(text, /finally done/);
    assert.match(text, /event: end/);
  });
});
