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
// The ceiling of a test or hook that moves a lot of data (it passes { ceilingMs:
// HEAVY_TEST_TIMEOUT_MS }): about a minute on an idle 2-core host under
// ASan, ten times that with the host's cores oversubscribed four times over.
export const HEAVY_TEST_TIMEOUT_MS = 900000;

/** Runs body(...args), failing with what and the live logs past ms. */
async function bounded(what, body, args, ms = TEST_TIMEOUT_MS) {
  let timer;
  const ceiling = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms${liveLogs()}`)), ms);
  });
  try {
    return await Promise.race([body(...args), ceiling]);
  } finally {
    clearTimeout(timer);
  }
}

/** node:test's it, bounded by TEST_TIMEOUT_MS or options.ceilingMs. */
export function it(name, options, body) {
  if (typeof options === 'function') [options, body] = [{}, options];
  const { ceilingMs, ...rest } = options;
  return nodeTest.it(name, rest, (t) => bounded(`test "${name}"`, body, [t], ceilingMs));
}

export const describe = nodeTest.describe;

/** node:test's before, bounded by TEST_TIMEOUT_MS or options.ceilingMs. */
export function before(body, options = {}) {
  const { ceilingMs, ...rest } = options;
  return nodeTest.before(() => bounded('a before hook', body, [], ceilingMs), rest);
}

/** node:test's after, bounded by TEST_TIMEOUT_MS or options.ceilingMs. */
export function after(body, options = {}) {
  const { ceilingMs, ...rest } = options;
  return nodeTest.after(() => bounded('an after hook', body, [], ceilingMs), rest);
}
