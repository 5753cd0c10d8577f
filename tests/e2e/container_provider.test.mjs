// sandbox.provider container through a real engine: Debian's podman serving
// the Docker-compatible API on a unix socket of this test (rootful, runc, its
// storage in a temporary directory), with the image built offline by
// scripts/build-box-image.sh from the fawn under test. A thread's model calls
// bash and file tools in its container; the container is hardened (checked
// from inside and through the engine); uploads are visible, outputs come
// back; destroy removes the container; a container removed behind fawn's
// back is absent (a new one starts); a restarted gateway adopts its parked
// container; an engine that is down is unknown (the
// generation is fenced, never taken for absent).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, HEAVY_TEST_TIMEOUT_MS, it } from './lib/test.mjs';

import { Client } from '@langchain/langgraph-sdk';
import { FAWN_BIN, FawnServer, eventually, request, setupAdmin, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const BUILD_IMAGE = path.resolve(here, '..', '..', 'scripts', 'build-box-image.sh');
const IMAGE = 'localhost/fawn-box:e2e';

function sandboxId(user, thread) {
  return crypto.createHash('sha256').update(`${user}:${thread}`).digest('hex').slice(0, 16);
}

/** Rootful podman with all of its state under dir. */
class Podman {
  constructor(dir) {
    this.dir = dir;
    this.socket = path.join(dir, 'podman.sock');
    this.flags = [
      '--root', path.join(dir, 'root'), '--runroot', path.join(dir, 'runroot'),
      '--tmpdir', path.join(dir, 'tmp'), '--runtime', 'runc', '--storage-driver', 'vfs',
      '--cgroup-manager', 'cgroupfs', '--events-backend', 'none',
    ];
  }

  run(args, opts = {}) {
    const r = spawnSync('podman', [...this.flags, ...args], { encoding: 'utf8', timeout: 300000, ...opts });
    if (r.status !== 0 && !opts.mayFail) {
      throw new Error(`podman ${args.join(' ')}: ${r.status}\n${r.stderr}`);
    }
    return r;
  }

  /** Starts the API service and waits until it answers. */
  async start() {
    this.proc = spawn('podman', [...this.flags, 'system', 'service', '--time=0', `unix://${this.socket}`], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.stderr = '';
    this.proc.stderr.on('data', (d) => (this.stderr += d));
    this.exited = new Promise((resolve) => this.proc.on('close', resolve));
    await waitFor(async () => (await this.api('GET', '/_ping').catch(() => null))?.status === 200,
      60000, 'the podman service answering');
  }

  async stop() {
    if (!this.proc) return;
    this.proc.kill('SIGTERM');
    await this.exited;
    this.proc = null;
  }

  /** One request to the Docker-compatible API: {status, json}. */
  api(method, apiPath) {
    return new Promise((resolve, reject) => {
      const req = http.request({ socketPath: this.socket, method, path: `/v1.41${apiPath}`, timeout: 30000 }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => {
          let json = null;
          try { json = JSON.parse(text); } catch { /* not JSON */ }
          resolve({ status: res.statusCode, json, text });
        });
      });
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
      req.end();
    });
  }

  /** The containers of this engine labelled for sandbox sid. */
  async containersOf(sid) {
    const filters = encodeURIComponent(JSON.stringify({ label: [`fawn.sandbox=${sid}`] }));
    const res = await this.api('GET', `/containers/json?all=true&filters=${filters}`);
    assert.equal(res.status, 200, res.text);
    return res.json;
  }
}

describe('container provider (podman)', () => {
  let podman;
  let srv;
  let admin;
  let fake;
  let dir;

  // Building and importing the image moves a lot of data (the build's
  // libraries, copied again by vfs storage): a heavy test's ceiling.
  before(async () => {
    dir = fs.mkdtempSync(path.join(fs.realpathSync('/tmp'), 'fawn-e2e-podman-'));
    podman = new Podman(dir);
    const tar = path.join(dir, 'box.tar');
    const built = spawnSync('bash', [BUILD_IMAGE, FAWN_BIN, tar], { encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    podman.run(['import', '--change', 'ENTRYPOINT ["/usr/bin/fawn"]', tar, IMAGE]);
    fs.rmSync(tar);
    await podman.start();
    fake = await FakeOpenAI.start();
    // request_timeout_s is a ceiling only a hung engine reaches: a loaded
    // host's podman (vfs storage copies each container's root) may take
    // seconds to answer, and an engine that is down is refused at once.
    srv = await FawnServer.start({
      models: [fake.model()],
      sandbox: {
        provider: 'container',
        container: { socket: podman.socket, image: IMAGE, api_version: '1.41', engine: 'podman', request_timeout_s: 30, start_timeout_s: 120 },
      },
    });
    admin = await setupAdmin(srv);
  }, { ceilingMs: HEAVY_TEST_TIMEOUT_MS });

  after(async () => {
    /* The engine and its containers go whatever happened to the gateway. */
    try {
      await srv?.stop();
      await fake?.stop();
    } finally {
      if (podman) {
        await podman.stop();
        podman.run(['rm', '--all', '--force', '--time', '0'], { mayFail: true });
        podman.run(['rmi', '--all', '--force'], { mayFail: true });
      }
      // podman's cleanup of a removed container may still write its storage a moment.
      if (dir) fs.rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
    }
  });

  /** Runs one turn in thread whose model makes the given tool calls; the tool messages' texts. */
  async function turn(threadId, calls) {
    for (const c of calls) fake.queue(reply('', [c]));
    fake.queue(reply('done'));
    /* The gateway's address as it is now (a restart may move it). */
    const client = new Client({
      apiUrl: `${srv.base}/api`,
      defaultHeaders: { Authorization: `Bearer ${admin.token}` },
      callerOptions: { maxRetries: 0 },
    });
    await client.threads.create({ threadId, ifExists: 'do_nothing' });
    const values = await client.runs.wait(threadId, 'lead_agent', { input: { messages: [{ type: 'human', content: 'go' }] } });
    assert.ok(Array.isArray(values?.messages), JSON.stringify(values));
    const lastHuman = values.messages.map((m) => m.type).lastIndexOf('human');
    return values.messages.slice(lastHuman).filter((m) => m.type === 'tool')
      .map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content)));
  }

  async function sandboxOf(threadId) {
    const listed = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    assert.equal(listed.status, 200, listed.text);
    return listed.json.sandboxes.find((s) => s.thread_id === threadId);
  }

  it('runs bash and file tools in a hardened container, uploads in, outputs out, and destroys it', async () => {
    const tid = 'boxed';
    const sid = sandboxId(admin.id, tid);
    assert.equal((await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: { thread_id: tid } })).status, 200);
    const fd = new FormData();
    fd.append('files', new Blob(['uploaded bytes\n']), 'notes.txt');
    const up = await fetch(`${srv.base}/api/threads/${tid}/uploads`, {
      method: 'POST', body: fd, headers: { Authorization: `Bearer ${admin.token}` },
    });
    assert.equal(up.status, 200, await up.text());

    const tools = await turn(tid, [
      call('bash', {
        description: 'look around',
        command: 'cat /mnt/user-data/uploads/notes.txt; grep -E "^(Cap|NoNewPrivs)" /proc/self/status; ' +
          'echo UIDMAP $(cat /proc/self/uid_map); (touch /probe 2>&1 || true); ' +
          'echo NET $(tail -n +3 /proc/net/dev | cut -d: -f1); echo from-bash > /mnt/user-data/outputs/bash.txt; echo END',
      }),
      call('write_file', { description: 'write', path: '/mnt/user-data/outputs/report.txt', content: 'report body\n' }),
      call('read_file', { description: 'read', path: '/mnt/user-data/uploads/notes.txt' }),
      call('present_files', { filepaths: ['/mnt/user-data/outputs/report.txt', '/mnt/user-data/outputs/bash.txt'] }),
    ]);
    const [bash, , read] = tools;
    assert.match(bash, /uploaded bytes/);
    for (const cap of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) {
      assert.match(bash, new RegExp(`${cap}:\\s+0000000000000000`), bash);
    }
    assert.match(bash, /NoNewPrivs:\s+1/);
    /* uid 0 of the box's namespace is a host uid that is not root */
    const outer = Number(bash.match(/UIDMAP \d+ (\d+) \d+/)[1]);
    assert.ok(outer > 0, bash);
    assert.match(bash, /Read-only file system/);
    assert.match(bash, /NET\s+lo\s/);
    assert.match(bash, /END/);
    assert.match(read, /uploaded bytes/);

    const report = await request(srv, 'GET', `/api/threads/${tid}/artifacts/mnt/user-data/outputs/report.txt`, { bearer: admin.token });
    assert.equal(report.status, 200, report.text);
    assert.equal(report.text, 'report body\n');
    const fromBash = await request(srv, 'GET', `/api/threads/${tid}/artifacts/mnt/user-data/outputs/bash.txt`, { bearer: admin.token });
    assert.equal(fromBash.text, 'from-bash\n');

    /* The container itself, through the engine and from a process in it. */
    const [c] = await podman.containersOf(sid);
    assert.ok(c, 'a container labelled for the sandbox');
    const inspect = (await podman.api('GET', `/containers/${c.Id}/json`)).json;
    assert.equal(inspect.State.Status, 'running');
    assert.equal(inspect.HostConfig.ReadonlyRootfs, true);
    assert.equal(inspect.HostConfig.NetworkMode, 'none');
    assert.notEqual(inspect.Config.User.split(':')[0], '0');
    assert.ok(inspect.HostConfig.SecurityOpt.includes('no-new-privileges'), JSON.stringify(inspect.HostConfig.SecurityOpt));
    assert.equal(inspect.HostConfig.Memory, 1024 * 1024 * 1024);
    assert.equal(inspect.HostConfig.PidsLimit, 512);
    const status = podman.run(['exec', c.Id, '/usr/bin/cat', '/proc/1/status']).stdout;
    assert.match(status, /CapEff:\s+0000000000000000/);
    assert.match(status, /CapBnd:\s+0000000000000000/);
    assert.match(status, /NoNewPrivs:\s+1/);
    assert.doesNotMatch(status, /^Uid:\s+0\s/m);
    const touch = podman.run(['exec', c.Id, '/usr/bin/touch', '/probe'], { mayFail: true });
    assert.notEqual(touch.status, 0);
    assert.match(touch.stderr, /Read-only file system/);
    const netdev = podman.run(['exec', c.Id, '/usr/bin/cat', '/proc/net/dev']).stdout;
    assert.deepEqual(netdev.split('\n').slice(2).filter(Boolean).map((l) => l.split(':')[0].trim()), ['lo']);

    const deleted = await request(srv, 'DELETE', `/api/threads/${tid}`, { bearer: admin.token });
    assert.equal(deleted.status, 200, deleted.text);
    await eventually(async () => assert.deepEqual(await podman.containersOf(sid), []));
    const runDirs = fs.readdirSync(path.join(srv.home, 'run')).filter((n) => n.startsWith(`ctr-${sid}-`));
    assert.deepEqual(runDirs, []);
  });

  it('a container removed behind fawn\'s back is absent: the next turn gets a new one', async () => {
    const tid = 'vanished';
    const sid = sandboxId(admin.id, tid);
    await turn(tid, [call('bash', { description: 'x', command: 'echo first > /mnt/user-data/workspace/a' })]);
    const before = await sandboxOf(tid);
    assert.ok(before, 'the sandbox is listed');
    /* A gateway killed and restarted adopts its parked container: same generation. */
    await srv.kill9();
    await srv.restart();
    const adopted = await sandboxOf(tid);
    assert.equal(adopted?.generation, before.generation);
    assert.equal(adopted.state, 'idle');
    const [c] = await podman.containersOf(sid);
    podman.run(['rm', '--force', '--time', '0', c.Id]);

    const tools = await turn(tid, [call('bash', { description: 'x', command: 'cat /mnt/user-data/workspace/a; echo AGAIN' })]);
    assert.match(tools[0], /first[\s\S]*AGAIN/);
    const now = await sandboxOf(tid);
    assert.notEqual(now.generation, before.generation);
    assert.equal(now.fenced, false);
    const containers = await podman.containersOf(sid);
    assert.equal(containers.length, 1);
    assert.notEqual(containers[0].Id, c.Id);
  });

  it('an engine that is down is unknown: the generation is fenced, not taken for absent', async () => {
    const tid = 'unreachable';
    const sid = sandboxId(admin.id, tid);
    await turn(tid, [call('bash', { description: 'x', command: 'echo up' })]);
    const before = await sandboxOf(tid);
    const [c] = await podman.containersOf(sid);

    await podman.stop();
    const tools = await turn(tid, [call('bash', { description: 'x', command: 'echo SHOULD-NOT-RUN' })]);
    assert.doesNotMatch(tools[0] ?? '', /^SHOULD-NOT-RUN/m);
    const fenced = await sandboxOf(tid);
    assert.equal(fenced.generation, before.generation);
    assert.equal(fenced.fenced, true);
    /* Nothing was removed while the engine could not be asked. */
    const still = podman.run(['container', 'inspect', '--format', '{{.State.Status}}', c.Id]).stdout.trim();
    assert.equal(still, 'running');

    await podman.start();
    const again = await turn(tid, [call('bash', { description: 'x', command: 'echo BACK' })]);
    assert.match(again[0], /BACK/);
    const now = await sandboxOf(tid);
    assert.notEqual(now.generation, before.generation);
    assert.equal(now.fenced, false);
    const containers = await podman.containersOf(sid);
    assert.deepEqual(containers.map((x) => x.Id).filter((id) => id === c.Id), []);
  });
});
