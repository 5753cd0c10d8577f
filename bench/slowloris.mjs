// Slowloris benchmark (run by bench/slowloris): p99 latency of GET /health
// from one client address while another address holds ATTACKERS half-sent
// requests that trickle a header byte every TRICKLE_MS, next to the same
// measurement with no attack, in the same run on the same gateway. The
// attacker reconnects each connection the gateway closes (after RECONNECT_MS,
// as slowloris tools do), so the pressure lasts the whole measurement.
// On loopback, 127.0.0.1 is the attacker and 127.0.0.2 the client. Each
// figure is the median of ROUNDS rounds, unloaded and attacked taking turns.
// Usage: node bench/slowloris.mjs FAWN_BIN REQUESTS ATTACKERS ROUNDS
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const [fawnBin, requestsArg, attackersArg, roundsArg] = process.argv.slice(2);
const REQUESTS = Number(requestsArg || 2000);
const ATTACKERS = Number(attackersArg || 1100);
const ROUNDS = Number(roundsArg || 3);
const SETTLE_MS = 3000;          // the attack reaches its steady state within this
const CONCURRENCY = 4;           // client requests in flight at once
const REQUEST_TIMEOUT_MS = 5000; // a /health slower than this counts as failed
const TRICKLE_MS = 10000;        // one header byte this often per held connection
const RECONNECT_MS = 1000;       // an attacker connection closed by the gateway is reopened after this
const ATTACKER = '127.0.0.1';
const CLIENT = '127.0.0.2';

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function startFawn() {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-bench-slowloris-'));
  const port = await freePort();
  fs.writeFileSync(path.join(home, 'config.yaml'), `server:\n  host: 127.0.0.1\n  port: ${port}\n`);
  const env = { ...process.env, FAWN_HOME: home };
  delete env.FAWN_CONFIG;
  const child = spawn(fawnBin, ['serve', '--config', path.join(home, 'config.yaml')],
    { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  for (let i = 0; i < 200; i++) {
    if (await healthOnce(port, new http.Agent()).catch(() => null)) return { child, home, port };
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new Error(`fawn serve did not start:\n${stderr}`);
}

function healthOnce(port, agent) {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = http.request({ host: '127.0.0.1', port, path: '/health', localAddress: CLIENT, agent,
      timeout: REQUEST_TIMEOUT_MS }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve(Number(process.hrtime.bigint() - t0) / 1e6)
        : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** REQUESTS /health calls, CONCURRENCY at a time over kept-alive connections. */
async function measure(port) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const latencies = [];
  let failed = 0;
  let next = 0;
  const worker = async () => {
    while (next < REQUESTS) {
      next++;
      try {
        latencies.push(await healthOnce(port, agent));
      } catch {
        failed++;
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const p99 = latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))] : Infinity;
  return { p99, failed, ok: latencies.length };
}

/** ATTACKERS half-sent requests from ATTACKER, each reopened when closed. */
function attack(port) {
  const state = { stopped: false, open: 0, sockets: new Set() };
  const one = () => {
    if (state.stopped) return;
    const s = net.connect({ host: '127.0.0.1', port, localAddress: ATTACKER });
    let timer;
    state.sockets.add(s);
    s.on('error', () => {});
    s.on('connect', () => {
      state.open++;
      s.write('GET /health HTTP/1.1\r\nHost: fawn\r\nX-Slow: ');
      timer = setInterval(() => s.write('a'), TRICKLE_MS);
    });
    s.on('close', () => {
      if (timer) {
        clearInterval(timer);
        state.open--;
      }
      state.sockets.delete(s);
      if (!state.stopped) setTimeout(one, RECONNECT_MS);
    });
  };
  for (let i = 0; i < ATTACKERS; i++) one();
  state.stop = () => {
    state.stopped = true;
    for (const s of state.sockets) s.destroy();
  };
  return state;
}

const fmt = (ms) => (Number.isFinite(ms) ? `${ms.toFixed(2)} ms` : 'none answered');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const sum = (xs) => xs.reduce((a, b) => a + b, 0);

/** One round under attack: {p99, failed, held}. */
async function attacked(port) {
  const siege = attack(port);
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const m = await measure(port);
  m.held = siege.open;
  siege.stop();
  return m;
}

const fawn = await startFawn();
try {
  await measure(fawn.port); // warm-up
  const idle = [];
  const loaded = [];
  for (let i = 0; i < ROUNDS; i++) {
    idle.push(await measure(fawn.port));
    loaded.push(await attacked(fawn.port));
  }
  const idleP99 = median(idle.map((m) => m.p99));
  const loadedP99 = median(loaded.map((m) => m.p99));
  console.log(`/health p99 from ${CLIENT}, ${REQUESTS} requests ${CONCURRENCY} at a time, median of ${ROUNDS} rounds:`);
  console.log(`  unloaded                                   ${fmt(idleP99)}  (${sum(idle.map((m) => m.failed))} failed)`);
  console.log(`  with ${ATTACKERS} slow connections from ${ATTACKER}    ${fmt(loadedP99)}  (${sum(loaded.map((m) => m.failed))} failed; `
    + `attacker connections open: ${loaded.map((m) => m.held).join(', ')})`);
  const ratio = Number.isFinite(loadedP99) ? `${(loadedP99 / idleP99).toFixed(2)}x` : 'none: no request was answered under attack';
  console.log(`  ratio attacked/unloaded                    ${ratio}`);
} finally {
  fawn.child.kill('SIGTERM');
  await new Promise((r) => fawn.child.once('exit', r));
  fs.rmSync(fawn.home, { recursive: true, force: true });
}
