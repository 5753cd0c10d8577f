// sandbox.provider kubernetes through a fake Kubernetes API server on
// loopback (lib/fake_kube.mjs; no cluster): pods run as real `fawn box
// --listen` processes with the env and Secret files their manifest gives
// them. A run's tools execute in the pod once it attested; a pod with a
// wrong secret is refused, fenced, and still fenced after a restart; the
// capability cache's answers expire; a delete waits for the API's 404;
// API errors are unknown, never absence.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { Client } from '@langchain/langgraph-sdk';
import { FawnServer, eventually, request, setupAdmin, storeRows } from './lib/server.mjs';
import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';
import { FakeKube } from './lib/fake_kube.mjs';

function sandboxId(user, thread) {
  return crypto.createHash('sha256').update(`${user}:${thread}`).digest('hex').slice(0, 16);
}

function fences(srv, sid) {
  return storeRows(srv, `SELECT generation || ' ' || reason FROM sandbox_fences WHERE sandbox_id = '${sid}'`);
}

describe('kubernetes provider', () => {
  let srv;
  let admin;
  let kube;
  let fake;
  let firstSid; /* the attested sandbox of the first test */
  /* A client of the server as it runs now (a restart takes another port). */
  const sdk = () =>
    new Client({
      apiUrl: `${srv.base}/api`,
      defaultHeaders: { Authorization: `Bearer ${admin.token}` },
      callerOptions: { maxRetries: 0 },
    });

  const runBash = async (threadId, command) => {
    fake.queue(reply('', [call('bash', { description: 'run', command })]));
    fake.queue(reply('done'));
    const first = fake.requests.length;
    await sdk().runs.wait(threadId, 'lead_agent', { input: { messages: [{ type: 'human', content: 'go' }] } });
    const tools = fake.requests[first + 1].body.messages.filter((m) => m.role === 'tool');
    return tools[tools.length - 1].content; /* this run's: the thread keeps earlier ones */
  };
  const newThread = async () => (await sdk().threads.create()).thread_id;

  before(async () => {
    kube = await FakeKube.start();
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({
      models: [fake.model()],
      sandbox: {
        provider: 'kubernetes',
        kubernetes: {
          server: kube.url,
          token_file: kube.tokenFile,
          namespace: 'fawn-e2e',
          image: 'registry.example/fawn-box:test',
          start_timeout_s: 60,
          delete_timeout_s: 15, /* a ceiling: only a lingering pod reaches it */
          request_timeout_s: 5,
          probe_timeout_s: 5,
          capability_ttl_s: 1,
          capability_negative_ttl_s: 1,
        },
      },
    });
    admin = await setupAdmin(srv);
  });
  after(async () => {
    await srv?.stop();
    await kube?.stop();
    await fake?.stop();
  });

  it('runs a tool in the attested pod, made hardened with its own Secret', async () => {
    const tid = await newThread();
    const sid = sandboxId(admin.id, tid);
    firstSid = sid;
    const out = await runBash(tid, 'echo IN-POD > /mnt/user-data/outputs/mark.txt; echo "uid=$(id -u)"; cat /mnt/user-data/outputs/mark.txt');
    assert.match(out, /IN-POD/);
    const pod = kube.podOf(sid);
    assert.ok(pod, 'the pod exists');
    /* The file the tool wrote is in the pod's user-data volume. */
    assert.equal(fs.readFileSync(path.join(pod.dir, 'user-data', 'outputs', 'mark.txt'), 'utf8'), 'IN-POD\n');
    const spec = pod.obj.spec;
    assert.equal(spec.automountServiceAccountToken, false);
    assert.equal(spec.securityContext.runAsNonRoot, true);
    assert.equal(spec.securityContext.seccompProfile.type, 'RuntimeDefault');
    const sc = spec.containers[0].securityContext;
    assert.deepEqual(sc.capabilities.drop, ['ALL']);
    assert.equal(sc.allowPrivilegeEscalation, false);
    assert.equal(sc.readOnlyRootFilesystem, true);
    assert.equal(pod.obj.metadata.labels['fawn.dev/sandbox-id'], sid);
    assert.match(spec.containers[0].resources.limits.memory, /^\d+Mi$/);
    const secret = kube.secrets.get(`fawn-${sid}`);
    assert.equal(secret.metadata.ownerReferences[0].uid, pod.obj.metadata.uid);
    assert.match(secret.stringData.attest, /^[0-9a-f]{64}$/);
    assert.match(srv.stderr, new RegExp(`sandbox ${sid} pod ${pod.obj.metadata.uid} attestation: attested`));
    /* The generation the gateway shows is the pod's UID. */
    const listed = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    const mine = listed.json.sandboxes.find((s) => s.sandbox_id === sid);
    assert.equal(mine.generation, pod.obj.metadata.uid.replaceAll('-', ''));
    assert.equal(fences(srv, sid).length, 0);
    /* A command in the sandbox, looking for the pod's secrets where the pod
     * has them and where a box might leak them, finds neither. */
    const probe = await runBash(tid, 'cat /var/run/fawn/attest /var/run/fawn/token; ls -la /var/run/fawn; ' +
      'tr "\\0" "\\n" < /proc/1/environ; grep -rs . /proc/1/cmdline; env; echo PROBED');
    assert.match(probe, /PROBED/);
    assert.ok(!probe.includes(secret.stringData.attest), probe);
    assert.ok(!probe.includes(secret.stringData.token), probe);
  });

  it('refuses a pod with a wrong secret, fences it, and keeps it fenced after a restart', async () => {
    const tid = await newThread();
    const sid = sandboxId(admin.id, tid);
    kube.wrongSecret.add(sid);
    kube.lingerForever.add(sid); /* its deletion never confirmed: the fence must hold */
    const out = await runBash(tid, 'echo SHOULD-NOT-RUN');
    assert.doesNotMatch(out, /SHOULD-NOT-RUN/);
    const pod = kube.podOf(sid);
    const gen = pod.obj.metadata.uid.replaceAll('-', '');
    assert.match(srv.stderr, new RegExp(`pod ${pod.obj.metadata.uid} attestation: refused`));
    assert.deepEqual(fences(srv, sid), [`${gen} attestation refused`]);
    /* Nothing but the attestation challenge ever reached that box. */
    assert.doesNotMatch(kube.podLog(sid), /shell\/exec|SHOULD-NOT-RUN/);

    await srv.stop({ keepHome: true });
    await srv.restart();
    assert.deepEqual(fences(srv, sid), [`${gen} attestation refused`]);
    /* The attested pod of the first test is attested again and adopted. */
    const firstPod = kube.podOf(firstSid).obj.metadata.uid;
    assert.match(srv.stderr, new RegExp(`sandbox ${firstSid} pod ${firstPod} attestation: attested`));
    const adopted = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    assert.equal(adopted.json.sandboxes.find((s) => s.sandbox_id === firstSid)?.generation, firstPod.replaceAll('-', ''));
    const again = await runBash(tid, 'echo STILL-NOT');
    assert.doesNotMatch(again, /STILL-NOT/);
    assert.equal(kube.podOf(sid).obj.metadata.uid, pod.obj.metadata.uid, 'the fenced pod is still the one there');
    assert.deepEqual(fences(srv, sid), [`${gen} attestation refused`]);
    const listed = await request(srv, 'GET', '/api/sandboxes', { bearer: admin.token });
    const entry = listed.json.sandboxes.find((s) => s.sandbox_id === sid);
    assert.ok(!entry || entry.generation !== gen, 'the fenced generation is never handed out');
    kube.lingerForever.delete(sid);
  });

  it('expires capability answers: a refusal is cached, then probed again', async () => {
    const probes = () => kube.count('POST', /\/pods\?dryRun=All$/);
    kube.refuseDryRun = true;
    try {
      /* Once the earlier positive answer expired, a probe sees the refusal:
       * a fresh thread's sandbox is refused and no pod is made for it. */
      const refused = await eventually(async () => {
        const tid = await newThread();
        const out = await runBash(tid, 'echo NOPE');
        assert.doesNotMatch(out, /NOPE/);
        assert.match(out, /cannot run sandboxes: API v1\.30\.0-fake refuses the box pod/);
        return sandboxId(admin.id, tid);
      });
      assert.equal(kube.podOf(refused), undefined, 'a refused capability makes no pod');
      assert.match(srv.stderr, /kubernetes capabilities probed: API v1\.30\.0-fake refuses the box pod/);
      const refusedAt = probes();
      kube.refuseDryRun = false;
      /* After the negative answer's lifetime, a new probe admits the pod. */
      const admitted = await eventually(async () => {
        const tid = await newThread();
        assert.match(await runBash(tid, 'echo ADMITTED'), /ADMITTED/);
        return sandboxId(admin.id, tid);
      });
      assert.ok(probes() > refusedAt, 'probed again after the negative answer expired');
      assert.ok(kube.podOf(admitted));
    } finally {
      kube.refuseDryRun = false;
    }
  });

  it('takes a capability probe that never answers as unknown, never as a refusal', async () => {
    const versions = () => kube.count('GET', /^\/version$/);
    const before = versions();
    kube.failNext('GET', /^\/version$/, 'hang', 1);
    /* Once the cached answer expired, the probe hangs: the create fails as
     * unknown within the probe's timeout, and makes no pod. */
    const sid = await eventually(async () => {
      const tid = await newThread();
      const out = await runBash(tid, 'echo MAYBE');
      assert.match(out, /capabilities are unknown/);
      return sandboxId(admin.id, tid);
    });
    assert.equal(kube.podOf(sid), undefined);
    assert.ok(versions() > before);
    /* Unknown was not remembered: the next create probes again and runs. */
    const tid = await newThread();
    assert.match(await runBash(tid, 'echo NOW'), /NOW/);
    assert.doesNotMatch(srv.stderr, /cannot run sandboxes: .*timed out/);
  });

  it('waits for the API to confirm a deletion, and takes API errors as unknown', async () => {
    const tid = await newThread();
    const sid = sandboxId(admin.id, tid);
    assert.match(await runBash(tid, 'echo UP'), /UP/);
    const name = `fawn-${sid}`;
    kube.lingerGets = 3; /* answered 200 three times after the DELETE */
    kube.failNext('GET', new RegExp(`/pods/${name}$`), 500, 1);
    kube.failNext('GET', new RegExp(`/pods/${name}$`), 'garbage', 1);
    const before = kube.requests.length;
    const res = await request(srv, 'DELETE', `/api/threads/${tid}`, { bearer: admin.token });
    assert.equal(res.status, 200, res.text);
    assert.equal(kube.pods.has(name), false, 'the answer came after the API said 404');
    const seen = kube.requests.slice(before).map((r) => `${r.method} ${r.path}`);
    assert.ok(seen.includes(`DELETE /api/v1/namespaces/fawn-e2e/pods/${name}`), seen.join('\n'));
    assert.ok(seen.filter((s) => s === `GET /api/v1/namespaces/fawn-e2e/pods/${name}`).length >= 5, seen.join('\n'));
    kube.lingerGets = 1;
  });

  it('never takes an API outage for absence: a restart keeps the fences while the API fails', async () => {
    const sids = [...kube.pods.values()].map((p) => p.obj.metadata.labels['fawn.dev/sandbox-id']);
    const fenced = sids.filter((sid) => fences(srv, sid).length > 0);
    assert.ok(fenced.length >= 1, 'the refused pod is fenced');
    await srv.stop({ keepHome: true });
    kube.failNext('GET', /\/pods/, 503, 1000);
    await srv.restart();
    for (const sid of fenced) assert.ok(fences(srv, sid).length > 0, `the fence of ${sid} holds`);
    assert.match(srv.stderr, /cannot list the kubernetes provider's sandboxes/);
    kube.failures.length = 0;
  });
});
