// A fake Kubernetes API server on loopback, written from the API reference's
// documented shapes (core/v1 Pod, PodList, Secret, Status, DeleteOptions and
// /version). It is no cluster: a pod "runs" as a real `fawn box --listen`
// process on 127.0.0.1, started once the pod's Secret exists, with what the
// manifest would give it in a cluster: its env (the downward API's
// metadata.uid included), its Secret's keys as files and its emptyDir
// volumes, each mount a directory of its own under the pod's directory.
// Like an admission webhook, it gives the box container a free port of this
// host instead of the one asked for, and reports it in the pod's spec.
//
// Test hooks: every request is recorded; the next requests matching a
// method and path can be made to fail (a status, a hang, or garbage); a
// sandbox's pod can be given a wrong attestation secret, at its start or
// (its Secret's file rewritten) while it runs; deleted pods can
// be made to linger (GETs still find them) for a number of GETs or forever.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import { FAWN_BIN, freePort } from './server.mjs';

const SANITIZER_KEYS = ['ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS'];

function status(code, reason, message, details) {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, details, code };
}

export class FakeKube {
  constructor(token) {
    this.token = token;
    this.pods = new Map(); // name -> {obj, proc, dir, lingerGets, lingerForever}
    this.secrets = new Map(); // name -> obj
    this.requests = []; // {method, path}
    this.failures = []; // {method, match, action, count}
    this.wrongSecret = new Set(); // sandbox ids whose next pod gets a wrong attestation secret
    this.lingerGets = 1; // GETs a deleted pod still answers before it is gone
    this.lingerForever = new Set(); // sandbox ids whose deleted pods never go
    this.refuseDryRun = false; // the dry-run create answers 403 (negative capability)
    this.ipCounter = 0;
    this.hanging = new Set();
  }

  static async start() {
    const f = new FakeKube(crypto.randomBytes(24).toString('hex'));
    f.root = fs.mkdtempSync(path.join(fs.realpathSync(os.tmpdir()), 'fawn-e2e-kube-'));
    f.server = http.createServer((req, res) => f.#handle(req, res));
    await new Promise((resolve) => f.server.listen(0, '127.0.0.1', resolve));
    f.url = `http://127.0.0.1:${f.server.address().port}`;
    f.tokenFile = path.join(f.root, 'sa-token');
    fs.writeFileSync(f.tokenFile, `${f.token}\n`);
    return f;
  }

  async stop() {
    for (const res of this.hanging) res.destroy();
    for (const pod of this.pods.values()) pod.proc?.kill('SIGKILL');
    this.server.closeAllConnections?.();
    await new Promise((resolve) => this.server.close(resolve));
    fs.rmSync(this.root, { recursive: true, force: true });
  }

  /** The next count requests of method whose path matches re answer action:
   * a status number (with a Status body), 'hang' or 'garbage'. */
  failNext(method, re, action, count = 1) {
    this.failures.push({ method, re, action, count });
  }

  count(method, re) {
    return this.requests.filter((r) => r.method === method && re.test(r.path)).length;
  }

  podOf(sandboxId) {
    return this.pods.get(`fawn-${sandboxId}`);
  }

  #send(res, code, obj) {
    const body = JSON.stringify(obj);
    res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  }

  async #handle(req, res) {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString();
    const url = new URL(req.url, this.url);
    this.requests.push({ method: req.method, path: url.pathname + url.search });
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      return this.#send(res, 401, status(401, 'Unauthorized', 'Unauthorized'));
    }
    const f = this.failures.find((x) => x.method === req.method && x.re.test(url.pathname + url.search) && x.count > 0);
    if (f) {
      f.count--;
      if (f.action === 'hang') return this.hanging.add(res);
      if (f.action === 'garbage') {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end('{"kind": "Pod", "metadata": [');
      }
      return this.#send(res, f.action, status(f.action, 'InternalError', 'injected failure'));
    }
    let body = null;
    try {
      body = raw ? JSON.parse(raw) : null;
    } catch {
      return this.#send(res, 400, status(400, 'BadRequest', 'the body is not JSON'));
    }
    try {
      this.#route(req.method, url, body, res);
    } catch (e) {
      this.#send(res, 500, status(500, 'InternalError', String(e)));
    }
  }

  #route(method, url, body, res) {
    if (method === 'GET' && url.pathname === '/version') {
      return this.#send(res, 200, { major: '1', minor: '30', gitVersion: 'v1.30.0-fake', platform: 'linux/amd64' });
    }
    const m = url.pathname.match(/^\/api\/v1\/namespaces\/([a-z0-9-]+)\/(pods|secrets)(?:\/([a-z0-9-]+))?$/);
    if (!m) return this.#send(res, 404, status(404, 'NotFound', 'the server could not find the requested resource', {}));
    const [, ns, kind, name] = m;
    if (kind === 'pods') return this.#pods(method, url, ns, name, body, res);
    return this.#secrets(method, ns, name, body, res);
  }

  #notFound(res, kind, name) {
    this.#send(res, 404, status(404, 'NotFound', `${kind} "${name}" not found`, { name, kind }));
  }

  #pods(method, url, ns, name, body, res) {
    if (method === 'POST' && !name) {
      if (body?.kind !== 'Pod' || !body.metadata?.name) return this.#send(res, 422, status(422, 'Invalid', 'not a pod'));
      const obj = structuredClone(body);
      obj.metadata.uid = crypto.randomUUID();
      obj.metadata.namespace = ns;
      obj.metadata.creationTimestamp = new Date().toISOString();
      obj.status = { phase: 'Pending' };
      if (url.searchParams.get('dryRun') === 'All') {
        if (this.refuseDryRun) return this.#send(res, 403, status(403, 'Forbidden', 'pods "x" is forbidden: image not allowed'));
        return this.#send(res, 201, obj);
      }
      if (this.pods.has(obj.metadata.name)) {
        return this.#send(res, 409, status(409, 'AlreadyExists', `pods "${obj.metadata.name}" already exists`, { name: obj.metadata.name, kind: 'pods' }));
      }
      this.pods.set(obj.metadata.name, { obj });
      this.#maybeStart(obj.metadata.name);
      return this.#send(res, 201, obj);
    }
    if (method === 'GET' && !name) {
      const selector = url.searchParams.get('labelSelector') || '';
      const [k, v] = selector.split('=');
      const items = [...this.pods.values()].map((p) => p.obj).filter((o) => !k || o.metadata.labels?.[k] === v);
      return this.#send(res, 200, { kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items });
    }
    const pod = this.pods.get(name);
    if (method === 'GET') {
      if (!pod) return this.#notFound(res, 'pods', name);
      if (pod.obj.metadata.deletionTimestamp && !pod.forever && pod.lingerGets-- <= 0) {
        this.pods.delete(name);
        return this.#notFound(res, 'pods', name);
      }
      return this.#send(res, 200, pod.obj);
    }
    if (method === 'DELETE') {
      if (!pod) return this.#notFound(res, 'pods', name);
      const uid = body?.preconditions?.uid;
      if (uid && uid !== pod.obj.metadata.uid) {
        return this.#send(res, 409, status(409, 'Conflict', 'Precondition failed: UID in precondition does not match', { name, kind: 'pods' }));
      }
      if (!pod.obj.metadata.deletionTimestamp) {
        pod.obj.metadata.deletionTimestamp = new Date().toISOString();
        pod.lingerGets = this.lingerGets;
        pod.forever = this.lingerForever.has(pod.obj.metadata.labels?.['fawn.dev/sandbox-id']);
        pod.proc?.kill('SIGTERM');
      }
      return this.#send(res, 200, pod.obj);
    }
    return this.#send(res, 405, status(405, 'MethodNotAllowed', 'method not allowed'));
  }

  #secrets(method, ns, name, body, res) {
    if (method === 'POST' && !name) {
      const sname = body?.metadata?.name;
      if (body?.kind !== 'Secret' || !sname) return this.#send(res, 422, status(422, 'Invalid', 'not a secret'));
      if (this.secrets.has(sname)) {
        return this.#send(res, 409, status(409, 'AlreadyExists', `secrets "${sname}" already exists`, { name: sname, kind: 'secrets' }));
      }
      this.secrets.set(sname, structuredClone(body));
      for (const podName of this.pods.keys()) this.#maybeStart(podName);
      const shown = structuredClone(body);
      delete shown.stringData;
      return this.#send(res, 201, shown);
    }
    if (method === 'DELETE' && name) {
      if (!this.secrets.delete(name)) return this.#notFound(res, 'secrets', name);
      return this.#send(res, 200, status(200, '', '', { name, kind: 'secrets' }));
    }
    return this.#send(res, 405, status(405, 'MethodNotAllowed', 'method not allowed'));
  }

  /** Starts a pending pod whose Secret exists (a kubelet mounting it). */
  async #maybeStart(name) {
    const pod = this.pods.get(name);
    if (!pod || pod.starting || pod.obj.metadata.deletionTimestamp) return;
    const volumes = pod.obj.spec.volumes || [];
    const secretVol = volumes.find((v) => v.secret);
    const secret = secretVol && this.secrets.get(secretVol.secret.secretName);
    if (!secret) return;
    pod.starting = true;
    const sid = pod.obj.metadata.labels['fawn.dev/sandbox-id'];
    const dir = fs.mkdtempSync(path.join(this.root, `${name}-`));
    pod.dir = dir;
    const c = pod.obj.spec.containers.find((x) => x.name === 'box');
    const mounts = new Map();
    for (const vm of c.volumeMounts) {
      const host = path.join(dir, vm.name);
      fs.mkdirSync(host, { recursive: true, mode: 0o755 });
      mounts.set(vm.mountPath, host);
      const vol = volumes.find((v) => v.name === vm.name);
      if (vol?.secret) {
        for (const [k, v] of Object.entries(secret.stringData || {})) {
          const text = k === 'attest' && this.wrongSecret.has(sid) ? crypto.randomBytes(32).toString('hex') : v;
          fs.writeFileSync(path.join(host, k), text, { mode: 0o400 });
        }
      }
    }
    this.wrongSecret.delete(sid);
    const remap = (s) => {
      for (const [mp, host] of mounts) if (s === mp || s.startsWith(`${mp}/`)) return host + s.slice(mp.length);
      return s;
    };
    const port = await freePort();
    const args = c.command.slice(1).map((a) => (/^0\.0\.0\.0:\d+$/.test(a) ? `127.0.0.1:${port}` : remap(a)));
    const env = { PATH: process.env.PATH };
    for (const k of SANITIZER_KEYS) if (process.env[k]) env[k] = process.env[k];
    for (const e of c.env || []) {
      if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.uid') env[e.name] = pod.obj.metadata.uid;
      else env[e.name] = remap(e.value);
    }
    fs.mkdirSync(env.FAWN_HOME, { recursive: true });
    const log = fs.openSync(path.join(dir, 'log'), 'a');
    pod.proc = spawn(FAWN_BIN, args, { env, stdio: ['ignore', log, log], detached: true });
    fs.closeSync(log);
    pod.proc.on('exit', () => {
      if (pod.obj.status.phase === 'Running' && !pod.obj.metadata.deletionTimestamp) pod.obj.status.phase = 'Failed';
    });
    c.ports.find((p) => p.name === 'box').containerPort = port;
    pod.obj.status = { phase: 'Running', podIP: '127.0.0.1', podIPs: [{ ip: '127.0.0.1' }] };
  }

  /** Rewrites the attestation secret file of sandboxId's running pod with
   * another secret, as an update of its Secret would: the box keeps the
   * secret it read at start, its credential broker relay reads the file
   * for each call. */
  corruptAttestFile(sandboxId) {
    const file = path.join(this.podOf(sandboxId).dir, 'fawn-secret', 'attest');
    fs.rmSync(file);
    fs.writeFileSync(file, crypto.randomBytes(32).toString('hex'), { mode: 0o400 });
  }

  /** The log of sandboxId's pod's box (for failure messages). */
  podLog(sandboxId) {
    const pod = this.podOf(sandboxId);
    return pod?.dir ? fs.readFileSync(path.join(pod.dir, 'log'), 'utf8') : '';
  }
}
