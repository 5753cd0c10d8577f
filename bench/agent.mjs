// Agent benchmark (run by bench/agent): two figures, each next to a baseline
// measured in the same run.
//  1. Per tool step overhead of a scripted run: a 50-step run whose every step
//     is one bash call of a distinct no-op command, timed end to end, minus the
//     bare warm exec of the same 50 commands on the same box over a kept-alive
//     connection (the box API, no gateway), divided by 50. The script model
//     answers at once, so what is left is the run loop: hooks, checkpoints,
//     receipts, events and the sandbox lease. Target: under 2 ms.
//  2. 1000 concurrent SSE readers of one run: events delivered per second to
//     all of them, and the gateway's resident memory with them connected
//     against before. Target: under 50 MiB added.
//  3. Sub-agents: a lead that hands 60 commands to 3 sub-agents (20 each, one
//     per step, all three at once, each in its own shell session) against
//     one agent running the same 60 commands in turn, both timed end to end.
//     Each command waits 50 ms, as most agent commands wait (builds, tests,
//     downloads); commands that only burn CPU could not go below 1/cores.
//     Target: 0.4x or less.
// Usage: node bench/agent.mjs FAWN_BIN ROUNDS READERS
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

import { freePort } from './lib.mjs';

const [fawnBin, roundsArg, readersArg] = process.argv.slice(2);
const STEPS = 50;
const ROUNDS = Number(roundsArg || 5);
const READERS = Number(readersArg || 1000);
const HOLD_S = 8; // the readers' run sleeps this long at its end, so they stay connected


function call(port, method, p, { body, token, agent } = {}) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request({ host: '127.0.0.1', port, method, path: p, agent,
      headers: { ...(data ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } : {}),
        ...(token ? { Authorization: `Bearer ${token}` } : {}) } }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => {
        if (res.statusCode >= 300) reject(new Error(`${method} ${p}: ${res.statusCode} ${text}`));
        else resolve(text ? JSON.parse(text) : null);
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}

const bashStep = (i) => ({ content: '', tool_calls: [{ name: 'bash', args: { description: 'step', command: `true ${i}` } }] });
// The sub-agents figure: its commands, per sub-agent and in all.
const TASKS = 3;
const TASK_STEPS = 20;
const waitStep = (i) => ({ content: '', tool_calls: [{ name: 'bash', args: { description: 'step', command: `sleep 0.05; echo ${i}` } }] });
const taskCall = (i) => ({ name: 'task', args: { description: `part ${i}`, prompt: `part ${i}`, subagent_type: 'bench' } });

function writeFixtures(home) {
  const steps = { replies: [...Array.from({ length: STEPS }, (_, i) => bashStep(i)), { content: 'done' }] };
  const readers = { replies: [...Array.from({ length: 20 }, (_, i) => bashStep(i)),
    { content: '', tool_calls: [{ name: 'bash', args: { description: 'hold', command: `sleep ${HOLD_S}` } }] },
    { content: 'done' }] };
  fs.writeFileSync(path.join(home, 'steps.json'), JSON.stringify(steps));
  fs.writeFileSync(path.join(home, 'warm.json'), JSON.stringify({ replies: [bashStep(-1), { content: 'warm' }] }));
  fs.writeFileSync(path.join(home, 'readers.json'), JSON.stringify(readers));
  const all = TASKS * TASK_STEPS;
  fs.writeFileSync(path.join(home, 'serial.json'), JSON.stringify({ replies: [...Array.from({ length: all }, (_, i) => waitStep(i)), { content: 'done' }] }));
  // Each sub-agent's calls count from 0: the three play the same script.
  fs.writeFileSync(path.join(home, 'part.json'), JSON.stringify({ replies: [...Array.from({ length: TASK_STEPS }, (_, i) => waitStep(i)), { content: 'part done' }] }));
  fs.writeFileSync(path.join(home, 'fanout.json'), JSON.stringify({ replies: [
    { content: '', tool_calls: Array.from({ length: TASKS }, (_, i) => taskCall(i)) }, { content: 'done' }] }));
}

async function startServer(home, port) {
  const config = path.join(home, 'config.yaml');
  fs.writeFileSync(config, [
    // Sandboxes outlive a stopped gateway (the next one adopts them); these
    // exit on their own 30 s after the benchmark (idle_timeout_s).
    `home: ${home}`, 'log_level: warn', 'server:', '  host: 127.0.0.1', `  port: ${port}`,
    // The readers all come from 127.0.0.1: one address may hold all but one slot.
    '  max_connections_per_address: 1023',
    'sandbox:', '  idle_timeout_s: 30',
    'models:',
    `  - {name: steps, provider: script, fixture: ${path.join(home, 'steps.json')}}`,
    `  - {name: warm, provider: script, fixture: ${path.join(home, 'warm.json')}}`,
    `  - {name: readers, provider: script, fixture: ${path.join(home, 'readers.json')}}`,
    `  - {name: serial, provider: script, fixture: ${path.join(home, 'serial.json')}}`,
    `  - {name: fanout, provider: script, fixture: ${path.join(home, 'fanout.json')}}`,
    `  - {name: part, provider: script, fixture: ${path.join(home, 'part.json')}}`,
    'subagents:', '  custom:',
    '    - {name: bench, description: runs its part, system_prompt: Run your part., tools: [bash], model: part}', ''].join('\n'));
  // FAWN_BENCH_WRAP (e.g. "perf record -g -o /tmp/perf.data") runs the server under a profiler.
  const wrap = (process.env.FAWN_BENCH_WRAP || '').split(' ').filter(Boolean);
  const argv = [...wrap, fawnBin, 'serve', '--config', config];
  const child = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 200; i++) {
    try { await call(port, 'GET', '/health'); return child; } catch { await new Promise((r) => setTimeout(r, 50)); }
  }
  throw new Error('fawn serve did not start');
}

function rssKiB(pid) {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
  return Number(m[1]);
}

/** A run of the script `model` on thread, waited for: its wall time in ms,
 * once its last `steps` tool results (of `tool`) have all succeeded. */
async function timedRun(port, token, thread, model, steps, tool = 'bash') {
  const t0 = process.hrtime.bigint();
  const out = await call(port, 'POST', `/api/threads/${thread}/runs/wait`, { token,
    body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'go' }] },
      context: { model_name: model }, config: { recursion_limit: 1000 } } });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const tools = out.messages.filter((m) => m.type === 'tool').slice(-steps);
  if (tools.length !== steps || tools.some((m) => m.name !== tool || m.additional_kwargs.tool_status.status !== 'success'))
    throw new Error(`the run did not make ${steps} successful steps: ${JSON.stringify(out).slice(0, 300)}`);
  return ms;
}

/** The same 50 commands straight to the box over one kept-alive connection:
 * in a shell session, as the bash tool runs them (cwd and variables kept),
 * and as one-shot commands. Wall times in ms. */
async function bareExecs(socketPath) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const post = (p, body) => new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ socketPath, method: 'POST', path: p, agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let t = '';
      res.on('data', (c) => (t += c));
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(t))));
    });
    req.on('error', reject);
    req.end(data);
  });
  await post('/v1/shell/sessions', { id: 'bench-bare' });
  const timed = async (extra) => {
    await post('/v1/shell/exec', { command: 'true -1', ...extra });
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < STEPS; i++) await post('/v1/shell/exec', { command: `true ${i}`, ...extra });
    return Number(process.hrtime.bigint() - t0) / 1e6;
  };
  const session = await timed({ session_id: 'bench-bare' });
  const oneShot = await timed({});
  await new Promise((resolve, reject) => { // ends the session's shell at once
    const req = http.request({ socketPath, method: 'DELETE', path: '/v1/shell/sessions/bench-bare', agent },
      (res) => { res.resume(); res.on('end', resolve); });
    req.on('error', reject);
    req.end();
  });
  agent.destroy();
  return { session, oneShot };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Each round: a new thread whose sandbox a one-step run has started, then
// the 50-step run on it, then the 50 bare execs on the same box.
async function stepOverhead(port, token, home, userId) {
  const runs = [];
  const bares = [];
  for (let r = 0; r < ROUNDS; r++) {
    const thread = `bench-steps-${r}`;
    await call(port, 'POST', '/api/threads', { token, body: { thread_id: thread } });
    await timedRun(port, token, thread, 'warm', 1);
    runs.push(await timedRun(port, token, thread, 'steps', STEPS));
    const sandboxId = createHash('sha256').update(`${userId}:${thread}`).digest('hex').slice(0, 16);
    bares.push(await bareExecs(path.join(home, 'run', `${sandboxId}.sock`)));
  }
  const run = median(runs);
  const bare = median(bares.map((b) => b.session));
  const oneShot = median(bares.map((b) => b.oneShot));
  const overhead = (run - bare) / STEPS;
  console.log(`agent step: ${STEPS}-step scripted run ${run.toFixed(1)} ms; bare warm exec of the same commands ` +
    `on the same box ${bare.toFixed(1)} ms in a shell session as the tool runs them ` +
    `(${oneShot.toFixed(1)} ms as one-shot commands)`);
  console.log(`agent step: overhead per tool step ${overhead.toFixed(3)} ms (target < 2 ms; ` +
    `${((run - oneShot) / STEPS).toFixed(3)} ms against one-shot execs); run/bare ratio ` +
    `${(run / bare).toFixed(2)}x (median of ${ROUNDS})`);
}

// Each round: two new threads, their sandboxes started by a one-step run;
// on one the serial run, on the other the run that fans out.
async function parallelSubagents(port, token) {
  const serial = [];
  const fanout = [];
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, times, steps, tool] of [['serial', serial, TASKS * TASK_STEPS, 'bash'], ['fanout', fanout, TASKS, 'task']]) {
      const thread = `bench-${name}-${r}`;
      await call(port, 'POST', '/api/threads', { token, body: { thread_id: thread } });
      await timedRun(port, token, thread, 'warm', 1);
      times.push(await timedRun(port, token, thread, name, steps, tool));
    }
  }
  const one = median(serial);
  const three = median(fanout);
  console.log(`sub-agents: ${TASKS * TASK_STEPS} commands of 50 ms by one agent in turn ${one.toFixed(0)} ms; ` +
    `by ${TASKS} sub-agents at once (${TASK_STEPS} each) ${three.toFixed(0)} ms`);
  console.log(`sub-agents: ratio ${(three / one).toFixed(2)}x (target <= 0.4x; median of ${ROUNDS})`);
}

/** Opens one SSE reader of the run; resolves with its event count at the end. */
function reader(port, token, thread, runId, counts, i) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'GET', agent: false,
      path: `/api/threads/${thread}/runs/${runId}/stream`, headers: { Authorization: `Bearer ${token}` } }, (res) => {
      let buf = '';
      res.on('data', (c) => {
        buf += c;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          if (buf.slice(0, k).startsWith('event:')) counts[i]++;
          buf = buf.slice(k + 2);
        }
      });
      res.on('end', () => resolve());
    });
    req.on('error', reject);
    req.end();
  });
}

/** Resolves once every count is at least target. */
function allReached(counts, target) {
  return new Promise((resolve) => {
    const t = setInterval(() => {
      if (counts.every((c) => c >= target)) {
        clearInterval(t);
        resolve();
      }
    }, 5);
  });
}

// The readers join once the run has produced its events and is holding (a
// `sleep` step): each catches up on the whole history, and stays connected
// until the run ends.
async function manyReaders(port, token, pid) {
  const thread = 'bench-readers';
  await call(port, 'POST', '/api/threads', { token, body: { thread_id: thread } });
  const before = rssKiB(pid);
  const run = await call(port, 'POST', `/api/threads/${thread}/runs`, { token,
    body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'go' }] },
      context: { model_name: 'readers' }, stream_mode: ['values', 'updates', 'messages-tuple'] } });
  for (;;) {
    const st = await call(port, 'GET', `/api/threads/${thread}/state`, { token });
    if ((st.values.messages || []).filter((m) => m.type === 'tool').length >= 20) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise((r) => setTimeout(r, 300)); // the hold step's events are out
  const probe = [0];
  const probeDone = reader(port, token, thread, run.run_id, probe, 0);
  let last = -1;
  while (probe[0] !== last) {
    last = probe[0];
    await new Promise((r) => setTimeout(r, 300));
  }
  const history = probe[0];
  const counts = new Array(READERS).fill(0);
  let peak = rssKiB(pid);
  const sampler = setInterval(() => { peak = Math.max(peak, rssKiB(pid)); }, 50);
  const t0 = process.hrtime.bigint();
  const done = Array.from({ length: READERS }, (_, i) => reader(port, token, thread, run.run_id, counts, i));
  await allReached(counts, history);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  await Promise.all([...done, probeDone]);
  clearInterval(sampler);
  const complete = counts.filter((c) => c === probe[0]).length;
  console.log(`sse readers: ${READERS} readers joined one run and caught up on its ${history} events in ` +
    `${s.toFixed(2)} s: ${Math.round((READERS * history) / s)} events/s delivered; ${complete} got all ${probe[0]} by its end`);
  console.log(`sse readers: gateway resident memory ${(before / 1024).toFixed(1)} MiB before, ` +
    `${(peak / 1024).toFixed(1)} MiB peak with the readers: +${((peak - before) / 1024).toFixed(1)} MiB (target < 50 MiB)`);
}

async function main() {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-bench-agent-'));
  writeFixtures(home);
  const port = await freePort();
  const server = await startServer(home, port);
  try {
    const admin = await call(port, 'POST', '/api/v1/auth/initialize', { body: { username: 'bench', password: 'a long bench password' } });
    const login = await new Promise((resolve, reject) => {
      const data = JSON.stringify({ username: 'bench', password: 'a long bench password' });
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/api/v1/auth/login/local',
        headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.headers['set-cookie']));
      });
      req.on('error', reject);
      req.end(data);
    });
    const cookies = login.map((c) => c.split(';')[0]);
    const csrf = cookies.find((c) => c.startsWith('csrf_token=')).split('=')[1];
    const token = await new Promise((resolve, reject) => {
      const data = JSON.stringify({ name: 'bench' });
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/api/v1/auth/tokens',
        headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data),
          Cookie: cookies.join('; '), 'X-CSRF-Token': csrf } }, (res) => {
        let t = '';
        res.on('data', (c) => (t += c));
        res.on('end', () => resolve(JSON.parse(t).token));
      });
      req.on('error', reject);
      req.end(data);
    });
    await stepOverhead(port, token, home, String(admin.id));
    await parallelSubagents(port, token);
    await manyReaders(port, token, server.pid);
  } finally {
    server.kill('SIGTERM');
    await new Promise((r) => server.on('exit', r));
    fs.rmSync(home, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(`bench/agent: ${e.stack || e}`);
  process.exit(1);
});
