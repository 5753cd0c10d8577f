// Uploads: multipart bodies from fetch/FormData and hand-built ones with
// hostile file names, planted symlinks and hard links, size and count
// limits, listing, limits and deletion.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, eventually, listDir, multipart, request, setupAdmin, stagingFiles } from './lib/server.mjs';

const MAX_FILES = 4;
const MAX_FILE_MB = 1;
const MiB = 1 << 20;

describe('uploads', () => {
  let srv;
  let admin;
  let outside; // a directory outside every thread, for symlink and hard link targets

  before(async () => {
    srv = await FawnServer.start({ uploads: { max_file_size_mb: MAX_FILE_MB, max_files: MAX_FILES } });
    admin = await setupAdmin(srv);
    outside = fs.mkdtempSync(path.join(srv.home, 'outside-'));
  });
  after(async () => {
    await srv?.stop();
  });

  const uploadsDir = (tid) => path.join(srv.userData(admin.id, tid), 'uploads');

  async function createThread(tid) {
    const r = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: tid } });
    assert.equal(r.status, 200, r.text);
    return uploadsDir(tid);
  }

  /** POSTs a hand-built multipart body of parts to tid's uploads. */
  function upload(tid, parts, opts = {}) {
    const mp = multipart(parts);
    return request(srv, 'POST', `/api/threads/${tid}/uploads`, {
      bearer: admin.token,
      body: mp.body,
      headers: { 'Content-Type': opts.contentType || mp.contentType },
    });
  }

  it('two files from FormData land on disk with the documented response', async () => {
    const dir = await createThread('up-basic');
    const fd = new FormData();
    fd.append('files', new Blob(['hello from a']), 'a.txt');
    fd.append('files', new Blob([Buffer.from([0, 1, 2, 255])]), 'bin.dat');
    fd.append('note', 'a plain field is ignored');
    const res = await fetch(`${srv.base}/api/threads/up-basic/uploads`, {
      method: 'POST',
      body: fd,
      headers: { Authorization: `Bearer ${admin.token}` },
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(body.success, true);
    assert.deepEqual(body.skipped_files, []);
    assert.match(body.message, /2 file/);
    assert.deepEqual(body.files.map((f) => f.filename), ['a.txt', 'bin.dat']);
    const a = body.files[0];
    assert.equal(a.size, 12);
    assert.equal(a.virtual_path, '/mnt/user-data/uploads/a.txt');
    assert.equal(a.artifact_url, '/api/threads/up-basic/artifacts/mnt/user-data/uploads/a.txt');
    assert.ok(!JSON.stringify(body).includes(srv.home), 'no host path in the answer');
    assert.equal(fs.readFileSync(path.join(dir, 'a.txt'), 'utf8'), 'hello from a');
    assert.deepEqual([...fs.readFileSync(path.join(dir, 'bin.dat'))], [0, 1, 2, 255]);
    assert.equal(fs.statSync(path.join(dir, 'a.txt')).mode & 0o777, 0o644);
    assert.deepEqual(listDir(dir), ['a.txt', 'bin.dat']);
    // The artifact URL serves the bytes.
    const art = await request(srv, 'GET', a.artifact_url, { bearer: admin.token });
    assert.equal(art.status, 200);
    assert.equal(art.text, 'hello from a');
  });

  it('a cookie session uploads with its CSRF token', async () => {
    await createThread('up-cookie');
    const fd = new FormData();
    fd.append('files', new Blob(['c']), 'c.txt');
    const headers = { Cookie: admin.jar.header() };
    const mp = multipart([{ filename: 'c.txt', content: 'c' }]);
    const refused = await request(srv, 'POST', '/api/threads/up-cookie/uploads', {
      jar: admin.jar,
      body: mp.body,
      headers: { 'Content-Type': mp.contentType },
    });
    assert.equal(refused.status, 403);
    assert.equal(refused.json.detail, 'CSRF token missing');
    const ok = await fetch(`${srv.base}/api/threads/up-cookie/uploads`, {
      method: 'POST',
      body: fd,
      headers: { ...headers, 'X-CSRF-Token': admin.jar.get('csrf_token') },
    });
    assert.equal(ok.status, 200, await ok.text());
  });

  it('uploading to a thread id that does not exist yet creates the thread', async () => {
    const res = await upload('up-implicit', [{ filename: 'first.txt', content: 'first' }]);
    assert.equal(res.status, 200, res.text);
    const t = await request(srv, 'GET', '/api/threads/up-implicit', { bearer: admin.token });
    assert.equal(t.status, 200);
    assert.equal(fs.readFileSync(path.join(uploadsDir('up-implicit'), 'first.txt'), 'utf8'), 'first');
  });

  it('repeated names in one request become stem_1.ext, stem_2.ext with original_filename', async () => {
    const dir = await createThread('up-dupes');
    const res = await upload('up-dupes', [
      { filename: 'a.txt', content: 'one' },
      { filename: 'a.txt', content: 'two' },
      { filename: 'a.txt', content: 'three' },
      { filename: 'a_1.txt', content: 'four' },
    ]);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json.files.map((f) => f.filename), ['a.txt', 'a_1.txt', 'a_2.txt', 'a_1_1.txt']);
    assert.equal(res.json.files[0].original_filename, undefined);
    assert.equal(res.json.files[1].original_filename, 'a.txt');
    assert.equal(res.json.files[2].original_filename, 'a.txt');
    assert.equal(res.json.files[3].original_filename, 'a_1.txt');
    const noext = await upload('up-dupes', [
      { filename: 'noext', content: 'n1' },
      { filename: 'noext', content: 'n2' },
      { filename: '.env', content: 'e1' },
      { filename: '.env', content: 'e2' },
    ]);
    assert.equal(noext.status, 200, noext.text);
    assert.deepEqual(noext.json.files.map((f) => f.filename), ['noext', 'noext_1', '.env', '.env_1']);
    assert.equal(noext.json.files[1].original_filename, 'noext');
    assert.equal(fs.readFileSync(path.join(dir, 'a.txt'), 'utf8'), 'one');
    assert.equal(fs.readFileSync(path.join(dir, 'a_1.txt'), 'utf8'), 'two');
    assert.equal(fs.readFileSync(path.join(dir, 'a_2.txt'), 'utf8'), 'three');
    // A later request with the same name replaces the regular file.
    const again = await upload('up-dupes', [{ filename: 'a.txt', content: 'replaced' }]);
    assert.equal(again.status, 200);
    assert.equal(fs.readFileSync(path.join(dir, 'a.txt'), 'utf8'), 'replaced');
  });

  it('path-like names keep only their last component, inside uploads', async () => {
    const dir = await createThread('up-traversal');
    const threadsDir = path.dirname(path.dirname(dir));
    const res = await upload('up-traversal', [
      { filename: '../../etc/passwd', content: 'not the real passwd' },
      { filename: '/abs/path/abs.txt', content: 'abs' },
      { name: 'files', disposition: `form-data; name="files"; filename*=UTF-8''..%2F..%2F..%2Fenc.txt`, content: 'enc', contentType: 'text/plain' },
    ]);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json.files.map((f) => f.filename), ['passwd', 'abs.txt', 'enc.txt']);
    assert.deepEqual(listDir(dir), ['abs.txt', 'enc.txt', 'passwd']);
    assert.equal(fs.readFileSync(path.join(dir, 'passwd'), 'utf8'), 'not the real passwd');
    assert.deepEqual(listDir(path.join(threadsDir, 'etc')), []);
    assert.deepEqual(listDir(path.dirname(dir)).sort(), ['outputs', 'uploads', 'workspace']);
    assert.ok(!fs.readFileSync('/etc/passwd', 'utf8').includes('not the real passwd'));
  });

  it('bad names are 400 and nothing of the request is written', async () => {
    const dir = await createThread('up-badnames');
    const bad = [
      ['backslash', { filename: 'a\\\\b.txt' }], // quoted-pair: the name is a\b.txt
      ['backslash (filename*)', { disposition: `form-data; name="files"; filename*=UTF-8''a%5Cb.txt` }],
      ['control char (filename*)', { disposition: `form-data; name="files"; filename*=UTF-8''a%01b.txt` }],
      ['newline (filename*)', { disposition: `form-data; name="files"; filename*=UTF-8''a%0Ab.txt` }],
      ['DEL (filename*)', { disposition: `form-data; name="files"; filename*=UTF-8''a%7Fb.txt` }],
      ['control char in the header', { filename: 'a\x01b.txt' }],
      ['256 bytes', { filename: 'n'.repeat(252) + '.txt' }],
      ['256 bytes of UTF-8', { disposition: `form-data; name="files"; filename*=UTF-8''${'%C3%A9'.repeat(128)}` }],
      ['not UTF-8', { disposition: `form-data; name="files"; filename*=UTF-8''%FF%FE.txt` }],
      ['empty', { filename: '' }],
      ['dot', { filename: '.' }],
      ['dot-dot', { filename: '..' }],
      ['ends in a slash', { filename: 'dir/' }],
      ['ends in dot-dot', { filename: 'x/..' }],
      ['a staging name', { filename: '.upload-0123456789abcdef.part' }],
      ['a save staging name', { filename: '.fawn-tmp-0123456789abcdef' }],
    ];
    for (const [what, part] of bad) {
      const res = await upload('up-badnames', [
        { filename: 'good-before.txt', content: 'good' },
        { name: 'files', contentType: 'text/plain', content: 'bad', ...part },
        { filename: 'good-after.txt', content: 'good' },
      ]);
      assert.equal(res.status, 400, `${what}: ${res.status} ${res.text}`);
      // A half-staged file goes when the request completes, a moment after the answer.
      await eventually(() => assert.deepEqual(listDir(dir), [], `${what}: nothing written`));
    }
    const exactly255 = await upload('up-badnames', [{ filename: 'n'.repeat(251) + '.txt', content: 'ok' }]);
    assert.equal(exactly255.status, 200, '255 bytes is allowed');
  });

  it('a malformed multipart body is 400 and writes nothing', async () => {
    const dir = await createThread('up-malformed');
    const boundary = 'xyzBOUNDARYxyz';
    const type = `multipart/form-data; boundary=${boundary}`;
    const bodies = {
      'no closing delimiter': `--${boundary}\r\nContent-Disposition: form-data; name="files"; filename="a.txt"\r\n\r\nabc`,
      'bare LF headers': `--${boundary}\nContent-Disposition: form-data; name="files"; filename="a.txt"\n\nabc\n--${boundary}--\n`,
      'no disposition': `--${boundary}\r\nContent-Type: text/plain\r\n\r\nabc\r\n--${boundary}--\r\n`,
      'filename twice': `--${boundary}\r\nContent-Disposition: form-data; name="files"; filename="a.txt"; filename="b.txt"\r\n\r\nabc\r\n--${boundary}--\r\n`,
      'no files at all': `--${boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nabc\r\n--${boundary}--\r\n`,
      'a file under another field': `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nabc\r\n--${boundary}--\r\n`,
      empty: '',
    };
    for (const [what, body] of Object.entries(bodies)) {
      const res = await request(srv, 'POST', '/api/threads/up-malformed/uploads', {
        bearer: admin.token,
        body,
        headers: { 'Content-Type': type },
      });
      assert.equal(res.status, 400, `${what}: ${res.status} ${res.text}`);
      // A half-staged file goes when the request completes, a moment after the answer.
      await eventually(() => assert.deepEqual(listDir(dir), [], what));
    }
    for (const t of ['multipart/form-data', 'multipart/form-data; boundary=', 'multipart/form-data; boundary="a"; boundary="b"']) {
      const res = await request(srv, 'POST', '/api/threads/up-malformed/uploads', {
        bearer: admin.token,
        body: bodies['no files at all'],
        headers: { 'Content-Type': t },
      });
      assert.equal(res.status, 400, `${t}: ${res.status}`);
    }
  });

  it('multipart limits: parts, part headers, preamble and epilogue', async () => {
    const dir = await createThread('up-mplimits');
    const bd = 'LimitBoundary';
    const type = `multipart/form-data; boundary=${bd}`;
    const part = (disp, content = 'x') => `--${bd}\r\nContent-Disposition: ${disp}\r\n\r\n${content}\r\n`;
    const file = part('form-data; name="files"; filename="kept-out.txt"');
    const cases = [
      ['1001 parts', file + part('form-data; name="field"').repeat(1000) + `--${bd}--\r\n`, 413],
      ['part headers over 8 KiB', `--${bd}\r\nContent-Disposition: form-data; name="files"; filename="h.txt"\r\nX-Pad: ${'a'.repeat(9000)}\r\n\r\nx\r\n--${bd}--\r\n`, 413],
      ['33 part headers', `--${bd}\r\nContent-Disposition: form-data; name="files"; filename="h.txt"\r\n${'X-A: b\r\n'.repeat(32)}\r\nx\r\n--${bd}--\r\n`, 413],
      ['preamble over 64 KiB', 'p'.repeat(70000) + '\r\n' + file + `--${bd}--\r\n`, 400],
      ['epilogue over 64 KiB', file + `--${bd}--\r\n` + 'e'.repeat(70000), 400],
      ['the boundary inside content', part('form-data; name="files"; filename="b.txt"', `a\r\n--${bd}X`) + `--${bd}--\r\n`, 400],
    ];
    for (const [what, body, status] of cases) {
      const res = await request(srv, 'POST', '/api/threads/up-mplimits/uploads', { bearer: admin.token, body, headers: { 'Content-Type': type } });
      assert.equal(res.status, status, `${what}: ${res.status} ${res.text}`);
      await eventually(() => assert.deepEqual(listDir(dir), [], what));
    }
    // Content that merely looks like a delimiter is kept byte for byte.
    const tricky = `a\r\n-\r\n--${bd.slice(0, 5)}\r\n--${bd}`.slice(0, -1);
    const ok = await request(srv, 'POST', '/api/threads/up-mplimits/uploads', {
      bearer: admin.token,
      body: part('form-data; name="files"; filename="tricky.txt"', tricky) + `--${bd}--\r\n`,
      headers: { 'Content-Type': type },
    });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(fs.readFileSync(path.join(dir, 'tricky.txt'), 'utf8'), tricky);
  });

  it("filename* wins over filename, whatever the order", async () => {
    const dir = await createThread('up-star');
    const res = await upload('up-star', [
      { disposition: `form-data; name="files"; filename="plain.txt"; filename*=UTF-8''star.txt`, content: 'a' },
      { disposition: `form-data; name="files"; filename*=UTF-8''star2.txt; filename="plain2.txt"`, content: 'b' },
    ]);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(listDir(dir), ['star.txt', 'star2.txt']);
  });

  it('an uploads directory replaced by a symlink is not usable (400) and nothing lands outside', async () => {
    const dir = await createThread('up-dirlink');
    const elsewhere = fs.mkdtempSync(path.join(outside, 'dirlink-'));
    fs.rmSync(dir, { recursive: true });
    fs.symlinkSync(elsewhere, dir);
    const res = await upload('up-dirlink', [{ filename: 'x.txt', content: 'x' }]);
    assert.equal(res.status, 400, res.text);
    assert.deepEqual(listDir(elsewhere), []);
    const list = await request(srv, 'GET', '/api/threads/up-dirlink/uploads/list', { bearer: admin.token });
    assert.equal(list.status, 400);
    fs.writeFileSync(path.join(elsewhere, 'victim.txt'), 'victim');
    const del = await request(srv, 'DELETE', '/api/threads/up-dirlink/uploads/victim.txt', { bearer: admin.token });
    assert.equal(del.status, 400);
    assert.ok(fs.existsSync(path.join(elsewhere, 'victim.txt')));
  });

  it('a planted symlink at the destination (live or dangling) is skipped and its target untouched', async () => {
    const dir = await createThread('up-symlink');
    const target = path.join(outside, 'victim.txt');
    fs.writeFileSync(target, 'ORIGINAL');
    const dangling = path.join(outside, 'never-created.txt');
    fs.symlinkSync(target, path.join(dir, 'live.txt'));
    fs.symlinkSync(dangling, path.join(dir, 'dangling.txt'));
    const res = await upload('up-symlink', [
      { filename: 'live.txt', content: 'OVERWRITTEN' },
      { filename: 'dangling.txt', content: 'CREATED' },
      { filename: 'normal.txt', content: 'normal' },
    ]);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.success, false);
    assert.deepEqual(res.json.skipped_files, ['live.txt', 'dangling.txt']);
    assert.deepEqual(res.json.files.map((f) => f.filename), ['normal.txt']);
    assert.equal(fs.readFileSync(target, 'utf8'), 'ORIGINAL');
    assert.equal(fs.existsSync(dangling), false);
    assert.ok(fs.lstatSync(path.join(dir, 'live.txt')).isSymbolicLink());
    assert.ok(fs.lstatSync(path.join(dir, 'dangling.txt')).isSymbolicLink());
    assert.deepEqual(stagingFiles(dir), []);
  });

  it('a hard link or a directory at the destination is skipped', async () => {
    const dir = await createThread('up-hardlink');
    const target = path.join(outside, 'hard-victim.txt');
    fs.writeFileSync(target, 'HARD ORIGINAL');
    fs.linkSync(target, path.join(dir, 'hard.txt'));
    fs.mkdirSync(path.join(dir, 'adir'));
    const res = await upload('up-hardlink', [
      { filename: 'hard.txt', content: 'OVERWRITTEN' },
      { filename: 'adir', content: 'x' },
    ]);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.success, false);
    assert.deepEqual(res.json.skipped_files, ['hard.txt', 'adir']);
    assert.equal(fs.readFileSync(target, 'utf8'), 'HARD ORIGINAL');
    assert.equal(fs.statSync(target).nlink, 2);
    assert.ok(fs.statSync(path.join(dir, 'adir')).isDirectory());
    assert.deepEqual(stagingFiles(dir), []);
  });

  it('a file over max_file_size is 413: the request leaves nothing and existing files keep their bytes', async () => {
    const dir = await createThread('up-toobig');
    fs.writeFileSync(path.join(dir, 'keep.txt'), 'OLD BYTES');
    const res = await upload('up-toobig', [
      { filename: 'keep.txt', content: 'NEW BYTES' },
      { filename: 'fresh.txt', content: 'fresh' },
      { filename: 'big.bin', content: Buffer.alloc(2 * MiB, 0x61) },
      { filename: 'after.txt', content: 'after' },
    ]);
    assert.equal(res.status, 413, res.text);
    assert.match(res.json.detail, /too large/i);
    assert.deepEqual(listDir(dir), ['keep.txt']);
    assert.equal(fs.readFileSync(path.join(dir, 'keep.txt'), 'utf8'), 'OLD BYTES');
    // The same through fetch/FormData.
    const fd = new FormData();
    fd.append('files', new Blob(['NEW']), 'keep.txt');
    fd.append('files', new Blob([Buffer.alloc(MAX_FILE_MB * MiB + 1)]), 'one-too-many.bin');
    const r2 = await fetch(`${srv.base}/api/threads/up-toobig/uploads`, {
      method: 'POST',
      body: fd,
      headers: { Authorization: `Bearer ${admin.token}` },
    });
    assert.equal(r2.status, 413);
    assert.deepEqual(listDir(dir), ['keep.txt']);
    assert.equal(fs.readFileSync(path.join(dir, 'keep.txt'), 'utf8'), 'OLD BYTES');
    // Exactly the limit is fine.
    const exact = await upload('up-toobig', [{ filename: 'exact.bin', content: Buffer.alloc(MAX_FILE_MB * MiB, 0x62) }]);
    assert.equal(exact.status, 200, exact.text);
    assert.equal(fs.statSync(path.join(dir, 'exact.bin')).size, MAX_FILE_MB * MiB);
  });

  it('more than max_files files is 413 and nothing is written', async () => {
    const dir = await createThread('up-toomany');
    const parts = Array.from({ length: MAX_FILES + 1 }, (_, i) => ({ filename: `f${i}.txt`, content: `file ${i}` }));
    const res = await upload('up-toomany', parts);
    assert.equal(res.status, 413, res.text);
    assert.equal(res.json.detail, `Too many files: maximum is ${MAX_FILES}`);
    assert.deepEqual(listDir(dir), []);
    const ok = await upload('up-toomany', parts.slice(0, MAX_FILES));
    assert.equal(ok.status, 200);
    assert.equal(listDir(dir).length, MAX_FILES);
  });

  it('the listing shows regular files only and hides staging files', async () => {
    const dir = await createThread('up-list');
    const res = await upload('up-list', [
      { filename: 'b.txt', content: 'bb' },
      { filename: 'a.md', content: 'a' },
    ]);
    assert.equal(res.status, 200);
    fs.writeFileSync(path.join(dir, '.upload-0123456789abcdef.part'), 'half an upload');
    fs.writeFileSync(path.join(dir, '.fawn-tmp-0123456789abcdef'), 'half a save');
    fs.symlinkSync('/etc/passwd', path.join(dir, 'link-to-passwd'));
    fs.mkdirSync(path.join(dir, 'subdir'));
    const list = await request(srv, 'GET', '/api/threads/up-list/uploads/list', { bearer: admin.token });
    assert.equal(list.status, 200, list.text);
    assert.equal(list.json.count, 2);
    assert.deepEqual(list.json.files.map((f) => f.filename), ['a.md', 'b.txt']);
    const b = list.json.files[1];
    assert.equal(b.size, 2);
    assert.equal(b.extension, '.txt');
    assert.equal(b.virtual_path, '/mnt/user-data/uploads/b.txt');
    assert.equal(typeof b.modified, 'number');
    assert.ok(!list.text.includes('.part') && !list.text.includes('fawn-tmp') && !list.text.includes('passwd'));
    const none = await request(srv, 'GET', '/api/threads/never-created/uploads/list', { bearer: admin.token });
    assert.equal(none.status, 404, none.text);
    await createThread('up-list-empty');
    const empty = await request(srv, 'GET', '/api/threads/up-list-empty/uploads/list', { bearer: admin.token });
    assert.equal(empty.status, 200, empty.text);
    assert.deepEqual(empty.json, { files: [], count: 0 });
  });

  it('the limits route reports the configured limits', async () => {
    const res = await request(srv, 'GET', '/api/threads/up-list/uploads/limits', { bearer: admin.token });
    assert.equal(res.status, 200);
    assert.deepEqual(res.json, { max_files: MAX_FILES, max_file_size: MAX_FILE_MB * MiB, max_total_size: 100 * MiB });
    // Before the thread exists (a new chat asks first): the same limits, and no thread is made.
    const none = await request(srv, 'GET', '/api/threads/never-created/uploads/limits', { bearer: admin.token });
    assert.equal(none.status, 200);
    assert.equal(none.text, res.text);
    assert.equal((await request(srv, 'GET', '/api/threads/never-created', { bearer: admin.token })).status, 404);
    assert.equal((await request(srv, 'GET', '/api/threads/bad%2Fid/uploads/limits', { bearer: admin.token })).status, 404);
  });

  it('delete removes a file; a missing one is 404; dot-dot names are refused', async () => {
    const dir = await createThread('up-delete');
    const res = await upload('up-delete', [
      { filename: 'gone.txt', content: 'x' },
      { filename: 'with space.txt', content: 'y' },
    ]);
    assert.equal(res.status, 200);
    fs.writeFileSync(path.join(srv.userData(admin.id, 'up-delete'), 'outputs', 'x'), 'precious');
    const del = await request(srv, 'DELETE', '/api/threads/up-delete/uploads/gone.txt', { bearer: admin.token });
    assert.equal(del.status, 200, del.text);
    assert.deepEqual(del.json, { success: true, message: 'Deleted gone.txt' });
    assert.equal(fs.existsSync(path.join(dir, 'gone.txt')), false);
    const again = await request(srv, 'DELETE', '/api/threads/up-delete/uploads/gone.txt', { bearer: admin.token });
    assert.equal(again.status, 404);
    const spaced = await request(srv, 'DELETE', '/api/threads/up-delete/uploads/with%20space.txt', { bearer: admin.token });
    assert.equal(spaced.status, 200, spaced.text);
    for (const name of ['%2e%2e%2fx', '%2e%2e', '..%2f..%2fconfig.yaml', '%2e%2e%2foutputs%2fx', 'a%5cb', '%00', 'a%00b', '%zz', '..', '.']) {
      const r = await request(srv, 'DELETE', `/api/threads/up-delete/uploads/${name}`, { bearer: admin.token });
      assert.ok(r.status === 400 || r.status === 404, `${name}: ${r.status} ${r.text}`);
      assert.notEqual(r.status, 200, name);
    }
    for (const name of ['%2e%2e%2fx', '%2e%2e', '..%2f..%2fconfig.yaml', 'a%5cb', '%00']) {
      const r = await request(srv, 'DELETE', `/api/threads/up-delete/uploads/${name}`, { bearer: admin.token });
      assert.equal(r.status, 400, `${name} is refused as a name: ${r.status}`);
    }
    assert.equal(fs.readFileSync(path.join(srv.userData(admin.id, 'up-delete'), 'outputs', 'x'), 'utf8'), 'precious');
    assert.ok(fs.existsSync(srv.configPath));
    const missingThread = await request(srv, 'DELETE', '/api/threads/nope-thread/uploads/a.txt', { bearer: admin.token });
    assert.equal(missingThread.status, 404);
  });

  it('deleting a symlink removes the link, not its target; a directory is refused', async () => {
    const dir = await createThread('up-delete-link');
    const target = path.join(outside, 'link-target.txt');
    fs.writeFileSync(target, 'still here');
    fs.symlinkSync(target, path.join(dir, 'l.txt'));
    fs.mkdirSync(path.join(dir, 'd'));
    const del = await request(srv, 'DELETE', '/api/threads/up-delete-link/uploads/l.txt', { bearer: admin.token });
    assert.equal(del.status, 200, del.text);
    assert.equal(fs.readFileSync(target, 'utf8'), 'still here');
    const dirDel = await request(srv, 'DELETE', '/api/threads/up-delete-link/uploads/d', { bearer: admin.token });
    assert.equal(dirDel.status, 400);
    assert.ok(fs.existsSync(path.join(dir, 'd')));
  });

  it('a body that is not multipart/form-data is 415', async () => {
    const dir = await createThread('up-415');
    for (const type of ['application/json', 'text/plain', 'multipart/mixed; boundary=x', 'application/x-www-form-urlencoded']) {
      const res = await request(srv, 'POST', '/api/threads/up-415/uploads', {
        bearer: admin.token,
        body: '{"files": "x"}',
        headers: { 'Content-Type': type },
      });
      assert.equal(res.status, 415, `${type}: ${res.status} ${res.text}`);
    }
    const none = await request(srv, 'POST', '/api/threads/up-415/uploads', { bearer: admin.token, body: 'x' });
    assert.equal(none.status, 415);
    assert.deepEqual(listDir(dir), []);
  });

  it('unusual but valid names round-trip through artifact_url', async () => {
    const dir = await createThread('up-names');
    const names = ['sp ace.txt', 'per%cent.txt', '%2e%2e', 'ünïcödé #?.txt'];
    const res = await upload('up-names', names.map((filename, i) => ({ filename, content: `content ${i}` })));
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json.files.map((f) => f.filename), names);
    assert.deepEqual(listDir(dir), [...names].sort());
    for (const [i, f] of res.json.files.entries()) {
      assert.match(f.artifact_url, /^\/api\/threads\/up-names\/artifacts\/mnt\/user-data\/uploads\/[A-Za-z0-9_.~%-]+$/);
      const art = await request(srv, 'GET', f.artifact_url, { bearer: admin.token });
      assert.equal(art.status, 200, `${f.filename}: ${art.status}`);
      assert.equal(art.text, `content ${i}`);
    }
    const del = await request(srv, 'DELETE', '/api/threads/up-names/uploads/%252e%252e', { bearer: admin.token });
    assert.equal(del.status, 200, 'a file named %2e%2e is deleted by its encoded name');
    assert.ok(!listDir(dir).includes('%2e%2e'));
  });

  it('an invalid thread id in the URL is 404 and creates nothing on disk', async () => {
    const threads = path.join(srv.home, 'users', admin.id, 'threads');
    const before = listDir(threads);
    for (const tid of ['a.b', '%2e%2e', '..', 'x'.repeat(65), 'a%2fb', '%00']) {
      const res = await upload(tid, [{ filename: 'x.txt', content: 'x' }]);
      assert.equal(res.status, 404, `${tid}: ${res.status} ${res.text}`);
    }
    assert.deepEqual(listDir(threads), before);
    assert.deepEqual(listDir(path.join(srv.home, 'users', admin.id)), ['threads']);
  });

  it('concurrent uploads of the same name each land whole, and nothing is left staged', async () => {
    const dir = await createThread('up-concurrent');
    const contents = Array.from({ length: 6 }, (_, i) => Buffer.alloc(64 * 1024, 0x41 + i));
    const results = await Promise.all(contents.map((content) => upload('up-concurrent', [{ filename: 'same.bin', content }])));
    for (const r of results) assert.equal(r.status, 200, r.text);
    const final = fs.readFileSync(path.join(dir, 'same.bin'));
    assert.ok(contents.some((c) => c.equals(final)), 'the file is one request\'s bytes, not a mix');
    assert.deepEqual(listDir(dir), ['same.bin']);
  });

  it('no staging files are left anywhere', () => {
    const threads = path.join(srv.home, 'users', admin.id, 'threads');
    for (const tid of listDir(threads)) {
      const left = stagingFiles(path.join(threads, tid, 'user-data', 'uploads')).filter((n) => n !== '.upload-0123456789abcdef.part' && n !== '.fawn-tmp-0123456789abcdef');
      assert.deepEqual(left, [], tid);
    }
  });
});
