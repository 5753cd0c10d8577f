// PostgreSQL for the end-to-end tests: scripts/pg-test-server.sh starts a
// throwaway server and sets FAWN_TEST_PG (a libpq conninfo without dbname);
// each caller gets a database of its own, so test files run side by side.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/** The server's conninfo, or null when the tests run without one. */
export function pgServer() {
  return process.env.FAWN_TEST_PG || null;
}

/**
 * Creates a new, empty database and answers its conninfo (for
 * store.postgres.dsn). Throws, saying how to get a server, when
 * FAWN_TEST_PG is not set: a test that needs PostgreSQL fails rather than
 * skip.
 */
export function pgDatabase(prefix = 'e2e') {
  const server = pgServer();
  if (!server) {
    throw new Error('FAWN_TEST_PG is not set: run under scripts/pg-test-server.sh run ...');
  }
  const name = `${prefix.replace(/[^a-z0-9_]/g, '_')}_${randomBytes(6).toString('hex')}`;
  execFileSync('psql', [`${server} dbname=postgres`, '-v', 'ON_ERROR_STOP=1', '-qc', `CREATE DATABASE ${name}`], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return `${server} dbname=${name}`;
}

/** Drops the database of conninfo (one pgDatabase made), connections and all. */
export function pgDropDatabase(conninfo) {
  const name = /dbname=([a-z0-9_]+)$/.exec(conninfo)?.[1];
  if (!name) throw new Error(`not a conninfo of pgDatabase: ${conninfo}`);
  execFileSync('psql', [`${pgServer()} dbname=postgres`, '-v', 'ON_ERROR_STOP=1', '-qc', `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
}

/**
 * A relay between one gateway and the test server: its own socket
 * directory (a conninfo's host), so that the test can cut that gateway off
 * the database (every connection dropped, new ones refused) and let it back
 * in, while the other gateways keep theirs. It runs in the test's process:
 * nothing that blocks its event loop (spawnSync's psql) may use it.
 */
export class PgRelay {
  static async start() {
    const relay = new PgRelay();
    const server = /host=(\S+)/.exec(pgServer() ?? '')?.[1];
    if (!server) throw new Error('FAWN_TEST_PG is not set: run under scripts/pg-test-server.sh run ...');
    relay.upstream = path.join(server, '.s.PGSQL.5432');
    relay.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fawn-pg-relay-'));
    relay.sockets = new Set();
    await relay.restore();
    return relay;
  }

  /** conninfo (pgDatabase's) through the relay. */
  dsn(conninfo) {
    return conninfo.replace(/host=\S+/, `host=${this.dir}`);
  }

  /** Lets connections through again. */
  async restore() {
    this.listener = net.createServer((client) => {
      const upstream = net.connect(this.upstream);
      // Either side gone, the other is closed: a gateway killed with a
      // reply unread resets its socket (no 'end' for pipe to pass on), and
      // its server session, perhaps in a transaction holding the store's
      // write lock, must still see it go.
      for (const [s, other] of [[client, upstream], [upstream, client]]) {
        this.sockets.add(s);
        s.on('close', () => {
          this.sockets.delete(s);
          other.destroy();
        });
        s.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise((resolve) => this.listener.listen(path.join(this.dir, '.s.PGSQL.5432'), resolve));
  }

  /** Drops every connection and refuses new ones (the socket is gone). */
  async cut() {
    const listener = this.listener;
    this.listener = null;
    const closed = listener ? new Promise((resolve) => listener.close(resolve)) : null;
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  async stop() {
    await this.cut();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
