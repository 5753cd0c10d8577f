// The web UI in Chromium: what a first page load transfers (measured and
// held to a budget), a reload answered with 304s, the page at phone width
// in the dark, and the chat driven by the keyboard alone.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { ADMIN_NAME, FawnServer, setupAdmin } from './lib/server.mjs';
import { FakeOpenAI, reply } from './lib/fake_openai.mjs';
import { UI_WAIT_MS, assertClean, launch, openPage, runEnded, screenshot, sendMessage, signInBrowser } from './lib/browser.mjs';

// What a first load may transfer, headers included (gzip on): the page,
// its modules and style, marked and DOMPurify, and the first API answers.
// Measured at about 70 KB; the budget keeps it light.
const FIRST_LOAD_BUDGET = 120 * 1024;

/** Loads / in a fresh context and counts the bytes received (CDP
 *  Network.loadingFinished: bodies as sent and headers). */
async function measure(browser, srv, prepare) {
  const context = await browser.newContext({ baseURL: srv.base });
  context.setDefaultTimeout(UI_WAIT_MS);
  const page = await context.newPage();
  await prepare?.(page);
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  const sizes = new Map();
  const urls = new Map();
  cdp.on('Network.requestWillBeSent', (e) => urls.set(e.requestId, e.request.url));
  cdp.on('Network.loadingFinished', (e) => sizes.set(e.requestId, e.encodedDataLength));
  const total = () => [...sizes.values()].reduce((a, b) => a + b, 0);
  return { context, page, sizes, urls, total, reset: () => sizes.clear() };
}

describe('web UI: weight, phone width, dark, keyboard', () => {
  let srv;
  let fake;
  let browser;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model('fake')] });
    await setupAdmin(srv);
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await srv?.stop();
    await fake?.stop();
  });

  it('transfers a light first load, and a reload revalidates with 304s', async (t) => {
    const out = await measure(browser, srv);
    await out.page.goto('/');
    await out.page.getByRole('heading', { name: 'Sign in to fawn' }).waitFor();
    await out.page.waitForLoadState('networkidle');
    const signedOut = out.total();
    const requestsOut = out.sizes.size;
    await out.context.close();

    // A first load as a signed-in user: a fresh browser with the session cookie only.
    const fresh = await measure(browser, srv);
    await fresh.page.goto('/');
    await signInBrowser(fresh.page);
    const cookies = await fresh.context.cookies();
    await fresh.context.close();
    const cold = await measure(browser, srv, (page) => page.context().addCookies(cookies));
    await cold.page.goto('/');
    await cold.page.getByRole('heading', { name: 'New chat', level: 1 }).waitFor();
    await cold.page.waitForLoadState('networkidle');
    const signedIn = cold.total();
    const requestsIn = cold.sizes.size;
    cold.reset();
    await cold.page.reload();
    await cold.page.getByRole('heading', { name: 'New chat', level: 1 }).waitFor();
    await cold.page.waitForLoadState('networkidle');
    const reload = cold.total();
    await cold.context.close();

    t.diagnostic(`first load, signed out: ${signedOut} bytes in ${requestsOut} requests`);
    t.diagnostic(`first load, signed in: ${signedIn} bytes in ${requestsIn} requests`);
    t.diagnostic(`reload, signed in: ${reload} bytes`);
    assert.ok(signedIn < FIRST_LOAD_BUDGET, `first load ${signedIn} bytes, budget ${FIRST_LOAD_BUDGET}`);
    assert.ok(signedOut < FIRST_LOAD_BUDGET, `first load ${signedOut} bytes, budget ${FIRST_LOAD_BUDGET}`);
    assert.ok(reload < signedIn / 3, `a reload revalidates (${reload} bytes of ${signedIn})`);
  });

  it('fits a phone screen in the dark, the chats behind a menu', async () => {
    const { page, watch, context } = await openPage(browser, srv, { viewport: { width: 390, height: 844 }, colorScheme: 'dark' });
    await page.getByRole('heading', { name: 'Sign in to fawn' }).waitFor();
    await signInBrowser(page);
    await page.getByRole('textbox', { name: 'Message' }).waitFor();
    const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert.equal(bg, 'rgb(22, 21, 19)', 'the dark palette');
    fake.queue(reply('A reply that is **readable** on a phone, with `code` and a list:\n\n- one\n- two'));
    await sendMessage(page, 'hello from a phone');
    await page.getByText('readable').waitFor();
    await runEnded(page);
    const overflow = await page.evaluate(() => document.scrollingElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `no sideways scrolling (${overflow} px too wide)`);
    assert.ok(!(await page.locator('.sidebar').isVisible()), 'the chats are behind the menu');
    await screenshot(page, 'phone-dark');
    await page.getByRole('button', { name: 'Chats' }).click();
    await page.locator('.sidebar .thread-title', { hasText: 'hello from a phone' }).waitFor();
    await page.locator('.sidebar .thread-title', { hasText: 'hello from a phone' }).click();
    await page.locator('.sidebar').waitFor({ state: 'hidden' });
    await assertClean(page, watch);
    await context.close();
  });

  it('works from the keyboard: reach the message box, send, open and close the files', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page);
    await page.locator('.topbar .brand').focus();
    await page.keyboard.press('Shift+Tab');
    assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to the chat');
    await page.keyboard.press('Enter');
    assert.equal(await page.evaluate(() => document.activeElement.id), 'main');
    let reached = false;
    for (let i = 0; i < 40 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => document.activeElement?.getAttribute('aria-label') === 'Message');
    }
    assert.ok(reached, 'Tab reaches the message box');
    fake.queue(reply('Typed and sent.'));
    await page.keyboard.type('sent with the keyboard');
    await page.keyboard.press('Enter');
    await page.getByText('Typed and sent.').waitFor();
    await runEnded(page);
    await page.getByRole('button', { name: /^Files/ }).focus();
    await page.keyboard.press('Enter');
    const panel = page.getByRole('complementary', { name: 'Files' });
    await panel.waitFor();
    assert.equal(await page.evaluate(() => document.activeElement.getAttribute('aria-label')), 'Close files');
    await page.keyboard.press('Escape');
    await panel.waitFor({ state: 'hidden' });
    assert.match(await page.evaluate(() => document.activeElement.textContent), /^Files/);
    await page.getByRole('link', { name: ADMIN_NAME }).waitFor();
    await assertClean(page, watch);
    await context.close();
  });
});
