// Robustness: size caps, malformed bodies, early refusals a client can
// read, a graceful stop while an upload is in flight, and a crash in the
// middle of one.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import {
  FawnServer,
  eventually,
  listDir,
  multipart,
  request,
  setupAdmin,
  sleep,
  stagingFiles,
} from './lib/server.mjs';

const MiB = 1 << 20;

/**
 * Starts a request and returns {send(buf), end(buf), response} where
 * response resolves to {status, headers, text} (or rejects on a socket
 * error). The body goes out only as the test writes it.
 */
function openRequest(srv, method, p, headers) {
  const req = http.request({ host: '127.0.0.1', port: srv.port, method, path: p, headers, agent: false });
  const response = new Promise((resolve, reject) => {
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        let json;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
  });
  response.catch(() => {}); // observed by the caller when it matters
  req.flushHeaders();
  return {
    send: (buf) => new Promise((r) => req.write(buf, r)),
    end: (buf) => new Promise((r) => req.end(buf, r)),
    response,
    destroy: () => req.destroy(),
  };
}

/** Sends body as chunked transfer encoding (no Content-Length), in pieces. */
function chunkedRequest(srv, method, p, headers, body, pieces = 8) {
  const req = openRequest(srv, method, p, { ...headers, 'Transfer-Encoding': 'chunked' });
  (async () => {
    const step = Math.ceil(body.length / pieces);
    for (let i = 0; i < body.length; i += step) await req.send(body.subarray(i, i + step));
    await req.end();
  })().catch(() => {});
  return req.response;
}

describe('size caps and malformed bodies', () => {
  let srv;
  let admin;

  before(async () => {
    srv = await FawnServer.start({ uploads: { max_file_size_mb: 2, max_total_size_mb: 2 } });
    admin = await setupAdmin(srv);
    const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'rob' } });
    assert.equal(t.status, 200);
  });
  after(async () => {
    await srv?.stop();
  });

  it('a body over the route cap is 413, with or without Content-Length', async () => {
    const login = await request(srv, 'POST', '/api/v1/auth/login/local', {
      body: `username=x&password=${'p'.repeat(17 * 1024)}`,
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(login.status, 413, login.text);
    const big = Buffer.from(JSON.stringify({ thread_id: 'too-big', metadata: { pad: 'x'.repeat(MiB) } }));
    const create = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: big, headers: { 'Content-Type': 'application/json' } });
    assert.equal(create.status, 413, create.text);
    const chunked = await chunkedRequest(srv, 'POST', '/api/threads', { Authorization: `Bearer ${admin.token}`, 'Content-Type': 'application/json' }, big);
    assert.equal(chunked.status, 413, chunked.text);
    const patch = await chunkedRequest(srv, 'PATCH', '/api/threads/rob', { Authorization: `Bearer ${admin.token}`, 'Content-Type': 'application/json' }, big);
    assert.equal(patch.status, 413);
    const get = await request(srv, 'GET', '/api/threads/too-big', { bearer: admin.token });
    assert.equal(get.status, 404, 'nothing was created');
    const put = await chunkedRequest(
      srv,
      'PUT',
      '/api/threads/rob/artifacts/mnt/user-data/outputs/x.txt',
      { Authorization: `Bearer ${admin.token}`, 'Content-Type': 'application/json' },
      Buffer.from(JSON.stringify({ content: 'y'.repeat(13 * MiB), expected_sha256: '0'.repeat(64) })),
      32,
    );
    assert.equal(put.status, 413);
  });

  it('routes that take no body ignore a small one and refuse a large one (413)', async () => {
    const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'bodyless' } });
    assert.equal(t.status, 200);
    const get = await request(srv, 'GET', '/api/threads/bodyless', { bearer: admin.token, body: '{}' });
    assert.equal(get.status, 200, get.text);
    const bigGet = await request(srv, 'GET', '/api/threads/bodyless', { bearer: admin.token, body: 'x'.repeat(5000) });
    assert.equal(bigGet.status, 413, bigGet.text);
    const bigChunked = await chunkedRequest(srv, 'DELETE', '/api/threads/bodyless', { Authorization: `Bearer ${admin.token}` }, Buffer.alloc(8192, 0x20));
    assert.equal(bigChunked.status, 413, bigChunked.text);
    assert.equal((await request(srv, 'GET', '/api/threads/bodyless', { bearer: admin.token })).status, 200, 'a refused DELETE deletes nothing');
    const del = await request(srv, 'DELETE', '/api/threads/bodyless', { bearer: admin.token, body: {} });
    assert.equal(del.status, 200, del.text);
  });

  it('an upload over max_total_size sent chunked is 413 and leaves nothing', async () => {
    const mp = multipart([
      { filename: 'one.bin', content: Buffer.alloc(1.5 * MiB, 1) },
      { filename: 'two.bin', content: Buffer.alloc(1.5 * MiB, 2) },
    ]);
    const res = await chunkedRequest(srv, 'POST', '/api/threads/rob/uploads', { Authorization: `Bearer ${admin.token}`, 'Content-Type': mp.contentType }, mp.body, 16);
    assert.equal(res.status, 413, res.text);
    const dir = path.join(srv.userData(admin.id, 'rob'), 'uploads');
    await eventually(() => assert.deepEqual(listDir(dir), []));
  });

  it('malformed JSON is 400 or 422, never 500', async () => {
    const bad = [
      '{',
      '{"a":}',
      '{} {}',
      '[]',
      'null',
      '"text"',
      '12',
      '{"a": NaN}',
      '{"a": 1e999999}',
      Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]), // {"\xff\xfe":1}
      '{"a": "\\ud800"}',
      '['.repeat(12000), // deeper than any parser should follow, within every route's cap
      '{"a":'.repeat(2500) + '1' + '}'.repeat(2500),
      '\u0000',
    ];
    const routes = [
      ['POST', '/api/threads'],
      ['POST', '/api/threads/search'],
      ['PATCH', '/api/threads/rob'],
      ['POST', '/api/v1/auth/tokens'],
      ['POST', '/api/v1/auth/change-password'],
      ['PUT', '/api/threads/rob/artifacts/mnt/user-data/outputs/x.txt'],
    ];
    for (const [method, p] of routes) {
      for (const body of bad) {
        const res = await request(srv, method, p, { bearer: admin.token, body, headers: { 'Content-Type': 'application/json' } });
        assert.ok(res.status === 400 || res.status === 422, `${method} ${p} ${String(body).slice(0, 30)}: ${res.status} ${res.text}`);
        assert.equal(res.headers['content-type'], 'application/json');
      }
    }
    for (const body of bad) {
      const res = await request(srv, 'POST', '/api/v1/auth/login/local', { body, headers: { 'Content-Type': 'application/json' }, localAddress: '127.0.0.8' });
      assert.equal(res.status, 400, `login ${String(body).slice(0, 30)}: ${res.status}`);
    }
    const health = await request(srv, 'GET', '/health');
    assert.equal(health.status, 200);
  });

  it('wrong JSON types are 4xx, never 500', async () => {
    const cases = [
      ['POST', '/api/threads', { metadata: 'x' }],
      ['POST', '/api/threads', { thread_id: null, metadata: null }],
      ['POST', '/api/threads/search', { limit: 1.5 }],
      ['POST', '/api/threads/search', { limit: 1e30 }],
      ['POST', '/api/threads/search', { offset: '1' }],
      ['POST', '/api/threads/search', { status: 5 }],
      ['POST', '/api/threads/search', { values: { a: 1 } }],
      ['PATCH', '/api/threads/rob', { metadata: [1] }],
      ['PATCH', '/api/threads/rob', { status: 'busy' }],
      ['POST', '/api/v1/auth/tokens', { name: 'n'.repeat(200) }],
    ];
    for (const [method, p, body] of cases) {
      const res = await request(srv, method, p, { bearer: admin.token, body });
      if (method === 'POST' && p === '/api/threads' && body.thread_id === null) {
        assert.equal(res.status, 200, 'null thread_id means a new id');
        continue;
      }
      assert.ok(res.status >= 400 && res.status < 500, `${method} ${p} ${JSON.stringify(body)}: ${res.status} ${res.text}`);
    }
  });

  it('metadata over 64 KiB is 413 on create and on a PATCH that merges past it', async () => {
    const res = await request(srv, 'POST', '/api/threads', {
      bearer: admin.token,
      body: { thread_id: 'fat-meta', metadata: { pad: 'x'.repeat(65 * 1024) } },
    });
    assert.equal(res.status, 413, res.text.slice(0, 100));
    const get = await request(srv, 'GET', '/api/threads/fat-meta', { bearer: admin.token });
    assert.equal(get.status, 404, 'not stored');
    const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'half-meta', metadata: { a: 'x'.repeat(40 * 1024) } } });
    assert.equal(t.status, 200);
    const patch = await request(srv, 'PATCH', '/api/threads/half-meta', { bearer: admin.token, body: { metadata: { b: 'y'.repeat(40 * 1024) } } });
    assert.equal(patch.status, 413, patch.text.slice(0, 100));
    const after = await request(srv, 'GET', '/api/threads/half-meta', { bearer: admin.token });
    assert.deepEqual(Object.keys(after.json.metadata), ['a']);
  });
});

describe('early refusals reach a client that is still sending its body', () => {
  let srv;
  let admin;

  before(async () => {
    srv = await FawnServer.start({ uploads: { max_file_size_mb: 1, max_total_size_mb: 1 } });
    admin = await setupAdmin(srv);
  });
  after(async () => {
    await srv?.stop();
  });

  async function fetchStatus(headers, size) {
    const fd = new FormData();
    fd.append('files', new Blob([Buffer.alloc(size, 97)]), 'f.txt');
    try {
      const res = await fetch(`${srv.base}/api/threads/early/uploads`, { method: 'POST', body: fd, headers });
      await res.arrayBuffer();
      return res.status;
    } catch (e) {
      return `${e.message} (${e.cause?.code})`;
    }
  }

  it('an unauthenticated upload from fetch/FormData reads 401, not a reset connection', async () => {
    for (let i = 0; i < 5; i++) assert.equal(await fetchStatus({}, 1000), 401, `try ${i + 1}`);
  });

  it('a cookie upload without CSRF token from fetch/FormData reads 403, not a reset connection', async () => {
    for (let i = 0; i < 5; i++) assert.equal(await fetchStatus({ Cookie: admin.jar.header() }, 1000), 403, `try ${i + 1}`);
  });

  it('an upload whose Content-Length is over the cap is answered 413 before the body is sent (Expect: 100-continue)', async () => {
    const size = 4 * MiB;
    const res = await new Promise((resolve, reject) => {
      const req = http.request({
        host: '127.0.0.1',
        port: srv.port,
        method: 'POST',
        path: '/api/threads/early/uploads',
        agent: false,
        headers: {
          Authorization: `Bearer ${admin.token}`,
          'Content-Type': 'multipart/form-data; boundary=xx',
          'Content-Length': size,
          Expect: '100-continue',
        },
      });
      let continued = false;
      req.on('continue', () => {
        continued = true;
        req.end(Buffer.alloc(size, 0x41));
      });
      req.on('response', (r) => {
        const chunks = [];
        r.on('data', (c) => chunks.push(c));
        r.on('end', () => resolve({ status: r.statusCode, text: Buffer.concat(chunks).toString(), continued }));
      });
      req.on('error', reject);
      req.flushHeaders();
    });
    assert.equal(res.status, 413, res.text);
    assert.equal(res.continued, false, 'the server did not ask for the body');
    assert.match(JSON.parse(res.text).detail, /too large/i);
  });
});

describe('SIGTERM while an upload is in flight', () => {
  it('the upload completes (200) and serve exits 0', async () => {
    const srv = await FawnServer.start();
    let stopped = false;
    try {
      const admin = await setupAdmin(srv);
      const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'slow' } });
      assert.equal(t.status, 200);
      const content = Buffer.alloc(3 * MiB);
      for (let i = 0; i < content.length; i++) content[i] = i % 251;
      const mp = multipart([{ filename: 'slow.bin', content }]);
      const half = Math.floor(mp.body.length / 2);
      const req = openRequest(srv, 'POST', '/api/threads/slow/uploads', {
        Authorization: `Bearer ${admin.token}`,
        'Content-Type': mp.contentType,
        'Content-Length': mp.body.length,
      });
      await req.send(mp.body.subarray(0, half));
      const dir = path.join(srv.userData(admin.id, 'slow'), 'uploads');
      await eventually(() => assert.equal(stagingFiles(dir).length, 1, 'the upload is being staged'));
      srv.proc.kill('SIGTERM');
      await sleep(500);
      assert.equal(srv.proc.exitCode, null, 'serve waits for the request in progress');
      await req.end(mp.body.subarray(half));
      const res = await req.response;
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.json.files.map((f) => f.filename), ['slow.bin']);
      assert.ok(fs.readFileSync(path.join(dir, 'slow.bin')).equals(content), 'all bytes arrived');
      assert.deepEqual(stagingFiles(dir), []);
      stopped = true;
      await srv.stop({ alreadySignalled: true });
    } finally {
      if (!stopped) await srv.stop().catch(() => {});
    }
  });
});

describe('kill -9 in the middle of an upload', () => {
  it('a restart on the same home leaves no staging file and keeps the threads', async () => {
    const srv = await FawnServer.start();
    try {
      const admin = await setupAdmin(srv);
      for (const tid of ['kept-1', 'kept-2']) {
        const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: tid, metadata: { kept: true } } });
        assert.equal(t.status, 200);
      }
      const done = multipart([{ filename: 'done.txt', content: 'finished before the crash' }]);
      const up = await request(srv, 'POST', '/api/threads/kept-1/uploads', { bearer: admin.token, body: done.body, headers: { 'Content-Type': done.contentType } });
      assert.equal(up.status, 200);
      const mp = multipart([{ filename: 'cut.bin', content: Buffer.alloc(2 * MiB, 7) }]);
      const req = openRequest(srv, 'POST', '/api/threads/kept-1/uploads', {
        Authorization: `Bearer ${admin.token}`,
        'Content-Type': mp.contentType,
        'Content-Length': mp.body.length,
      });
      await req.send(mp.body.subarray(0, mp.body.length / 2));
      const dir = path.join(srv.userData(admin.id, 'kept-1'), 'uploads');
      await eventually(() => assert.equal(stagingFiles(dir).length, 1));
      await srv.kill9();
      await req.response.then(
        () => assert.fail('no answer is expected from a killed server'),
        () => {},
      );
      assert.equal(stagingFiles(dir).length, 1, 'the crash left a staging file');
      // A thread deletion cut short by the crash leaves a directory like this one.
      const threads = path.join(srv.home, 'users', admin.id, 'threads');
      fs.mkdirSync(path.join(threads, '.deleted-gone-0123456789abcdef', 'user-data', 'outputs'), { recursive: true });

      await srv.restart();
      assert.deepEqual(stagingFiles(dir), [], 'start swept the staging file');
      assert.deepEqual(listDir(dir), ['done.txt']);
      assert.ok(!listDir(threads).some((n) => n.startsWith('.deleted-')), 'start finished the deletion');
      for (const tid of ['kept-1', 'kept-2']) {
        const g = await request(srv, 'GET', `/api/threads/${tid}`, { bearer: admin.token });
        assert.equal(g.status, 200, `${tid}: ${g.text}`);
      }
      const me = await request(srv, 'GET', '/api/v1/auth/me', { jar: admin.jar });
      assert.equal(me.status, 200, 'sessions survive a restart');
      const search = await request(srv, 'POST', '/api/threads/search', { bearer: admin.token, body: { metadata: { kept: true } } });
      assert.deepEqual(search.json.map((t) => t.thread_id).sort(), ['kept-1', 'kept-2']);
      const list = await request(srv, 'GET', '/api/threads/kept-1/uploads/list', { bearer: admin.token });
      assert.deepEqual(list.json.files.map((f) => f.filename), ['done.txt']);
    } finally {
      await srv.stop();
    }
  });
});
