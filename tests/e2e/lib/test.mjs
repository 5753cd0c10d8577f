// node:test's describe, it, before and after, each test and hook bounded.
// Run with --test, node 20 applies --test-timeout to a whole file and ends it
// with SIGTERM, naming only the file; here a test or hook that hangs fails
// with its own name within TEST_TIMEOUT_MS, its message showing the log of
// every fawn process still running, and the after hooks then stop them.
import * as nodeTest from 'node:test';

import { liveLogs } from './server.mjs';

// The ceiling of one test or hook: the longest legitimately waits a few
// minutes for runs on a loaded 2-core host under ASan; only a hang reaches it.
export const TEST_TIMEOUT_MS = 300000;

/** Runs body(...args), failing with what and the live logs past TEST_TIMEOUT_MS. */
async function bounded(what, body, args) {
  let timer;
  const ceiling = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${TEST_TIMEOUT_MS} ms${liveLogs()}`)),
      TEST_TIMEOUT_MS);
  });
  try {
    return await Promise.race([body(...args), ceiling]);
  } finally {
    clearTimeout(timer);
  }
}

export function it(name, options, body) {
  if (typeof options === 'function') [options, body] = [{}, options];
  return nodeTest.it(name, options, (t) => bounded(`test "${name}"`, body, [t]));
}

export const describe = nodeTest.describe;

export function before(body, options) {
  return nodeTest.before(() => bounded('a before hook', body, []), options);
}

export function after(body, options) {
  return nodeTest.after(() => bounded('an after hook', body, []), options);
}
