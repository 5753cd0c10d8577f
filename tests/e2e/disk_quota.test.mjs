// The disk limit of a thread's files (sandbox.limits.disk_mb) through the
// gateway: uploads past it answer 413 and leave no file behind, both where
// fawn measures the files and where the kernel holds them (a btrfs
// filesystem with quotas that the test makes and loop-mounts, as root; it
// is skipped, saying why, where the host cannot); a command past the limit
// is told so where fawn measures (to the CLI, and to the model through the
// bash tool); `fawn doctor` and the start log name the mechanism.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, eventually, listDir, multipart, request, runFawn, setupAdmin, stagingFiles } from './lib/server.mjs';

const MiB = 1 << 20;
const LIMIT_MB = 16;
const CONFIG = {
  sandbox: { limits: { disk_mb: LIMIT_MB } },
  uploads: { max_file_size_mb: 32, max_total_size_mb: 64 },
};

/** A btrfs filesystem with quotas on an image in a fresh temp directory,
 * mounted there: {dir, mnt, remove()}, or {skip: why}. */
function btrfsWithQuotas() {
  if (process.getuid() !== 0) return { skip: 'needs root (loop devices, mount)' };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-e2e-btrfs-'));
  const image = path.join(dir, 'image');
  const mnt = path.join(dir, 'mnt');
  let mounted = false;
  const remove = () => {
    if (mounted) {
      try {
        execFileSync('umount', [mnt], { stdio: 'ignore' });
      } catch {
        execFileSync('umount', ['-l', mnt], { stdio: 'ignore' });
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    fs.mkdirSync(mnt);
    execFileSync('truncate', ['-s', '256M', image]);
    execFileSync('mkfs.btrfs', ['-q', '-f', image], { stdio: 'ignore' });
    execFileSync('mount', ['-o', 'loop', image, mnt], { stdio: 'ignore' });
    mounted = true;
    execFileSync('btrfs', ['quota', 'enable', mnt], { stdio: 'ignore' });
  } catch (e) {
    remove();
    return { skip: `cannot make a btrfs filesystem with quotas here: ${e.message.split('\n')[0]}` };
  }
  return { dir, mnt, remove };
}

/** Uploads one file of size bytes to thread tid. */
function uploadOf(srv, token, tid, name, size) {
  const mp = multipart([{ filename: name, content: Buffer.alloc(size, 0x71) }]);
  return request(srv, 'POST', `/api/threads/${tid}/uploads`, {
    bearer: token,
    body: mp.body,
    headers: { 'Content-Type': mp.contentType },
  });
}

/** The checks both mechanisms must pass: a second upload past the limit is
 * 413 with nothing left, and fits again once the first is deleted. */
async function uploadsStopAtTheLimit(srv, admin, tid) {
  const created = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: tid } });
  assert.equal(created.status, 200, created.text);
  const uploads = path.join(srv.userData(admin.id, tid), 'uploads');
  const first = await uploadOf(srv, admin.token, tid, 'first.bin', 10 * MiB);
  assert.equal(first.status, 200, first.text);
  const second = await uploadOf(srv, admin.token, tid, 'second.bin', 10 * MiB);
  assert.equal(second.status, 413, second.text);
  assert.match(second.json.detail, /disk limit/);
  await eventually(() => assert.deepEqual(stagingFiles(uploads), []));
  assert.deepEqual(listDir(uploads), ['first.bin']);
  assert.equal(fs.statSync(path.join(uploads, 'first.bin')).size, 10 * MiB);
  const del = await request(srv, 'DELETE', `/api/threads/${tid}/uploads/first.bin`, { bearer: admin.token });
  assert.equal(del.status, 200, del.text);
  const again = await uploadOf(srv, admin.token, tid, 'second.bin', 10 * MiB);
  assert.equal(again.status, 200, again.text);
}

describe('disk quota where fawn measures', () => {
  let srv;
  let admin;

  before(async () => {
    srv = await FawnServer.start(CONFIG);
    admin = await setupAdmin(srv);
  });
  after(async () => {
    await srv?.stop();
  });

  it('the start log and doctor say which mechanism applies', async (t) => {
    const doctor = await runFawn(['doctor', '--json', '--config', srv.configPath], { home: srv.home });
    const report = JSON.parse(doctor.stdout);
    if (report.disk_quota.mechanism !== 'measured') return t.skip('this host puts temp homes under kernel quotas');
    assert.ok(report.disk_quota.detail.length > 0);
    assert.equal(report.features.disk_quota.status, 'missing');
    assert.match(srv.stderr, /disk quota: measured, not held by the kernel/);
  });

  it('an upload past sandbox.limits.disk_mb answers 413 and leaves no file', async () => {
    await uploadsStopAtTheLimit(srv, admin, 'quota-measured');
  });

  it('a command past the limit is told so, and uploads are refused until files go', async () => {
    const tid = 'quota-command';
    const created = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: tid } });
    assert.equal(created.status, 200, created.text);
    const user = ['--user', String(admin.id), '--thread', tid, '--config', srv.configPath];
    const exec = (command) => runFawn(['sandbox', 'exec', ...user, '--', command], { home: srv.home });
    try {
      const run = await exec('dd if=/dev/zero of=/mnt/user-data/outputs/big bs=1M count=24');
      assert.equal(run.code, 0, run.stderr); // nothing stops a command while it runs
      assert.match(run.stderr, /the thread's files use 2\d MiB, more than their limit of 16 MiB/);
      const up = await uploadOf(srv, admin.token, tid, 'small.bin', 1024);
      assert.equal(up.status, 413, up.text);
      const rm = await exec('rm /mnt/user-data/outputs/big');
      assert.equal(rm.code, 0, rm.stderr);
      assert.doesNotMatch(rm.stderr, /more than their limit/);
      const up2 = await uploadOf(srv, admin.token, tid, 'small.bin', 1024);
      assert.equal(up2.status, 200, up2.text);
    } finally {
      await runFawn(['sandbox', 'stop', ...user], { home: srv.home });
    }
  });
});

describe('disk quota where fawn measures, seen by the agent', () => {
  let srv;
  let admin;
  let fixtureDir;

  before(async () => {
    fixtureDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-e2e-quota-fixture-'));
    const fixture = path.join(fixtureDir, 'fill.json');
    const command = 'dd if=/dev/zero of=/mnt/user-data/workspace/fill bs=1M count=24';
    fs.writeFileSync(fixture, JSON.stringify({
      scenario: 'a command past the disk limit',
      replies: [{ content: '', tool_calls: [{ name: 'bash', args: { description: 'fill', command } }] }, { content: 'done' }],
    }));
    srv = await FawnServer.start({ ...CONFIG, models: [{ name: 'scripted', provider: 'script', fixture }] });
    admin = await setupAdmin(srv);
  });
  after(async () => {
    await srv?.stop();
    fs.rmSync(fixtureDir, { recursive: true, force: true });
  });

  it("the bash tool's result tells the model the thread is over its limit", async () => {
    const created = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: 'quota-agent' } });
    assert.equal(created.status, 200, created.text);
    const r = await request(srv, 'POST', '/api/threads/quota-agent/runs/wait', {
      bearer: admin.token,
      body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'fill it' }] } },
    });
    assert.equal(r.status, 200, r.text);
    const tool = r.json.messages.find((m) => m.type === 'tool');
    assert.ok(tool, r.text);
    assert.match(tool.content, /Disk: the thread's files use 2\d MiB, more than their limit of 16 MiB/);
  });
});

describe('disk quota held by the kernel (btrfs)', () => {
  let fsys;
  let srv;
  let admin;

  before(async () => {
    fsys = btrfsWithQuotas();
    if (fsys.skip) return;
    const home = path.join(fsys.mnt, 'home');
    fs.mkdirSync(home, { mode: 0o700 });
    srv = await FawnServer.start(CONFIG, { home });
    admin = await setupAdmin(srv);
  });
  after(async () => {
    await srv?.stop();
    fsys?.remove?.();
  });

  it('the start log and doctor say btrfs', async (t) => {
    if (fsys.skip) return t.skip(fsys.skip);
    const doctor = await runFawn(['doctor', '--json', '--config', srv.configPath], { home: srv.home });
    const report = JSON.parse(doctor.stdout);
    assert.equal(report.disk_quota.mechanism, 'btrfs');
    assert.equal(report.features.disk_quota.status, 'ok');
    assert.match(srv.stderr, /disk quota: btrfs, 16 MiB per thread/);
  });

  it('an upload past sandbox.limits.disk_mb answers 413 and leaves no file', async (t) => {
    if (fsys.skip) return t.skip(fsys.skip);
    await uploadsStopAtTheLimit(srv, admin, 'quota-kernel');
    const ud = srv.userData(admin.id, 'quota-kernel');
    assert.equal(fs.statSync(ud).ino, 256, 'the user-data is a subvolume of its own');
  });
});
