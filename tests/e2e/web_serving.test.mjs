// fawn serve answers its web UI: the page at / and every file it loads,
// public, each with the page's Content-Security-Policy, nosniff, a strong
// ETag that a revalidation answers with 304, and the right content type;
// every other path keeps its answer.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, request } from './lib/server.mjs';

const WEB_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
  "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const TYPES = { html: 'text/html; charset=utf-8', js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8', svg: 'image/svg+xml' };

function assertWebHeaders(res, file) {
  assert.equal(res.status, 200, `${file}: ${res.status}`);
  assert.equal(res.headers['content-type'], TYPES[file.split('.').pop()], file);
  assert.equal(res.headers['content-security-policy'], WEB_CSP, file);
  assert.equal(res.headers['x-content-type-options'], 'nosniff', file);
  assert.equal(res.headers['cache-control'], 'no-cache', file);
  assert.match(res.headers.etag, /^"[0-9a-f]{32}"$/, file);
}

/** The /assets/ files a page or script names (src, href, import specifiers). */
function referenced(text) {
  const names = new Set();
  for (const m of text.matchAll(/(?:src|href)="\/assets\/([^"]+)"/g)) names.add(m[1]);
  for (const m of text.matchAll(/(?:from|import)\s*\(?\s*'\.\/([^']+)'/g)) names.add(m[1]);
  return names;
}

describe('the web UI is served by fawn serve', () => {
  let srv;
  before(async () => {
    srv = await FawnServer.start({});
  });
  after(async () => {
    await srv?.stop();
  });

  it('serves the page and every file it loads, transitively, with the page\'s headers', async () => {
    const page = await request(srv, 'GET', '/');
    assertWebHeaders(page, 'index.html');
    assert.match(page.text, /<script type="module" src="\/assets\/app\.js"><\/script>/);
    assert.ok(!/<script>|<script [^>]*>[^<]/.test(page.text), 'no inline script');
    const seen = new Set();
    const queue = [...referenced(page.text)];
    while (queue.length) {
      const name = queue.shift();
      if (seen.has(name)) continue;
      seen.add(name);
      const res = await request(srv, 'GET', `/assets/${name}`);
      assertWebHeaders(res, name);
      if (name.endsWith('.js') && !name.endsWith('.min.js')) queue.push(...referenced(res.text));
    }
    for (const name of ['app.js', 'style.css', 'icon.svg', 'marked.min.js', 'purify.min.js']) assert.ok(seen.has(name), name);
  });

  it('answers a revalidation of the current copy with 304, gzip to clients that take it', async () => {
    const first = await request(srv, 'GET', '/assets/purify.min.js');
    const again = await request(srv, 'GET', '/assets/purify.min.js', { headers: { 'If-None-Match': first.headers.etag } });
    assert.equal(again.status, 304);
    assert.equal(again.body.length, 0);
    const gz = await request(srv, 'GET', '/assets/purify.min.js', { headers: { 'Accept-Encoding': 'gzip' } });
    assert.equal(gz.headers['content-encoding'], 'gzip');
    assert.notEqual(gz.headers.etag, first.headers.etag);
    assert.ok(gz.body.length < first.body.length);
  });

  it('keeps every other path as it was: 404 outside /api, 401 inside, the page only at /', async () => {
    for (const p of ['/index.html', '/assets/index.html', '/assets/x.js', '/t/abc', '/favicon.ico']) {
      const res = await request(srv, 'GET', p);
      assert.equal(res.status, 404, p);
      assert.equal(res.headers['content-type'], 'application/json', p);
    }
    assert.equal((await request(srv, 'GET', '/api/threads')).status, 401);
    assert.equal((await request(srv, 'POST', '/', { body: '' })).status, 405);
  });
});
