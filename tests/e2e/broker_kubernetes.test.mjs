// The credential broker with sandbox.provider kubernetes, through the fake
// Kubernetes API (lib/fake_kube.mjs: pods are real `fawn box --listen`
// processes on loopback with their Secret's files). A command in a pod
// runs a brokered CLI (tests/broker/fake_cli.sh, which prints what it
// received): the pod's box relays the call over TCP to broker.listen with
// a MAC of the pod's secret, and the CLI gets the user's credentials. A
// forged call while no run holds the sandbox is refused without blaming
// it; a proof made from the pod's secret (as docs/kubernetes.md describes
// it) is taken once, its replay refused; a pod whose relay proves with a wrong secret is refused, its
// generation fenced in the store, and never used again.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, eventually, freePort, request, setupAdmin, storeRows } from './lib/server.mjs';
import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';
import { FakeKube } from './lib/fake_kube.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const FAKE_CLI = path.resolve(here, '..', 'broker', 'fake_cli.sh');
const TOKEN = 'e2e-pod-broker-token-5be1';

function sandboxId(user, thread) {
  return crypto.createHash('sha256').update(`${user}:${thread}`).digest('hex').slice(0, 16);
}

/** The sandbox's fences in server's store, each 'generation reason'. */
function fences(server, sid) {
  return storeRows(server, `SELECT generation || ' ' || reason FROM sandbox_fences WHERE sandbox_id = '${sid}'`);
}

/** A request message for the CLI name with args (src/broker/broker.h's wire). */
function requestMessage(name, args = []) {
  const u32 = (n) => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const parts = [Buffer.from([name.length >> 8, name.length & 255]), Buffer.from(name), u32(args.length)];
  for (const a of args) parts.push(u32(Buffer.byteLength(a)), Buffer.from(a));
  parts.push(u32(0));
  const body = Buffer.concat(parts);
  return Buffer.concat([Buffer.from('FWB1'), u32(body.length), body]);
}

/** The proof line a pod's relay sends for msg, made here from the pod's
 * secret as docs/kubernetes.md describes it. */
function proofLine(secretHex, sid, user, uid, msg) {
  const ts = Math.floor(Date.now() / 1000);
  const nonce = crypto.randomBytes(32).toString('hex');
  const sha = crypto.createHash('sha256').update(msg).digest('hex');
  const mac = crypto.createHmac('sha256', Buffer.from(secretHex, 'hex'))
    .update(['fawn-broker-call-v1', String(ts), nonce, sid, user, uid, sha].join('\n')).digest('hex');
  return `FWP1 ${sid} ${uid} ${String(ts).padStart(19, '0')} ${nonce} ${mac}\n`;
}

/** Sends a broker call over TCP as a pod's relay does; its reply. */
function forgedCall(port, proofLine, name, msg = requestMessage(name)) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const sock = net.connect(port, '127.0.0.1', () => sock.end(Buffer.concat([Buffer.from(proofLine), msg])));
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', reject);
    sock.on('close', () => {
      const r = Buffer.concat(chunks);
      assert.equal(r.subarray(0, 4).toString(), 'FWB1', 'a reply message');
      const outLen = r.readUInt32BE(13);
      resolve({ code: r.readInt32BE(8), out: r.subarray(17, 17 + outLen).toString(), err: r.subarray(21 + outLen).toString() });
    });
  });
}

describe('credential broker for kubernetes pods', () => {
  let srv;
  let admin;
  let kube;
  let fake;
  let port;
  let tid;
  let sid;

  const runBash = async (threadId, command) => {
    fake.queue(reply('', [call('bash', { description: 'use the CLI', command })]), reply('done'));
    const r = await request(srv, 'POST', `/api/threads/${threadId}/runs/wait`, {
      bearer: admin.token,
      body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'go' }] } },
    });
    assert.equal(r.status, 200, r.text);
    const tools = r.json.messages.filter((m) => m.type === 'tool');
    assert.ok(tools.length, r.text);
    return String(tools[tools.length - 1].content);
  };

  before(async () => {
    kube = await FakeKube.start();
    fake = await FakeOpenAI.start();
    port = await freePort();
    srv = await FawnServer.start({
      models: [fake.model()],
      sandbox: {
        provider: 'kubernetes',
        kubernetes: {
          server: kube.url,
          token_file: kube.tokenFile,
          namespace: 'fawn-e2e',
          image: 'registry.example/fawn-box:test',
          broker_address: `127.0.0.1:${port}`,
          start_timeout_s: 60,
          delete_timeout_s: 15,
          request_timeout_s: 5,
        },
      },
      broker: {
        listen: `127.0.0.1:${port}`,
        clis: [{ name: 'fake-cli', binary: FAKE_CLI, allow: ['echo'], env: { FAKE_TOKEN: 'file:token' } }],
      },
    });
    admin = await setupAdmin(srv);
    const dir = path.join(srv.home, 'users', String(admin.id), 'credentials', 'fake-cli');
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    fs.writeFileSync(path.join(dir, 'token'), `${TOKEN}\n`, { mode: 0o600 });
    const created = await request(srv, 'POST', '/api/threads', { bearer: admin.token, body: {} });
    tid = created.json.thread_id;
    sid = sandboxId(admin.id, tid);
  });
  after(async () => {
    await srv?.stop();
    await kube?.stop();
    await fake?.stop();
  });

  it('runs the CLI for a command in the pod with the user\'s credentials, which stay out of the pod', async () => {
    const text = await runBash(tid,
      `echo from-the-pod | fake-cli echo --flag; echo rc=$?; grep -rsl -D skip ${TOKEN} /mnt /tmp /etc /var; echo grep=$?`);
    assert.match(text, /args: echo --flag/, kube.podLog(sid));
    assert.match(text, new RegExp(`token=${TOKEN}`));
    assert.match(text, /from-the-pod/);
    assert.match(text, /rc=0/);
    assert.doesNotMatch(text, /grep=0/);
    const pod = kube.podOf(sid);
    assert.ok(pod.obj.spec.containers[0].command.includes('--broker'), 'the pod is told where the broker is');
    assert.match(srv.stderr, new RegExp(`sandbox ${sid} broker caller at 127\\.0\\.0\\.1: attested`));
    const audit = fs.readFileSync(path.join(srv.home, 'audit', 'broker.log'), 'utf8');
    assert.match(audit, new RegExp(`user=${admin.id} thread=${tid} run=\\S+ sandbox=${sid} cli=fake-cli subcommand="echo" args=2 exit=0`));
    assert.ok(!audit.includes(TOKEN));
    /* The policy is the same as locally. */
    const off = await runBash(tid, 'fake-cli auth export; echo rc=$?');
    assert.match(off, /rc=126/);
    assert.match(off, /not allowed/);
    assert.equal(fences(srv, sid).length, 0);
  });

  it('refuses a forged call while no run holds the sandbox, without blaming the sandbox', async () => {
    const uid = kube.podOf(sid).obj.metadata.uid;
    const now = String(Math.floor(Date.now() / 1000)).padStart(19, '0');
    const hex = () => crypto.randomBytes(32).toString('hex');
    const r = await forgedCall(port, `FWP1 ${sid} ${uid} ${now} ${hex()} ${hex()}\n`, 'fake-cli');
    assert.equal(r.code, 126);
    assert.match(r.err, /no run holds/);
    const malformed = await forgedCall(port, `FWP1 ${sid} ${uid} ${now} ${hex()} ${'Z'.repeat(64)}\n`, 'fake-cli');
    assert.equal(malformed.code, 126);
    assert.match(malformed.err, /MAC/);
    assert.equal(fences(srv, sid).length, 0);
    /* Audited, naming no user or sandbox: nothing was attested. */
    const audit = fs.readFileSync(path.join(srv.home, 'audit', 'broker.log'), 'utf8');
    assert.match(audit, /user=- thread=- run=- sandbox=- cli=fake-cli .*exit=126 .*refused="no run holds/);
  });

  it('takes a proof made from the pod\'s secret once: a replay is refused', async () => {
    const pod = kube.podOf(sid);
    const uid = pod.obj.metadata.uid;
    const secret = kube.secrets.get(`fawn-${sid}`).stringData.attest;
    const outputs = path.join(pod.dir, 'user-data', 'outputs');
    /* A run holds the sandbox while its command waits for the test. */
    fake.queue(reply('', [call('bash', { description: 'hold', command:
      'touch /mnt/user-data/outputs/holding; for i in $(seq 600); do [ -e /mnt/user-data/outputs/release ] && break; sleep 0.1; done' })]), reply('done'));
    const run = await request(srv, 'POST', `/api/threads/${tid}/runs`, {
      bearer: admin.token,
      body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'go' }] } },
    });
    assert.equal(run.status, 200, run.text);
    try {
      await eventually(() => assert.ok(fs.existsSync(path.join(outputs, 'holding'))));
      const msg = requestMessage('fake-cli', ['echo']);
      const line = proofLine(secret, sid, String(admin.id), uid, msg);
      const first = await forgedCall(port, line, 'fake-cli', msg);
      assert.equal(first.code, 0, first.err);
      assert.match(first.out, new RegExp(`token=${TOKEN}`));
      const again = await forgedCall(port, line, 'fake-cli', msg);
      assert.equal(again.code, 126);
      assert.match(again.err, /replay/);
      assert.equal(fences(srv, sid).length, 0, 'a replay blames no one');
    } finally {
      fs.writeFileSync(path.join(outputs, 'release'), '');
      await request(srv, 'GET', `/api/threads/${tid}/runs/${run.json.run_id}/join`, { bearer: admin.token });
      fs.rmSync(path.join(outputs, 'holding'), { force: true });
      fs.rmSync(path.join(outputs, 'release'), { force: true });
    }
  });

  it('refuses a pod whose relay proves with a wrong secret, fences it and never uses it again', async () => {
    const pod = kube.podOf(sid);
    const uid = pod.obj.metadata.uid;
    const gen = uid.replaceAll('-', '');
    kube.lingerForever.add(sid); /* its deletion unconfirmed while we look: the fence must hold */
    kube.corruptAttestFile(sid);
    const text = await runBash(tid, 'fake-cli echo </dev/null; echo rc=$?');
    assert.match(text, /rc=126/);
    assert.match(text, /quarantined/);
    assert.doesNotMatch(text, /token=/);
    assert.deepEqual(fences(srv, sid), [`${gen} a broker caller failed attestation`]);
    assert.match(srv.stderr, new RegExp(`sandbox ${sid} broker caller at 127\\.0\\.0\\.1: refused \\(a wrong proof from its pod\\)`));
    const audit = fs.readFileSync(path.join(srv.home, 'audit', 'broker.log'), 'utf8');
    assert.match(audit, new RegExp(`sandbox=${sid} cli=fake-cli .*exit=126 .*refused=".*quarantined`));
    kube.lingerForever.delete(sid);
    kube.podOf(sid).forever = false;
    /* The next run of the thread gets a new pod; the fenced one is gone. */
    const next = await runBash(tid, 'echo NEXT-POD; fake-cli echo </dev/null; echo rc=$?');
    assert.match(next, /NEXT-POD/);
    assert.notEqual(kube.podOf(sid).obj.metadata.uid, uid, 'a new pod');
    assert.match(next, new RegExp(`token=${TOKEN}`));
    assert.match(next, /rc=0/);
  });
});
