// Helpers shared by the end-to-end tests: a real `fawn serve` on loopback in
// a throw-away FAWN_HOME, a raw HTTP client (node:http, so attack paths reach
// the server byte for byte), a cookie jar, sign-in helpers and a multipart
// body builder.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { pgDatabase, pgDropDatabase } from './pg.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

// The binary under test: $FAWN_BIN, else the AddressSanitizer build.
export const FAWN_BIN = path.resolve(process.env.FAWN_BIN || path.join(here, '..', '..', '..', 'build-asan', 'fawn'));

// Sanitizer settings for every process started here: a leak or any other
// sanitizer report makes the process fail, which fails the test.
const SANITIZER_ENV = {
  ASAN_OPTIONS: process.env.ASAN_OPTIONS || 'detect_leaks=1:abort_on_error=1',
  UBSAN_OPTIONS: process.env.UBSAN_OPTIONS || 'print_stacktrace=1',
};

// How long a server may take to answer /health, and to exit after SIGTERM:
// ceilings that only a hang reaches, on a loaded 2-core host under ASan.
const START_TIMEOUT_MS = 60000;
const STOP_TIMEOUT_MS = 40000;
// Attempts at a port when the one picked was taken before serve bound it.
const PORT_ATTEMPTS = 5;
// Default ceiling of waitFor and eventually: only a hang reaches it.
export const WAIT_CEILING_MS = 60000;
// The end of a process's stderr that a failure message shows.
const LOG_TAIL_CHARS = 6000;

// The store of every gateway whose config names none: SQLite in its home,
// or with FAWN_E2E_STORE=postgres a PostgreSQL database of the home's own on
// the server scripts/pg-test-server.sh started (so every test runs on either
// backend unchanged). The home remembers its database for restarts.
const E2E_STORE = process.env.FAWN_E2E_STORE || 'sqlite';
if (!['sqlite', 'postgres'].includes(E2E_STORE)) {
  throw new Error(`FAWN_E2E_STORE must be sqlite or postgres, not ${E2E_STORE}`);
}
const HOME_DSN_FILE = '.e2e-postgres-dsn';

export const ADMIN_NAME = 'admin@example.com';
export const ADMIN_PASSWORD = 'correct horse battery staple';

// Text a sanitizer prints when it finds something.
const SANITIZER_MARKS = ['ERROR: AddressSanitizer', 'ERROR: LeakSanitizer', 'runtime error:'];

/**
 * A new temporary skills directory holding each skill of skills, an object
 * {relative directory: SKILL.md text}. The caller removes it (fs.rmSync).
 */
export function skillsDirWith(skills) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-e2e-skills-'));
  for (const [rel, text] of Object.entries(skills)) {
    fs.mkdirSync(path.join(dir, rel), { recursive: true });
    fs.writeFileSync(path.join(dir, rel, 'SKILL.md'), text);
  }
  return dir;
}

export function sanitizerReport(text) {
  return SANITIZER_MARKS.some((m) => text.includes(m));
}

// ---- the processes this test file started ----

// Every fawn process started here that has not exited: {describe(), kill()}.
const live = new Set();

function tail(text) {
  return text.length > LOG_TAIL_CHARS ? `[...]${text.slice(-LOG_TAIL_CHARS)}` : text;
}

/** What each fawn process still running shows: its command and the end of its stderr. */
export function liveLogs() {
  const parts = [...live].map((p) => p.describe());
  return parts.length ? `\n---- fawn processes still running ----\n${parts.join('\n')}` : '';
}

// None outlives the test file: when it ends, or the runner ends it (SIGTERM,
// its timeout), each is killed, after its log is shown.
process.on('exit', () => {
  for (const p of live) p.kill();
});
process.once('SIGTERM', () => {
  process.stderr.write(`test file ended by SIGTERM${liveLogs()}\n`);
  process.exit(1);
});

/** A TCP port that was free a moment ago (listen on 0, read it, close). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// ---- config.yaml ----

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function deepMerge(base, extra) {
  const out = { ...base };
  for (const [k, v] of Object.entries(extra || {})) {
    out[k] = isPlainObject(v) && isPlainObject(out[k]) ? deepMerge(out[k], v) : v;
  }
  return out;
}

function yamlScalar(v) {
  if (v === null) return 'null';
  if (typeof v === 'boolean' || typeof v === 'number') return String(v);
  if (typeof v === 'object') return JSON.stringify(v); // JSON is YAML's flow style
  return JSON.stringify(String(v)); // a YAML double-quoted scalar
}

/** YAML text for nested mappings, sequences and scalars. */
export function toYaml(obj, indent = '') {
  let out = '';
  for (const [k, v] of Object.entries(obj)) {
    const key = /^[A-Za-z0-9_-]+$/.test(k) ? k : JSON.stringify(k);
    if (isPlainObject(v)) {
      out += Object.keys(v).length ? `${indent}${key}:\n${toYaml(v, indent + '  ')}` : `${indent}${key}: {}\n`;
    } else if (Array.isArray(v)) {
      out += `${indent}${key}: [${v.map(yamlScalar).join(', ')}]\n`;
    } else {
      out += `${indent}${key}: ${yamlScalar(v)}\n`;
    }
  }
  return out;
}

/** Environment for a fawn process: this one's, minus fawn's own variables, plus FAWN_HOME. */
function fawnEnv(home, extra = {}) {
  const env = { ...process.env, ...SANITIZER_ENV, FAWN_HOME: home };
  for (const k of ['FAWN_ENV', 'FAWN_JWT_SECRET', 'FAWN_CONFIG']) delete env[k];
  return { ...env, ...extra };
}

/** A fresh FAWN_HOME under the system's temp directory. */
export function makeHome() {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-e2e-'));
}

/**
 * Runs `fawn ARGS` to completion: {code, signal, stdout, stderr}. Past
 * timeoutMs it is killed (SIGKILL), and its stderr ends saying so.
 */
export function runFawn(args, { home, input, env = {}, timeoutMs = 60000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(FAWN_BIN, args, { env: fawnEnv(home, env), stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const entry = {
      describe: () => `fawn ${args.join(' ')} (pid ${child.pid}):\n${tail(stderr)}`,
      kill: () => child.kill('SIGKILL'),
    };
    live.add(entry);
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      stderr += `\n[fawn ${args[0]} killed: it did not exit within ${timeoutMs} ms]\n`;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.on('error', (e) => {
      live.delete(entry);
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      live.delete(entry);
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
    child.stdin.end(input ?? '');
  });
}

// The kernel's table of TCP sockets on loopback that listen: "0100007F:PORT" → inode.
function listeningInode(port) {
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  for (const line of fs.readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[1] === local && f[3] === '0A') return f[9];
  }
  return null;
}

/** Whether process pid holds the socket listening on 127.0.0.1:port (not another process). */
export function holdsListener(pid, port) {
  const inode = listeningInode(port);
  if (!inode) return false;
  let fds;
  try {
    fds = fs.readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false; // gone
  }
  return fds.some((fd) => {
    try {
      return fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === `socket:[${inode}]`;
    } catch {
      return false;
    }
  });
}

// ---- the store ----

/** The conninfo of home's PostgreSQL database, created on first use. */
function homeDatabase(home) {
  const file = path.join(home, HOME_DSN_FILE);
  if (fs.existsSync(file)) return fs.readFileSync(file, 'utf8');
  const dsn = pgDatabase('e2e');
  fs.writeFileSync(file, dsn);
  return dsn;
}

/** Drops home's PostgreSQL database, if it has one. */
function dropHomeDatabase(home) {
  const file = path.join(home, HOME_DSN_FILE);
  if (fs.existsSync(file)) pgDropDatabase(fs.readFileSync(file, 'utf8'));
}

/**
 * The rows sql answers on server's store (SQLite's or PostgreSQL's command
 * line client), each a line with its columns joined by '|'.
 */
export function storeRows(server, sql) {
  const pg = server.config.store?.backend === 'postgres';
  const out = pg
    ? spawnSync('psql', [server.config.store.postgres.dsn, '-XAtqc', sql], { encoding: 'utf8' })
    : spawnSync('sqlite3', [path.join(server.home, 'fawn.db'), sql], { encoding: 'utf8' });
  assert.equal(out.status, 0, out.stderr);
  return out.stdout.split('\n').filter(Boolean);
}

// ---- the server ----

export class FawnServer {
  /**
   * Starts `fawn serve` with config.yaml = defaults merged with overrides.
   * opts.home reuses a home (a restart, or a second gateway sharing it);
   * opts.port keeps a port; opts.env adds variables; opts.configName names
   * the config file in the home (default config.yaml: a second gateway on
   * the same home needs its own).
   */
  static async start(overrides = {}, opts = {}) {
    const s = new FawnServer();
    s.home = opts.home || makeHome();
    s.env = opts.env || {};
    // A gateway id of its own that a restart (on another port) keeps, as an
    // operator's gateway keeps its cluster.gateway_id: the restarted gateway
    // owns the sandboxes it left.
    const cluster = { gateway_id: `e2e-${randomBytes(6).toString('hex')}` };
    s.config = deepMerge({ server: { host: '127.0.0.1', threads: 4 }, cluster }, overrides);
    s.configPath = path.join(s.home, opts.configName || 'config.yaml');
    try {
      if (E2E_STORE === 'postgres' && !('store' in overrides)) {
        s.config.store = { backend: 'postgres', postgres: { dsn: homeDatabase(s.home) } };
      }
      await s.#listen(opts.port);
      return s;
    } catch (e) {
      if (!opts.home) s.removeHome();
      throw e;
    }
  }

  /**
   * Starts serve on port (a free one when not given). The free port may be
   * taken by another process before serve binds it: then serve cannot
   * listen, or (another server answering there) does not hold the port;
   * another port is tried.
   */
  async #listen(port) {
    for (let attempt = 1; ; attempt++) {
      this.port = port || (await freePort());
      this.config.server.port = this.port;
      fs.writeFileSync(this.configPath, toYaml(this.config));
      try {
        await this.#spawn();
        return;
      } catch (e) {
        if (attempt >= PORT_ATTEMPTS || port || !e.portTaken) throw e;
      }
    }
  }

  get base() {
    return `http://127.0.0.1:${this.port}`;
  }

  /** What a failure message shows of this server: its state and the end of its log. */
  describe() {
    const state = this.gone ? `exited ${JSON.stringify(this.gone)}` : 'running';
    return `fawn serve (port ${this.port}, pid ${this.proc?.pid}, ${state}), ${this.home}:\n${tail(this.stderr)}`;
  }

  async #spawn() {
    this.stderr = '';
    this.stdout = '';
    this.gone = null;
    this.proc = spawn(FAWN_BIN, ['serve', '--config', this.configPath], {
      env: fawnEnv(this.home, this.env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const entry = { describe: () => this.describe(), kill: () => this.proc.kill('SIGKILL') };
    live.add(entry);
    this.proc.stdout.on('data', (d) => (this.stdout += d));
    this.proc.stderr.on('data', (d) => (this.stderr += d));
    // 'close': the process has exited and all of its output has been read.
    this.exited = new Promise((resolve) => {
      this.proc.on('close', (code, signal) => {
        live.delete(entry);
        this.gone = { code, signal };
        resolve(this.gone);
      });
    });
    await this.#awaitReady();
  }

  /** Waits until this process answers /health on its port, holding that port. */
  async #awaitReady() {
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (this.gone) {
        const e = new Error(`fawn serve exited early (${JSON.stringify(this.gone)}):\n${this.stderr}`);
        e.portTaken = /cannot listen/.test(this.stderr);
        throw e;
      }
      let res = null;
      try {
        res = await request(this, 'GET', '/health', { timeoutMs: 1000 });
      } catch {
        // not listening yet
      }
      if (res?.status === 200) {
        if (holdsListener(this.proc.pid, this.port)) return;
        // Another server answers on the port this one could not bind.
        this.proc.kill('SIGKILL');
        await this.exited;
        const e = new Error(`another process answers on port ${this.port}:\n${this.stderr}`);
        e.portTaken = true;
        throw e;
      }
      if (Date.now() > deadline) {
        this.proc.kill('SIGKILL');
        await this.exited;
        throw new Error(`fawn serve did not answer /health within ${START_TIMEOUT_MS} ms (killed):\n${this.stderr}`);
      }
      await sleep(50);
    }
  }

  /** Waits for the process to exit and for its output to be read. */
  async #waitExit(timeoutMs) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`fawn serve did not exit within ${timeoutMs} ms:\n${this.stderr}`)), timeoutMs);
    });
    try {
      return await Promise.race([this.exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Stops the server with SIGTERM and asserts a clean exit: code 0 and no
   * sanitizer report (a leak found at exit makes the code non-zero). Removes
   * the home unless keepHome.
   */
  async stop({ keepHome = false, alreadySignalled = false } = {}) {
    if (!alreadySignalled) this.proc.kill('SIGTERM');
    let result;
    try {
      result = await this.#waitExit(STOP_TIMEOUT_MS);
    } catch (e) {
      this.proc.kill('SIGKILL');
      throw e;
    } finally {
      if (!keepHome) this.removeHome();
    }
    assert.equal(result.signal, null, `fawn serve died of ${result.signal}:\n${this.stderr}`);
    assert.equal(result.code, 0, `fawn serve exited with ${result.code}:\n${this.stderr}`);
    assert.ok(!sanitizerReport(this.stderr), `sanitizer report from fawn serve:\n${this.stderr}`);
  }

  /** Kills the server with SIGKILL (a crash); the home stays. */
  async kill9() {
    this.proc.kill('SIGKILL');
    await this.#waitExit(STOP_TIMEOUT_MS);
  }

  /** Starts serve again on the same home and config (after kill9 or stop with keepHome). */
  async restart() {
    await this.#listen();
  }

  removeHome() {
    dropHomeDatabase(this.home);
    fs.rmSync(this.home, { recursive: true, force: true });
  }

  /** `fawn ARGS --config <this config>` with this server's home. */
  cli(args, input) {
    return runFawn([...args, '--config', this.configPath], { home: this.home, input, env: this.env });
  }

  /** Host path of a thread's user-data directory. */
  userData(uid, tid) {
    return path.join(this.home, 'users', String(uid), 'threads', tid, 'user-data');
  }

  threadDir(uid, tid) {
    return path.join(this.home, 'users', String(uid), 'threads', tid);
  }
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// ---- cookies ----

export class CookieJar {
  constructor() {
    this.cookies = new Map();
  }

  get(name) {
    return this.cookies.get(name);
  }

  set(name, value) {
    this.cookies.set(name, value);
  }

  header() {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  /** Applies Set-Cookie lines: an empty value or Max-Age=0 removes the cookie. */
  update(setCookies = []) {
    for (const line of setCookies) {
      const [pair, ...attrs] = line.split(';').map((s) => s.trim());
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      const expired = attrs.some((a) => /^max-age=0$/i.test(a));
      if (!value || expired) this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }

  clone() {
    const j = new CookieJar();
    for (const [k, v] of this.cookies) j.set(k, v);
    return j;
  }
}

/** The attributes of a Set-Cookie line for cookie name: {value, attrs: Map(lowercase name → value)}. */
export function parseSetCookie(setCookies, name) {
  for (const line of setCookies || []) {
    const [pair, ...attrs] = line.split(';').map((s) => s.trim());
    const eq = pair.indexOf('=');
    if (pair.slice(0, eq) !== name) continue;
    const m = new Map();
    for (const a of attrs) {
      const i = a.indexOf('=');
      m.set((i < 0 ? a : a.slice(0, i)).toLowerCase(), i < 0 ? true : a.slice(i + 1));
    }
    return { value: pair.slice(eq + 1), attrs: m };
  }
  return null;
}

// ---- raw HTTP ----

/**
 * One HTTP request over node:http with the path exactly as given.
 * opts: headers, body (string | Buffer | object → JSON), jar (sends its
 * cookies, takes Set-Cookie), csrf (true: X-CSRF-Token from the jar),
 * bearer (token), localAddress, timeoutMs.
 * Resolves {status, headers, body: Buffer, text, json}.
 */
export function request(server, method, rawPath, opts = {}) {
  const headers = { ...(opts.headers || {}) };
  let body = opts.body;
  if (body !== undefined && !Buffer.isBuffer(body) && typeof body !== 'string') {
    body = JSON.stringify(body);
    if (!Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['Content-Type'] = 'application/json';
  }
  if (opts.jar && opts.jar.cookies.size) headers.Cookie = opts.jar.header();
  if (opts.csrf && opts.jar) headers['X-CSRF-Token'] = opts.jar.get('csrf_token') || '';
  if (opts.bearer) headers.Authorization = `Bearer ${opts.bearer}`;
  if (body !== undefined) headers['Content-Length'] = Buffer.byteLength(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: server.port,
        method,
        path: rawPath,
        headers,
        localAddress: opts.localAddress,
        agent: false,
        timeout: opts.timeoutMs ?? 30000,
      },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          const buf = Buffer.concat(chunks);
          if (opts.jar) opts.jar.update(res.headers['set-cookie']);
          resolve(wrapResponse(res.statusCode, res.headers, buf));
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${method} ${rawPath}: timed out`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

function wrapResponse(status, headers, buf) {
  const text = buf.toString('utf8');
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status, headers, body: buf, text, json };
}

/** Shorthands bound to a server and an identity ({jar} or {bearer}). */
export function client(server, who = {}) {
  const call = (method, p, opts = {}) =>
    request(server, method, p, {
      ...opts,
      jar: who.jar,
      bearer: who.bearer,
      csrf: who.jar ? opts.csrf ?? true : false,
    });
  return {
    get: (p, o) => call('GET', p, o),
    post: (p, body, o = {}) => call('POST', p, { ...o, body }),
    patch: (p, body, o = {}) => call('PATCH', p, { ...o, body }),
    put: (p, body, o = {}) => call('PUT', p, { ...o, body }),
    del: (p, o) => call('DELETE', p, o),
    call,
  };
}

// ---- identities ----

/** application/x-www-form-urlencoded text of fields. */
export function form(fields) {
  return new URLSearchParams(fields).toString();
}

/** POST /initialize for the first admin; returns {res, jar}. */
export async function initAdmin(server, username = ADMIN_NAME, password = ADMIN_PASSWORD) {
  const jar = new CookieJar();
  const res = await request(server, 'POST', '/api/v1/auth/initialize', { body: { email: username, password }, jar });
  return { res, jar };
}

/** Signs in with the login form; returns {res, jar}. */
export async function login(server, username, password, opts = {}) {
  const jar = new CookieJar();
  const res = await request(server, 'POST', '/api/v1/auth/login/local', {
    body: form({ username, password }),
    headers: { 'Content-Type': 'application/x-www-form-urlencoded', ...(opts.headers || {}) },
    localAddress: opts.localAddress,
    jar,
  });
  return { res, jar };
}

/** Signs in and asserts success; returns the jar (cookies + csrf token). */
export async function signIn(server, username, password) {
  const { res, jar } = await login(server, username, password);
  assert.equal(res.status, 200, `login ${username}: ${res.status} ${res.text}`);
  assert.ok(jar.get('access_token') && jar.get('csrf_token'), 'login sets both cookies');
  return jar;
}

/** Creates an API token with a signed-in jar; returns the token string. */
export async function createToken(server, jar, name = 'e2e') {
  const res = await request(server, 'POST', '/api/v1/auth/tokens', { body: { name }, jar, csrf: true });
  assert.equal(res.status, 201, `token create: ${res.status} ${res.text}`);
  assert.match(res.json.token, /^fawn_[0-9a-f]{64}$/);
  return res.json.token;
}

/** `fawn user add --username NAME [--admin]` with the password on stdin; asserts success. */
export async function addUser(server, username, password, { admin = false } = {}) {
  const args = ['user', 'add', '--username', username];
  if (admin) args.push('--admin');
  const r = await server.cli(args, `${password}\n`);
  assert.equal(r.code, 0, `fawn user add ${username}: ${r.code}\n${r.stderr}`);
  assert.ok(!sanitizerReport(r.stderr), `sanitizer report from fawn user add:\n${r.stderr}`);
  return r;
}

/**
 * The first admin (initialized, signed in) plus an API token:
 * {jar, token, id}.
 */
export async function setupAdmin(server) {
  const { res, jar } = await initAdmin(server);
  assert.equal(res.status, 201, `initialize: ${res.status} ${res.text}`);
  const token = await createToken(server, jar, 'admin-e2e');
  return { jar, token, id: res.json.id };
}

/** A second user created with the CLI, signed in, with a token: {jar, token, id}. */
export async function setupUser(server, username, password = 'another fine password') {
  await addUser(server, username, password);
  const jar = await signIn(server, username, password);
  const me = await request(server, 'GET', '/api/v1/auth/me', { jar });
  assert.equal(me.status, 200);
  const token = await createToken(server, jar, `${username}-e2e`);
  return { jar, token, id: me.json.id, password };
}

// ---- bodies ----

export function sha256(data) {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * A multipart/form-data body. parts: {name, filename?, content, contentType?,
 * disposition?} where disposition (raw header value) overrides the built one.
 * Returns {body: Buffer, contentType}.
 */
export function multipart(parts, boundary = `----fawn-e2e-${Math.random().toString(16).slice(2)}`) {
  const chunks = [];
  for (const p of parts) {
    let disp = p.disposition;
    if (!disp) {
      disp = `form-data; name="${p.name ?? 'files'}"`;
      if (p.filename !== undefined) disp += `; filename="${p.filename}"`;
    }
    let head = `--${boundary}\r\nContent-Disposition: ${disp}\r\n`;
    if (p.filename !== undefined || p.contentType) head += `Content-Type: ${p.contentType || 'application/octet-stream'}\r\n`;
    chunks.push(Buffer.from(head + '\r\n', 'utf8')); // browsers send names as raw UTF-8
    chunks.push(Buffer.isBuffer(p.content) ? p.content : Buffer.from(p.content ?? ''));
    chunks.push(Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** Lists the names in dir (empty when it does not exist). */
export function listDir(dir) {
  try {
    return fs.readdirSync(dir).sort();
  } catch (e) {
    if (e.code === 'ENOENT') return [];
    throw e;
  }
}

/** Names in dir that are staging files of uploads or artifact saves. */
export function stagingFiles(dir) {
  return listDir(dir).filter((n) => /^\.upload-.*\.part$/.test(n) || n.startsWith('.fawn-tmp-'));
}

/** Host processes (a sandbox's included) whose command line contains marker. */
export function hostProcs(marker) {
  let n = 0;
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      if (fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').includes(marker)) n++;
    } catch {
      // gone meanwhile
    }
  }
  return n;
}

/** A `sleep` command line no other process on the host runs, long enough that only a kill ends it. */
export const uniqueSleep = () => `sleep ${300000 + Math.floor(Math.random() * 600000)}`;

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Retries check (which throws while its condition does not hold) until it
 * passes or timeoutMs is over, then rethrows its last error. For effects
 * that may follow a response by a moment, such as the removal of a failed
 * request's staging files when its connection completes.
 */
export async function eventually(check, timeoutMs = WAIT_CEILING_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) {
        if (e instanceof Error) e.message += `\n(still failing after ${timeoutMs} ms)${liveLogs()}`;
        throw e;
      }
      await sleep(20);
    }
  }
}

/**
 * Polls predicate (sync or async) every 100 ms until it returns something
 * truthy, which it returns. Past timeoutMs it fails saying what it waited
 * for, with the logs of the fawn processes still running.
 */
export async function waitFor(predicate, timeoutMs = WAIT_CEILING_MS, what = 'a condition') {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await predicate();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${liveLogs()}`);
    await sleep(100);
  }
}
