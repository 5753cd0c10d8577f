// Artifacts: serving thread files (types, dispositions, ranges) and saving
// edits of text files in outputs, against traversal in every encoding,
// planted symlinks and hard links, NUL bytes and stale hashes.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, listDir, request, setupAdmin, sha256, stagingFiles } from './lib/server.mjs';

const TID = 'art';
const BASE = `/api/threads/${TID}/artifacts`;
const OUT = `${BASE}/mnt/user-data/outputs`;
const MiB = 1 << 20;
// Waits for a download cut short; the server's idle timeout (60 s) is what a
// hang would take.
const TRUNCATED_CLOSE_CEILING_MS = 30000;

describe('artifacts', () => {
  let srv;
  let admin;
  let out; // host path of the thread's outputs
  let uploads;
  let passwd; // the host's /etc/passwd, which must never come back

  before(async () => {
    srv = await FawnServer.start();
    admin = await setupAdmin(srv);
    const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: TID } });
    assert.equal(t.status, 200, t.text);
    const other = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'art-other' } });
    assert.equal(other.status, 200);
    out = path.join(srv.userData(admin.id, TID), 'outputs');
    uploads = path.join(srv.userData(admin.id, TID), 'uploads');
    passwd = fs.readFileSync('/etc/passwd', 'utf8');
    fs.writeFileSync(path.join(out, 'report.txt'), 'hello world');
    fs.writeFileSync(path.join(out, 'page.html'), '<script>alert(document.cookie)</script>');
    fs.writeFileSync(path.join(out, 'pic.svg'), '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>');
    fs.writeFileSync(path.join(out, 'data.xml'), '<a/>');
    fs.writeFileSync(path.join(out, 'doc.xhtml'), '<html/>');
    fs.writeFileSync(path.join(out, 'image.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47]));
    fs.writeFileSync(path.join(out, 'résumé.txt'), 'cv');
    fs.writeFileSync(path.join(out, 'q"uote.txt'), 'quoted');
    fs.writeFileSync(path.join(out, 'noext'), 'raw');
    fs.mkdirSync(path.join(out, 'sub', 'dir'), { recursive: true });
    fs.writeFileSync(path.join(out, 'sub', 'dir', 'nested.txt'), 'nested');
    fs.writeFileSync(path.join(uploads, 'up.txt'), 'uploaded');
    fs.writeFileSync(path.join(srv.userData(admin.id, 'art-other'), 'outputs', 'secret.txt'), 'other thread secret');
  });
  after(async () => {
    await srv?.stop();
  });

  const get = (p, headers) => request(srv, 'GET', p, { bearer: admin.token, headers });
  const put = (p, body) => request(srv, 'PUT', p, { bearer: admin.token, body });

  /** Asserts a refusal that serves nothing from outside the thread. */
  function assertRefused(res, what) {
    assert.ok(res.status >= 400 && res.status < 500, `${what}: ${res.status} ${res.text.slice(0, 200)}`);
    assert.ok(!res.text.includes('root:x:0:0'), `${what}: /etc/passwd leaked`);
    assert.ok(!res.text.includes(passwd.slice(0, 20)), `${what}: /etc/passwd leaked`);
    assert.ok(!res.text.includes('server:') && !res.text.includes('SQLite format'), `${what}: fawn's own files leaked`);
    assert.ok(!res.text.includes(srv.home), `${what}: a host path leaked`);
  }

  // ---- GET ----

  it('serves a file of outputs inline with its type and nosniff', async () => {
    const res = await get(`${OUT}/report.txt`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, 'hello world');
    assert.equal(res.headers['content-type'], 'text/plain; charset=utf-8');
    assert.equal(res.headers['x-content-type-options'], 'nosniff');
    assert.equal(res.headers['content-disposition'], `inline; filename="report.txt"; filename*=UTF-8''report.txt`);
    assert.equal(res.headers['content-length'], '11');
    assert.equal(res.headers['accept-ranges'], 'bytes');
    assert.equal(res.headers['content-security-policy'], 'sandbox');
    const png = await get(`${OUT}/image.png`);
    assert.equal(png.headers['content-type'], 'image/png');
    assert.match(png.headers['content-disposition'], /^inline;/);
    const raw = await get(`${OUT}/noext`);
    assert.equal(raw.headers['content-type'], 'application/octet-stream');
    const nested = await get(`${OUT}/sub/dir/nested.txt`);
    assert.equal(nested.text, 'nested');
    const up = await get(`${BASE}/mnt/user-data/uploads/up.txt`);
    assert.equal(up.status, 200);
    assert.equal(up.text, 'uploaded');
  });

  it('names outside ASCII or with quotes are encoded, never injected', async () => {
    const res = await get(`${OUT}/r%C3%A9sum%C3%A9.txt`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['content-disposition'], `inline; filename="r__sum__.txt"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt`);
    const q = await get(`${OUT}/q%22uote.txt`);
    assert.equal(q.status, 200);
    assert.equal(q.headers['content-disposition'], `inline; filename="q_uote.txt"; filename*=UTF-8''q%22uote.txt`);
  });

  it('download=true makes any file an attachment', async () => {
    for (const v of ['true', '1']) {
      const res = await get(`${OUT}/report.txt?download=${v}`);
      assert.equal(res.status, 200);
      assert.match(res.headers['content-disposition'], /^attachment; filename="report.txt"/);
    }
    const no = await get(`${OUT}/report.txt?download=false`);
    assert.match(no.headers['content-disposition'], /^inline;/);
  });

  it('HTML, SVG, XHTML and XML are always attachments', async () => {
    for (const [name, type] of [
      ['page.html', 'text/html'],
      ['pic.svg', 'image/svg+xml'],
      ['data.xml', 'application/xml'],
      ['doc.xhtml', 'application/xhtml+xml'],
    ]) {
      const res = await get(`${OUT}/${name}?download=false`);
      assert.equal(res.status, 200, name);
      assert.match(res.headers['content-disposition'], /^attachment;/, name);
      assert.equal(res.headers['content-type'].split(';')[0], type, name);
      assert.equal(res.headers['x-content-type-options'], 'nosniff');
    }
  });

  it('a single byte range is 206 with Content-Range', async () => {
    const cases = [
      ['bytes=0-3', 'hell', 'bytes 0-3/11'],
      ['bytes=-2', 'ld', 'bytes 9-10/11'],
      ['bytes=6-', 'world', 'bytes 6-10/11'],
      ['bytes=5-100', ' world', 'bytes 5-10/11'],
      ['bytes=10-10', 'd', 'bytes 10-10/11'],
      ['bytes=-100', 'hello world', 'bytes 0-10/11'],
    ];
    for (const [range, body, cr] of cases) {
      const res = await get(`${OUT}/report.txt`, { Range: range });
      assert.equal(res.status, 206, range);
      assert.equal(res.text, body, range);
      assert.equal(res.headers['content-range'], cr, range);
      assert.equal(res.headers['content-length'], String(body.length), range);
    }
  });

  it('a range beyond the end is 416 with Content-Range bytes */N', async () => {
    for (const range of ['bytes=11-', 'bytes=100-200', 'bytes=-0']) {
      const res = await get(`${OUT}/report.txt`, { Range: range });
      assert.equal(res.status, 416, `${range}: ${res.status}`);
      assert.equal(res.headers['content-range'], 'bytes */11', range);
      assert.ok(!res.text.includes('hello'), range);
    }
  });

  it('any range of an empty file is 416', async () => {
    fs.writeFileSync(path.join(out, 'empty.txt'), '');
    const whole = await get(`${OUT}/empty.txt`);
    assert.equal(whole.status, 200);
    assert.equal(whole.text, '');
    for (const range of ['bytes=0-', 'bytes=0-0', 'bytes=-1']) {
      const res = await get(`${OUT}/empty.txt`, { Range: range });
      assert.equal(res.status, 416, range);
      assert.equal(res.headers['content-range'], 'bytes */0', range);
    }
  });

  it('ranges it cannot serve as one are ignored (200, whole file)', async () => {
    for (const range of ['bytes=3-1', 'bytes=0-1,3-4', 'items=0-1', 'bytes=a-b', 'bytes=99999999999999999999999-']) {
      const res = await get(`${OUT}/report.txt`, { Range: range });
      assert.equal(res.status, 200, range);
      assert.equal(res.text, 'hello world', range);
    }
    const ifRange = await get(`${OUT}/report.txt`, { Range: 'bytes=0-3', 'If-Range': '"some-etag"' });
    assert.equal(ifRange.status, 200);
    assert.equal(ifRange.text, 'hello world');
  });

  it('a missing file is 404', async () => {
    for (const p of [`${OUT}/nope.txt`, `${OUT}/sub/nope/x.txt`, `${BASE}/mnt/user-data/workspace/nope`]) {
      const res = await get(p);
      assert.equal(res.status, 404, p);
    }
    const noThread = await get(`/api/threads/no-such-thread/artifacts/mnt/user-data/outputs/report.txt`);
    assert.equal(noThread.status, 404);
  });

  it('a symlink in outputs to /etc/passwd is refused', async () => {
    fs.symlinkSync('/etc/passwd', path.join(out, 'passwd-link.txt'));
    fs.symlinkSync('../../../../../../../../../../../../etc/passwd', path.join(out, 'passwd-rel.txt'));
    fs.symlinkSync('/etc', path.join(out, 'etc-dir'));
    for (const p of [`${OUT}/passwd-link.txt`, `${OUT}/passwd-rel.txt`, `${OUT}/etc-dir/passwd`]) {
      const res = await get(p);
      assertRefused(res, p);
      assert.equal(res.status, 403, p);
    }
  });

  it("a relative symlink into another thread's outputs is refused", async () => {
    fs.symlinkSync('../../../art-other/user-data/outputs/secret.txt', path.join(out, 'sneaky.txt'));
    const res = await get(`${OUT}/sneaky.txt`);
    assertRefused(res, 'sneaky.txt');
    assert.ok(!res.text.includes('other thread secret'));
  });

  it('a symlink that stays inside user-data is followed', async () => {
    fs.symlinkSync('../uploads/up.txt', path.join(out, 'to-upload.txt'));
    const res = await get(`${OUT}/to-upload.txt`);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.text, 'uploaded');
  });

  it('an outputs directory replaced by a symlink out of the thread is refused for GET and PUT', async () => {
    const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'art-dirlink' } });
    assert.equal(t.status, 200);
    const o = path.join(srv.userData(admin.id, 'art-dirlink'), 'outputs');
    fs.rmSync(o, { recursive: true });
    fs.symlinkSync('/etc', o);
    const p = '/api/threads/art-dirlink/artifacts/mnt/user-data/outputs/passwd';
    const res = await get(p);
    assertRefused(res, p);
    assert.equal(res.status, 403);
    const w = await put('/api/threads/art-dirlink/artifacts/mnt/user-data/outputs/hostname', { content: 'x', expected_sha256: sha256(fs.readFileSync('/etc/hostname')) });
    assertRefused(w, 'PUT through a symlinked outputs');
    assert.equal(fs.readFileSync('/etc/passwd', 'utf8'), passwd);
  });

  it('dot-dot in every encoding is refused', async () => {
    const attacks = [
      `${OUT}/%2e%2e/%2e%2e/%2e%2e/etc/passwd`,
      `${OUT}/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd`,
      `${OUT}/../../../etc/passwd`,
      `${OUT}/../../../../../../../../../../etc/passwd`,
      `${OUT}/..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd`,
      `${OUT}/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fconfig.yaml`,
      `${OUT}/../../../../../config.yaml`,
      `${OUT}/../../../../../fawn.db`,
      `${OUT}/../../../../../jwt.secret`,
      `${OUT}/../../../art-other/user-data/outputs/secret.txt`,
      `${BASE}/mnt/user-data/../../../../../../etc/passwd`,
      `${BASE}/mnt/user-data/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/config.yaml`,
      `${BASE}/%2e%2e/%2e%2e/etc/passwd`,
      `${BASE}/../../etc/passwd`,
      `${BASE}//etc/passwd`,
      `${BASE}/etc/passwd`,
      `${BASE}/mnt/user-data/outputs/..\\..\\..\\etc\\passwd`,
      `${BASE}/mnt/user-data/outputs/..%5c..%5c..%5cetc%5cpasswd`,
      `${BASE}/mnt/skills/../user-data/../../../../etc/passwd`,
      `${BASE}/mnt/user-data/outputs/%252e%252e/%252e%252e/etc/passwd`,
      `${BASE}/mnt/user-data/outputs/.%2e/.%2e/.%2e/.%2e/.%2e/config.yaml`,
      `${BASE}/mnt/user-data/outputs/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd`,
    ];
    for (const p of attacks) assertRefused(await get(p), p);
    const dotdot = await get(`${OUT}/%2e%2e/%2e%2e/%2e%2e/etc/passwd`);
    assert.equal(dotdot.status, 403);
    assert.equal(dotdot.json.detail, 'Access denied: path traversal detected');
    // Climbing out of outputs but staying inside user-data is just a path.
    const inside = await get(`${OUT}/%2e%2e/uploads/up.txt`);
    assert.equal(inside.status, 200);
    assert.equal(inside.text, 'uploaded');
  });

  it('dot-dot in the thread id segment does not reach another thread', async () => {
    for (const p of [
      `/api/threads/%2e%2e/artifacts/mnt/user-data/outputs/report.txt`,
      `/api/threads/../threads/${TID}/artifacts/mnt/user-data/outputs/report.txt`,
      `/api/threads/${TID}%2f..%2fart-other/artifacts/mnt/user-data/outputs/secret.txt`,
    ]) {
      const res = await get(p);
      assert.ok(res.status === 404 || res.status === 400, `${p}: ${res.status}`);
      assert.ok(!res.text.includes('other thread secret') && !res.text.includes('hello world'));
    }
  });

  it('NUL, control characters and bad escapes are 400', async () => {
    for (const p of [
      `${OUT}/report.txt%00.png`,
      `${OUT}/%00`,
      `${OUT}/report%0a.txt`,
      `${OUT}/report%1b.txt`,
      `${OUT}/report.txt%`,
      `${OUT}/report.txt%zz`,
      `${OUT}/%ff%fe.txt`,
    ]) {
      const res = await get(p);
      assert.equal(res.status, 400, `${p}: ${res.status} ${res.text}`);
    }
  });

  it('places that are not files of the thread are refused', async () => {
    const cases = [
      [`${BASE}/mnt/user-data/outputs`, 400],
      [`${OUT}/sub`, 400],
      [`${BASE}/mnt/user-data`, 404],
      [`${BASE}/mnt/skills/public/x/SKILL.md`, 404],
      [`${BASE}/tmp/x`, 400],
    ];
    for (const [p, status] of cases) {
      const res = await get(p);
      assert.equal(res.status, status, `${p}: ${res.status} ${res.text}`);
    }
  });

  it('staging files are never served', async () => {
    fs.writeFileSync(path.join(out, '.fawn-tmp-0011223344556677'), 'half a save');
    fs.writeFileSync(path.join(uploads, '.upload-0011223344556677.part'), 'half an upload');
    for (const p of [`${OUT}/.fawn-tmp-0011223344556677`, `${BASE}/mnt/user-data/uploads/.upload-0011223344556677.part`]) {
      const res = await get(p);
      assert.equal(res.status, 404, p);
      assert.ok(!res.text.includes('half'));
    }
    fs.rmSync(path.join(out, '.fawn-tmp-0011223344556677'));
    fs.rmSync(path.join(uploads, '.upload-0011223344556677.part'));
  });

  it('a file truncated while it is downloaded ends the download short, never hangs', async () => {
    // Far more than loopback's socket buffers hold, so most is still to send
    // when the file shrinks.
    const size = 64 * MiB;
    const file = path.join(out, 'shrinking.bin');
    fs.writeFileSync(file, Buffer.alloc(size, 7));
    const got = { bytes: 0 };
    const closed = new Promise((resolve) => {
      const req = http.request({ host: '127.0.0.1', port: srv.port, agent: false,
        path: `${OUT}/shrinking.bin`, headers: { Authorization: `Bearer ${admin.token}` } }, (res) => {
        got.status = res.statusCode;
        got.length = Number(res.headers['content-length']);
        res.pause(); // a slow reader: nothing more is taken until the file has shrunk
        fs.truncateSync(file, MiB);
        res.on('data', (d) => (got.bytes += d.length));
        res.on('error', () => {});
        res.on('close', () => {
          got.complete = res.complete;
          resolve();
        });
        res.resume();
      });
      req.on('error', () => {});
      req.end();
    });
    // A ceiling far below the idle timeout the download used to wait for.
    let timer;
    const ceiling = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error('the download hung')), TRUNCATED_CLOSE_CEILING_MS);
    });
    try {
      await Promise.race([closed, ceiling]);
    } finally {
      clearTimeout(timer);
    }
    assert.equal(got.status, 200);
    assert.equal(got.length, size);
    assert.ok(got.bytes < size, `${got.bytes} of ${size} bytes`);
    assert.equal(got.complete, false, 'the response ended short of its Content-Length');
    const again = await get(`${OUT}/shrinking.bin`);
    assert.equal(again.body.length, MiB);
    fs.rmSync(file);
  });

  // ---- PUT ----

  it('PUT saves an edit atomically and answers path, sha256 and size', async () => {
    const file = path.join(out, 'edit.txt');
    fs.writeFileSync(file, 'old content\n');
    fs.chmodSync(file, 0o640);
    const content = 'new content ✓\nline two\n';
    const res = await put(`${OUT}/edit.txt`, { content, expected_sha256: sha256('old content\n') });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json, {
      path: '/mnt/user-data/outputs/edit.txt',
      sha256: sha256(content),
      size: Buffer.byteLength(content),
    });
    assert.equal(fs.readFileSync(file, 'utf8'), content);
    assert.equal(fs.statSync(file).mode & 0o777, 0o640, 'permission bits kept');
    assert.deepEqual(stagingFiles(out), []);
    const back = await get(`${OUT}/edit.txt`);
    assert.equal(back.text, content);
    // Saving the empty text works too.
    const empty = await put(`${OUT}/edit.txt`, { content: '', expected_sha256: sha256(content) });
    assert.equal(empty.status, 200, empty.text);
    assert.equal(empty.json.size, 0);
    assert.equal(fs.readFileSync(file, 'utf8'), '');
  });

  it('PUT with a stale sha256 is 412 and leaves the file unchanged', async () => {
    const file = path.join(out, 'stale.txt');
    fs.writeFileSync(file, 'current');
    const res = await put(`${OUT}/stale.txt`, { content: 'clobber', expected_sha256: sha256('what I saw earlier') });
    assert.equal(res.status, 412, res.text);
    assert.equal(fs.readFileSync(file, 'utf8'), 'current');
    assert.deepEqual(stagingFiles(out), []);
  });

  it('PUT outside outputs is 400, also through dot-dot', async () => {
    const cases = [
      `${OUT}/%2e%2e/uploads/up.txt`,
      `${OUT}/../uploads/up.txt`,
      `${OUT}/sub/%2e%2e/%2e%2e/uploads/up.txt`,
      `${BASE}/mnt/user-data/uploads/up.txt`,
      `${BASE}/mnt/user-data/workspace/w.txt`,
      `${BASE}/mnt/user-data/outputs`,
      `${BASE}/mnt/user-data/outputs/`,
      `${BASE}/mnt/skills/x.txt`,
      `${BASE}/etc/passwd`,
    ];
    fs.writeFileSync(path.join(srv.userData(admin.id, TID), 'workspace', 'w.txt'), 'workspace');
    for (const p of cases) {
      const res = await put(p, { content: 'pwned', expected_sha256: sha256('uploaded') });
      assert.equal(res.status, 400, `${p}: ${res.status} ${res.text}`);
    }
    assert.equal(fs.readFileSync(path.join(uploads, 'up.txt'), 'utf8'), 'uploaded');
    assert.equal(fs.readFileSync(path.join(srv.userData(admin.id, TID), 'workspace', 'w.txt'), 'utf8'), 'workspace');
  });

  it('PUT that climbs out of user-data is refused and writes nothing', async () => {
    const before = fs.readFileSync(srv.configPath, 'utf8');
    for (const p of [
      `${OUT}/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/config.yaml`,
      `${OUT}/../../../../../../config.yaml`,
      `${OUT}/../../../art-other/user-data/outputs/secret.txt`,
    ]) {
      const res = await put(p, { content: 'pwned', expected_sha256: sha256(before) });
      assertRefused(res, p);
    }
    assert.equal(fs.readFileSync(srv.configPath, 'utf8'), before);
    assert.equal(fs.readFileSync(path.join(srv.userData(admin.id, 'art-other'), 'outputs', 'secret.txt'), 'utf8'), 'other thread secret');
  });

  it('PUT of a missing file is 404 and creates nothing', async () => {
    const res = await put(`${OUT}/new-file.txt`, { content: 'x', expected_sha256: sha256('') });
    assert.equal(res.status, 404, res.text);
    assert.equal(fs.existsSync(path.join(out, 'new-file.txt')), false);
    const dir = await put(`${OUT}/no-dir/x.txt`, { content: 'x', expected_sha256: sha256('') });
    assert.equal(dir.status, 404);
  });

  it('PUT through a symlink in outputs is 400 and the target is untouched', async () => {
    fs.symlinkSync('../uploads/up.txt', path.join(out, 'link-up.txt'));
    const res = await put(`${OUT}/link-up.txt`, { content: 'pwned', expected_sha256: sha256('uploaded') });
    assert.equal(res.status, 400, res.text);
    assert.ok(fs.lstatSync(path.join(out, 'link-up.txt')).isSymbolicLink());
    // A symlinked directory on the way is not followed either.
    fs.symlinkSync('../uploads', path.join(out, 'updir'));
    const viaDir = await put(`${OUT}/updir/up.txt`, { content: 'pwned', expected_sha256: sha256('uploaded') });
    assert.equal(viaDir.status, 400, viaDir.text);
    // Nor one that points out of the thread.
    const victim = path.join(srv.home, 'put-victim.txt');
    fs.writeFileSync(victim, 'victim');
    fs.symlinkSync(victim, path.join(out, 'abs-link.txt'));
    const abs = await put(`${OUT}/abs-link.txt`, { content: 'pwned', expected_sha256: sha256('victim') });
    assertRefused(abs, 'abs-link.txt');
    const pw = await put(`${OUT}/passwd-link.txt`, { content: 'pwned', expected_sha256: sha256(passwd) });
    assertRefused(pw, 'passwd-link.txt');
    assert.equal(fs.readFileSync(victim, 'utf8'), 'victim');
    assert.equal(fs.readFileSync(path.join(uploads, 'up.txt'), 'utf8'), 'uploaded');
    assert.equal(fs.readFileSync('/etc/passwd', 'utf8'), passwd);
  });

  it('PUT of a hard-linked file is refused and the other name keeps its bytes', async () => {
    const victim = path.join(srv.home, 'hard-victim.txt');
    fs.writeFileSync(victim, 'hard victim');
    fs.linkSync(victim, path.join(out, 'hard.txt'));
    const res = await put(`${OUT}/hard.txt`, { content: 'pwned', expected_sha256: sha256('hard victim') });
    assert.equal(res.status, 403, res.text);
    assert.equal(fs.readFileSync(victim, 'utf8'), 'hard victim');
  });

  it('PUT of a directory is 400', async () => {
    const res = await put(`${OUT}/sub`, { content: 'x', expected_sha256: sha256('') });
    assert.equal(res.status, 400, res.text);
  });

  it('PUT with NUL in the content is 415; a binary file cannot be edited (415)', async () => {
    const file = path.join(out, 'text.txt');
    fs.writeFileSync(file, 'text');
    const res = await put(`${OUT}/text.txt`, { content: 'a\u0000b', expected_sha256: sha256('text') });
    assert.equal(res.status, 415, res.text);
    assert.equal(fs.readFileSync(file, 'utf8'), 'text');
    const pngBytes = fs.readFileSync(path.join(out, 'image.png'));
    const png = await put(`${OUT}/image.png`, { content: 'x', expected_sha256: sha256(pngBytes) });
    assert.equal(png.status, 415, `not UTF-8: ${png.text}`);
    assert.deepEqual(fs.readFileSync(path.join(out, 'image.png')), pngBytes);
    fs.writeFileSync(path.join(out, 'nul.txt'), 'a\0b');
    const nul = await put(`${OUT}/nul.txt`, { content: 'x', expected_sha256: sha256('a\0b') });
    assert.equal(nul.status, 415, `NUL in the file: ${nul.text}`);
    assert.equal(fs.readFileSync(path.join(out, 'nul.txt'), 'utf8'), 'a\0b');
  });

  it('PUT over 2 MiB is 413 and leaves the file unchanged', async () => {
    const file = path.join(out, 'big.txt');
    fs.writeFileSync(file, 'small');
    const res = await put(`${OUT}/big.txt`, { content: 'a'.repeat(2 * MiB + 1), expected_sha256: sha256('small') });
    assert.equal(res.status, 413, res.text.slice(0, 200));
    assert.equal(fs.readFileSync(file, 'utf8'), 'small');
    const exact = await put(`${OUT}/big.txt`, { content: 'b'.repeat(2 * MiB), expected_sha256: sha256('small') });
    assert.equal(exact.status, 200, '2 MiB exactly is allowed');
  });

  it('PUT bodies that are not {content, expected_sha256} are 400', async () => {
    const file = path.join(out, 'shape.txt');
    fs.writeFileSync(file, 'shape');
    const good = sha256('shape');
    const bodies = [
      {},
      { content: 'x' },
      { expected_sha256: good },
      { content: 5, expected_sha256: good },
      { content: 'x', expected_sha256: good.toUpperCase() },
      { content: 'x', expected_sha256: good.slice(1) },
      { content: 'x', expected_sha256: good, mode: '0777' },
      '{"content": "x", "expected_sha256": ',
      '[1, 2]',
    ];
    for (const body of bodies) {
      const res = await put(`${OUT}/shape.txt`, body);
      assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.status} ${res.text}`);
    }
    assert.equal(fs.readFileSync(file, 'utf8'), 'shape');
  });

  it('of concurrent saves from the same version at most one wins', async () => {
    const file = path.join(out, 'race.txt');
    fs.writeFileSync(file, 'v0');
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => put(`${OUT}/race.txt`, { content: `writer ${i}`, expected_sha256: sha256('v0') })),
    );
    const winners = results.filter((r) => r.status === 200);
    assert.equal(winners.length, 1, results.map((r) => r.status).join(','));
    for (const r of results) assert.ok([200, 409, 412].includes(r.status), `${r.status} ${r.text}`);
    assert.equal(fs.readFileSync(file, 'utf8'), `writer ${results.indexOf(winners[0])}`);
    assert.deepEqual(stagingFiles(out), []);
  });

  it('no staging files are left in outputs', () => {
    assert.deepEqual(stagingFiles(out), []);
    assert.ok(listDir(out).includes('edit.txt'));
  });
});
