// The web UI in Chromium: the first run creates the administrator, then
// sign-in, sign-out, refused credentials, and a session that ends (the
// password changed elsewhere) sending the page back to sign-in.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { ADMIN_NAME, ADMIN_PASSWORD, FawnServer, request, signIn } from './lib/server.mjs';
import { assertClean, launch, openPage, screenshot, setupInBrowser, signInBrowser } from './lib/browser.mjs';

describe('web UI: setup and sign-in', () => {
  let srv;
  let browser;
  before(async () => {
    srv = await FawnServer.start({});
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await srv?.stop();
  });

  it('creates the administrator on first run, keeps the session over a reload, signs out and in', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await page.getByRole('heading', { name: 'Create the administrator' }).waitFor();
    await screenshot(page, 'setup');
    await page.getByLabel('Username').fill(ADMIN_NAME);
    await page.getByLabel('Password', { exact: true }).fill(ADMIN_PASSWORD);
    await page.getByLabel('Password again').fill('something else entirely');
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByRole('alert').filter({ hasText: 'The passwords differ.' }).waitFor();
    assert.equal((await request(srv, 'GET', '/api/v1/auth/setup-status')).json.needs_setup, true);

    await page.getByLabel('Password again').fill(ADMIN_PASSWORD);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByRole('link', { name: ADMIN_NAME }).waitFor();
    assert.equal((await request(srv, 'GET', '/api/v1/auth/setup-status')).json.needs_setup, false);
    await page.getByRole('link', { name: 'Sandboxes' }).waitFor(); // an administrator's page

    await page.reload();
    await page.getByRole('link', { name: ADMIN_NAME }).waitFor();

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to fawn' }).waitFor();
    await page.getByText('Signed out.').waitFor();
    const cookies = await context.cookies();
    assert.ok(!cookies.some((c) => c.name === 'access_token'), 'the session cookie is gone');

    await page.getByLabel('Username').fill(ADMIN_NAME);
    await page.getByLabel('Password').fill('not the password at all');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'Wrong username or password.' }).waitFor();
    await screenshot(page, 'sign-in');
    await page.getByLabel('Password').fill(ADMIN_PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('link', { name: ADMIN_NAME }).waitFor();
    await assertClean(page, watch);
    await context.close();
  });

  it('offers sign-in, not setup, to a new browser once the administrator exists', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page);
    await page.getByRole('link', { name: ADMIN_NAME }).waitFor();
    await assertClean(page, watch);
    await context.close();
  });

  it('goes back to sign-in when the session ends elsewhere (the password changed)', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page);
    const jar = await signIn(srv, ADMIN_NAME, ADMIN_PASSWORD);
    const changed = await request(srv, 'POST', '/api/v1/auth/change-password', {
      jar, csrf: true, body: { current_password: ADMIN_PASSWORD, new_password: 'a brand new passphrase' },
    });
    assert.equal(changed.status, 200, changed.text);
    await page.getByRole('link', { name: ADMIN_NAME }).click(); // the account page calls the API
    await page.getByRole('heading', { name: 'Sign in to fawn' }).waitFor();
    await page.getByText('Your session has ended. Sign in again.').waitFor();
    await signInBrowser(page, ADMIN_NAME, 'a brand new passphrase');
    await assertClean(page, watch);
    await context.close();
  });
});

describe('web UI: first run in a fresh browser of its own', () => {
  it('shows the setup form only while no administrator exists', async () => {
    const srv = await FawnServer.start({});
    const browser = await launch();
    try {
      const { page, watch } = await openPage(browser, srv);
      await setupInBrowser(page);
      const other = await openPage(browser, srv);
      await other.page.getByRole('heading', { name: 'Sign in to fawn' }).waitFor();
      await assertClean(page, watch);
      await assertClean(other.page, other.watch);
    } finally {
      await browser.close();
      await srv.stop();
    }
  });
});

describe('web UI: auth.disabled', () => {
  it('opens on the chats without signing in, and says there is no session to end', async () => {
    const srv = await FawnServer.start({ auth: { disabled: true } });
    const browser = await launch();
    try {
      const { page, watch } = await openPage(browser, srv);
      await page.getByRole('link', { name: 'local-admin' }).waitFor();
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByText('Signing in is turned off on this gateway (auth.disabled): there is no session to end.').waitFor();
      assert.equal(await page.getByRole('heading', { name: 'Sign in to fawn' }).count(), 0);
      await assertClean(page, watch);
    } finally {
      await browser.close();
      await srv.stop();
    }
  });
});
