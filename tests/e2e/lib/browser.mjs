// Browser tests of fawn's web UI: Debian's chromium driven by
// playwright-core. Each page is watched as an attacker's target would be:
// a dialog (alert, confirm, prompt), a request the browser would send to
// any origin but the server's (stopped before it leaves), an uncaught
// error, or the global flag hostile content sets (window.__pwned) fails
// the test (assertClean).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

import { ADMIN_NAME, ADMIN_PASSWORD, WAIT_CEILING_MS } from './server.mjs';

// The browser: $FAWN_CHROMIUM, else Debian's.
export const CHROMIUM = process.env.FAWN_CHROMIUM || '/usr/bin/chromium';
// Ceiling of a wait for something on the page: only a hang reaches it
// (a run under ASan on a loaded 2-core host takes seconds).
export const UI_WAIT_MS = WAIT_CEILING_MS;

/** Starts headless chromium (without its sandbox as root, which it refuses). */
export function launch() {
  const args = process.getuid?.() === 0 ? ['--no-sandbox'] : [];
  return chromium.launch({ executablePath: CHROMIUM, args, timeout: UI_WAIT_MS });
}

/**
 * A page in a fresh context (its own cookies) on srv, watched.
 * Returns {context, page, watch}; watch holds what assertClean checks.
 */
export async function openPage(browser, srv, { viewport = { width: 1280, height: 800 }, colorScheme = 'light' } = {}) {
  const context = await browser.newContext({ viewport, colorScheme, baseURL: srv.base, acceptDownloads: true });
  context.setDefaultTimeout(UI_WAIT_MS);
  const page = await context.newPage();
  const watch = { dialogs: [], foreign: [], errors: [], requests: [] };
  const origin = new URL(srv.base).origin;
  page.on('dialog', (d) => {
    watch.dialogs.push(`${d.type()}: ${d.message()}`);
    d.dismiss().catch(() => {});
  });
  context.on('request', (r) => watch.requests.push(r.url()));
  // What would leave the origin is stopped here and recorded: a request
  // the page's Content-Security-Policy refuses never gets this far (the
  // browser still reports it as a request event, failed), so this records
  // exactly what the browser would have sent elsewhere.
  await context.route((u) => u.origin !== origin, (route) => {
    watch.foreign.push(route.request().url());
    return route.abort('blockedbyclient');
  });
  page.on('pageerror', (e) => watch.errors.push(e.message));
  await page.goto('/');
  return { context, page, watch };
}

/** No script of hostile content ran and nothing left the origin. */
export async function assertClean(page, watch) {
  assert.deepEqual(watch.dialogs, [], 'no dialog opened');
  assert.deepEqual(watch.foreign, [], 'no request left the origin');
  assert.deepEqual(watch.errors, [], 'no uncaught error');
  for (const frame of page.frames()) {
    const pwned = await frame.evaluate(() => window.__pwned ?? null).catch(() => null);
    assert.equal(pwned, null, `hostile script ran in ${frame.url()}`);
  }
}

/** Saves a screenshot to $FAWN_SCREENSHOTS/<name>.png when that is set;
 *  the mask locators (secrets) are painted over. */
export async function screenshot(page, name, mask = []) {
  const dir = process.env.FAWN_SCREENSHOTS;
  if (!dir) return;
  fs.mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: path.join(dir, `${name}.png`), mask, maskColor: '#9a948c' });
}

/** Fills the first-run form, creating the administrator; waits for the shell. */
export async function setupInBrowser(page, username = ADMIN_NAME, password = ADMIN_PASSWORD) {
  await page.getByRole('heading', { name: 'Create the administrator' }).waitFor();
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password', { exact: true }).fill(password);
  await page.getByLabel('Password again').fill(password);
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

/** Signs in with the form; waits for the shell. */
export async function signInBrowser(page, username = ADMIN_NAME, password = ADMIN_PASSWORD) {
  await page.getByRole('heading', { name: 'Sign in to fawn' }).waitFor();
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

/** Types a message into the composer and sends it with Enter. */
/** A new page of browser on srv, signed in as the administrator: { page, watch, context }. */
export async function openSignedIn(browser, srv) {
  const opened = await openPage(browser, srv);
  await signInBrowser(opened.page);
  return opened;
}

export async function sendMessage(page, text) {
  const box = page.getByRole('textbox', { name: 'Message' });
  await box.fill(text);
  await box.press('Enter');
}

/** Waits until the run of the chat on screen has ended (no Stop button, Send enabled). */
export async function runEnded(page) {
  await page.getByRole('button', { name: 'Stop' }).waitFor({ state: 'hidden' });
  await page.locator('.composer button[type=submit]:not([disabled])').waitFor();
}

/** The thread id the page's URL names (#/t/<id>). */
export async function threadIdOf(page) {
  await page.waitForURL(/#\/t\/[A-Za-z0-9_-]+$/);
  return /#\/t\/([A-Za-z0-9_-]+)$/.exec(page.url())[1];
}
