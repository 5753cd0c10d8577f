// The gateway's read path: artifact bodies leave through sendfile(2) — seen
// with strace attached to the running server — with every header and range
// they had; and the cache of verified credentials lets no revocation
// through: the same process's at once, another process's (the CLI) within
// the cache's recheck.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, request, runFawn, setupAdmin, setupUser, waitFor } from './lib/server.mjs';

const TID = 'readpath';
const OUT = `/api/threads/${TID}/artifacts/mnt/user-data/outputs`;
const MiB = 1 << 20;
// How long strace may take to attach to every thread, and to detach: a
// ceiling that catches a hang, not a timing.
const STRACE_CEILING_MS = 60000;

/** strace -f on pid, tracing sendfile into a file: {stop() → its lines}. */
async function traceSendfile(pid) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-strace-'));
  const out = path.join(dir, 'trace');
  const proc = spawn('strace', ['-f', '-e', 'trace=sendfile', '-o', out, '-p', String(pid)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => proc.on('close', resolve));
  proc.on('error', (e) => (stderr += `\n${e.message}`));
  // "Process N attached with M threads": every thread is traced from here.
  await waitFor(() => /attached/.test(stderr) || proc.exitCode !== null,
    STRACE_CEILING_MS, 'strace to attach');
  assert.equal(proc.exitCode, null, `strace could not attach: ${stderr}`);
  return {
    async stop() {
      proc.kill('SIGINT'); // detaches, leaving the server running
      await exited;
      const lines = fs.readFileSync(out, 'utf8').split('\n');
      fs.rmSync(dir, { recursive: true, force: true });
      return lines;
    },
  };
}

/** The sendfile calls in strace lines: {offset, count, sent}. */
function sendfileCalls(lines) {
  const calls = [];
  for (const line of lines) {
    const m = /sendfile\(\d+, \d+, \[(\d+)\] => \[\d+\], (\d+)\) = (\d+)/.exec(line);
    if (m) calls.push({ offset: Number(m[1]), count: Number(m[2]), sent: Number(m[3]) });
  }
  return calls;
}

describe('artifacts through sendfile', () => {
  let srv;
  let admin;
  let out;
  const bytes = crypto.randomBytes(MiB);
  before(async () => {
    srv = await FawnServer.start();
    admin = await setupAdmin(srv);
    const t = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: TID } });
    assert.equal(t.status, 200, t.text);
    out = path.join(srv.userData(admin.id, TID), 'outputs');
    fs.writeFileSync(path.join(out, 'big.bin'), bytes);
    fs.writeFileSync(path.join(out, 'page.html'), '<script>alert(1)</script>');
    fs.writeFileSync(path.join(out, 'empty.txt'), '');
  });
  after(async () => {
    await srv?.stop();
  });

  it('sends a whole file and a range with sendfile, headers and bytes unchanged', async () => {
    const trace = await traceSendfile(srv.proc.pid);
    let whole, range, html, calls;
    try {
      whole = await request(srv, 'GET', `${OUT}/big.bin`, { bearer: admin.token });
      range = await request(srv, 'GET', `${OUT}/big.bin`, { bearer: admin.token, headers: { Range: 'bytes=1000-200999' } });
      html = await request(srv, 'GET', `${OUT}/page.html`, { bearer: admin.token });
    } finally {
      calls = sendfileCalls(await trace.stop());
    }
    assert.equal(whole.status, 200);
    assert.ok(whole.body.equals(bytes), 'the whole file, byte for byte');
    assert.equal(whole.headers['content-length'], String(MiB));
    assert.equal(whole.headers['content-type'], 'application/octet-stream');
    assert.equal(whole.headers['x-content-type-options'], 'nosniff');
    assert.equal(whole.headers['content-security-policy'], 'sandbox');
    assert.match(whole.headers['content-disposition'], /^inline; filename="big.bin"/);
    assert.equal(range.status, 206);
    assert.equal(range.headers['content-range'], `bytes 1000-200999/${MiB}`);
    assert.ok(range.body.equals(bytes.subarray(1000, 201000)), 'the range, byte for byte');
    assert.equal(html.status, 200);
    assert.match(html.headers['content-disposition'], /^attachment; /);
    assert.equal(html.headers['content-type'], 'text/html; charset=utf-8');
    assert.equal(html.text, '<script>alert(1)</script>');
    const empty = await request(srv, 'GET', `${OUT}/empty.txt`, { bearer: admin.token });
    assert.equal(empty.status, 200);
    assert.equal(empty.headers['content-length'], '0');
    assert.equal(empty.body.length, 0);
    const unsatisfiable = await request(srv, 'GET', `${OUT}/big.bin`, { bearer: admin.token, headers: { Range: `bytes=${MiB}-` } });
    assert.equal(unsatisfiable.status, 416);
    assert.equal(unsatisfiable.headers['content-range'], `bytes */${MiB}`);

    const sent = calls.filter((c) => c.offset < MiB).reduce((n, c) => n + c.sent, 0);
    assert.ok(calls.length > 0, 'no sendfile call was made');
    assert.ok(calls.some((c) => c.offset === 0 && c.sent > 0), 'the whole file from its first byte');
    assert.ok(calls.some((c) => c.offset === 1000 && c.sent > 0), 'the range from its first byte');
    assert.ok(sent >= MiB + 200000 + html.body.length, `${sent} bytes sent with sendfile`);
  });
});

describe('revocations reach a gateway that cached the credential', () => {
  let srv;
  let admin;
  let bob;
  before(async () => {
    srv = await FawnServer.start({
      authorization: { enabled: true, roles: { admin: {}, user: {}, reader: { routes: { allow: ['threads:read'] } } } },
    });
    admin = await setupAdmin(srv);
    bob = await setupUser(srv, 'bob');
  });
  after(async () => {
    await srv?.stop();
  });

  const me = (who) => request(srv, 'GET', '/api/v1/auth/me', who);

  it('a deleted API token and a signed-out session are refused on the next request', async () => {
    const extra = await request(srv, 'POST', '/api/v1/auth/tokens', { jar: bob.jar, csrf: true, body: { name: 'short-lived' } });
    assert.equal(extra.status, 201, extra.text);
    for (let i = 0; i < 3; i++) assert.equal((await me({ bearer: extra.json.token })).status, 200);
    const del = await request(srv, 'DELETE', `/api/v1/auth/tokens/${extra.json.id}`, { bearer: bob.token });
    assert.equal(del.status, 200, del.text);
    const refused = await me({ bearer: extra.json.token });
    assert.equal(refused.status, 401);
    assert.equal(refused.json.detail.code, 'token_invalid', refused.text);
    // The other token of the same user is untouched.
    assert.equal((await me({ bearer: bob.token })).status, 200);
  });

  it('a role changed by the CLI (another process) is seen within the recheck', async () => {
    const created = await request(srv, 'POST', '/api/threads', { bearer: bob.token, body: {} });
    assert.equal(created.status, 200, created.text);
    const thread = () => request(srv, 'PATCH', `/api/threads/${created.json.thread_id}`, { bearer: bob.token, body: { metadata: { seen: true } } });
    assert.equal((await thread()).status, 200); // threads:write, which a reader lacks
    const set = await runFawn(['user', 'role', '--username', 'bob', '--role', 'reader', '--config', srv.configPath], { home: srv.home });
    assert.equal(set.code, 0, set.stderr);
    // A ceiling that catches a gateway that never sees it; the bound
    // itself (one second) is the cache's, not this test's.
    await waitFor(async () => (await thread()).status === 403, undefined, 'the new role to be applied');
    assert.equal((await me({ bearer: bob.token })).json.system_role, 'reader');
    const back = await runFawn(['user', 'role', '--username', 'bob', '--role', 'user', '--config', srv.configPath], { home: srv.home });
    assert.equal(back.code, 0, back.stderr);
    await waitFor(async () => (await thread()).status === 200, undefined, 'the role to be given back');
  });
});
