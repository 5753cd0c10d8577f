// Storage benchmark (run by bench/storage): what a long run costs the store.
// For each step count, a fresh `fawn serve` (auth disabled, a script model)
// runs one thread whose every step is a read_file of a ~50 KB upload, so each
// step adds a ~50 KB tool message. The baseline is the bytes of the run's
// messages, summed from its `updates` events (each new message whole, once);
// the figure is the bytes of fawn.db and its WAL once the gateway has stopped
// (the WAL folded in), per byte of message. Storing the thread state whole at
// every step made this grow with the number of steps (80 steps: 511 MB);
// storing each message once keeps it a constant near 1.
// Usage: node bench/storage.mjs FAWN_BIN STEPS...
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const [fawnBin, ...stepsArgs] = process.argv.slice(2);
const STEP_COUNTS = (stepsArgs.length ? stepsArgs.join(' ').split(/\s+/) : ['50', '150']).map(Number);
const RESULT_BYTES = 50000; // read_file's output limit: each result whole

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** One request; resolves with the answer's text (rejects on a status >= 300). */
function call(port, method, p, { body, headers = {}, onData } = {}) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
    const req = http.request({ host: '127.0.0.1', port, method, path: p, agent: false,
      headers: { ...(data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {}), ...headers } },
    (res) => {
      let text = '';
      res.on('data', (c) => {
        if (onData) onData(c.toString());
        else text += c;
      });
      res.on('end', () => (res.statusCode >= 300 ? reject(new Error(`${method} ${p}: ${res.statusCode} ${text}`)) : resolve(text)));
    });
    req.on('error', reject);
    req.end(data);
  });
}

function writeFixture(home, steps) {
  const replies = Array.from({ length: steps }, (_, i) => ({ content: '', tool_calls: [{ name: 'read_file',
    args: { path: '/mnt/user-data/uploads/big.txt', start_line: 1, end_line: 100000 + i } }] }));
  replies.push({ content: 'done' });
  const file = path.join(home, 'steps.json');
  fs.writeFileSync(file, JSON.stringify({ scenario: 'storage', replies }));
  return file;
}

async function startServer(home, port, fixture) {
  const config = path.join(home, 'config.yaml');
  fs.writeFileSync(config, [`home: ${home}`, 'log_level: warn', 'server:', '  host: 127.0.0.1', `  port: ${port}`,
    'auth:', '  disabled: true', 'sandbox:', '  idle_timeout_s: 30', 'models:',
    `  - {name: steps, provider: script, fixture: ${fixture}}`, ''].join('\n'));
  const child = spawn(fawnBin, ['serve', '--config', config], { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 200; i++) {
    try { await call(port, 'GET', '/health'); return child; } catch { await new Promise((r) => setTimeout(r, 50)); }
  }
  throw new Error('fawn serve did not start');
}

async function upload(port, thread) {
  const content = Array.from({ length: RESULT_BYTES / 101 }, () => `${randomBytes(75).toString('base64')}\n`).join('');
  const boundary = `----fawn-bench-${randomBytes(8).toString('hex')}`;
  const body = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="files"; filename="big.txt"\r\n` +
    `Content-Type: text/plain\r\n\r\n${content}\r\n--${boundary}--\r\n`);
  await call(port, 'POST', `/api/threads/${thread}/uploads`, { body,
    headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}`, 'Content-Length': body.length } });
}

/** Streams the run in updates mode: the bytes of every new message (JSON). */
async function run(port, thread, steps) {
  let buf = '';
  let bytes = 0;
  let messages = 0;
  const take = (frame) => {
    const data = frame.split('\n').find((l) => l.startsWith('data: '));
    if (!frame.startsWith('event: updates') || !data) return;
    for (const node of Object.values(JSON.parse(data.slice(6)))) {
      for (const m of node.messages || []) {
        bytes += Buffer.byteLength(JSON.stringify(m));
        messages++;
      }
    }
  };
  await call(port, 'POST', `/api/threads/${thread}/runs/stream`, {
    body: { assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: 'read it' }] },
      context: { model_name: 'steps' }, config: { recursion_limit: steps + 1 }, stream_mode: ['updates'] },
    onData: (c) => {
      buf += c;
      let k;
      while ((k = buf.indexOf('\n\n')) >= 0) {
        take(buf.slice(0, k));
        buf = buf.slice(k + 2);
      }
    } });
  if (messages !== 2 * steps + 2) throw new Error(`the run made ${messages} messages, not ${2 * steps + 2}`);
  return bytes;
}

function storedBytes(home) {
  return ['fawn.db', 'fawn.db-wal'].reduce((n, f) => n + (fs.existsSync(path.join(home, f)) ? fs.statSync(path.join(home, f)).size : 0), 0);
}

async function measure(steps) {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-bench-storage-'));
  try {
    const port = await freePort();
    const server = await startServer(home, port, writeFixture(home, steps));
    const exited = new Promise((r) => server.on('exit', r));
    let messageBytes;
    try {
      await call(port, 'POST', '/api/threads', { body: { thread_id: 'storage' } });
      await upload(port, 'storage');
      messageBytes = await run(port, 'storage', steps);
    } finally {
      server.kill('SIGTERM');
      await exited;
    }
    const stored = storedBytes(home);
    const mb = (n) => (n / 1e6).toFixed(2);
    console.log(`storage: ${steps} steps of ~50 KB tool results: ${mb(messageBytes)} MB of messages; ` +
      `${mb(stored)} MB stored (fawn.db + WAL after stop): ${(stored / messageBytes).toFixed(2)} bytes per byte of message`);
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
}

for (const steps of STEP_COUNTS) await measure(steps);
