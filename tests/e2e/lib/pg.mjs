// PostgreSQL for the end-to-end tests: scripts/pg-test-server.sh starts a
// throwaway server and sets FAWN_TEST_PG (a libpq conninfo without dbname);
// each caller gets a database of its own, so test files run side by side.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

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
