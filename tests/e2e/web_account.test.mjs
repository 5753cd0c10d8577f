// The web UI in Chromium: the account page (change password; API tokens
// created, copied once, used, revoked), the skills page every user reads
// (hostile skill names and descriptions shown as text) and the
// administrators' sandboxes page, which another user neither sees nor reads.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { ADMIN_NAME, ADMIN_PASSWORD, FawnServer, client, login, request, setupAdmin, setupUser, skillsDirWith } from './lib/server.mjs';
import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';
import { assertClean, launch, openPage, runEnded, screenshot, sendMessage, signInBrowser, threadIdOf } from './lib/browser.mjs';

// A skill's SKILL.md written by an attacker: its directory name and its
// front matter hold markup and script.
const HOSTILE_SKILL = '<img src=x onerror=window.__pwned=1>';
const HOSTILE_DESCRIPTION = '<script>window.__pwned = "skill"</script><a href="javascript:alert(1)">x</a>';

describe('web UI: account and administration', () => {
  let srv;
  let fake;
  let browser;
  let skillsDir;

  before(async () => {
    fake = await FakeOpenAI.start();
    skillsDir = skillsDirWith({
      pdf: '---\nname: pdf\ndescription: Read and fill PDF forms\nlicense: Apache-2.0\n---\n# PDF\n',
      [`custom/${HOSTILE_SKILL}`]: `---\ndescription: ${JSON.stringify(HOSTILE_DESCRIPTION)}\nlicense: "<b>MIT</b>"\n---\n`,
    });
    srv = await FawnServer.start({ models: [fake.model('fake')], sandbox: { skills_dir: skillsDir } });
    await setupAdmin(srv);
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await srv?.stop();
    await fake?.stop();
    if (skillsDir) fs.rmSync(skillsDir, { recursive: true, force: true });
  });

  it('creates an API token shown once, copies it, and revokes it', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: srv.base });
    await signInBrowser(page);
    await page.getByRole('link', { name: ADMIN_NAME }).click();
    await page.getByRole('heading', { name: 'API tokens' }).waitFor();
    await page.getByRole('textbox', { name: 'Name' }).fill('laptop <cli>');
    await page.getByRole('button', { name: 'Create token' }).click();
    const shown = page.getByRole('textbox', { name: 'The new token' });
    await shown.waitFor();
    const token = await shown.inputValue();
    assert.match(token, /^fawn_[0-9a-f]{64}$/);
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByRole('button', { name: 'Copied' }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), token);
    await screenshot(page, 'account', [shown]);
    assert.equal((await request(srv, 'GET', '/api/v1/auth/me', { bearer: token })).status, 200, 'the token works');

    await page.getByRole('button', { name: 'Done' }).click();
    assert.equal(await page.getByRole('textbox', { name: 'The new token' }).count(), 0);
    assert.ok(!(await page.content()).includes(token), 'shown once only');
    await page.reload();
    const row = page.getByRole('row', { name: /laptop <cli>/ });
    await row.waitFor();
    assert.match(await row.textContent(), /just now|min ago/, 'last use listed');
    await row.getByRole('button', { name: 'Revoke laptop <cli>' }).click();
    await page.getByRole('dialog', { name: 'Revoke token' }).getByRole('button', { name: 'Revoke' }).click();
    await page.getByRole('row', { name: /laptop <cli>/ }).waitFor({ state: 'detached' });
    await page.getByRole('row', { name: /admin-e2e/ }).waitFor(); // the others stay
    assert.equal((await request(srv, 'GET', '/api/v1/auth/me', { bearer: token })).status, 401, 'revoked');
    await assertClean(page, watch);
    await context.close();
  });

  it('shows the sandboxes to an administrator', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page);
    fake.queue(reply('', [call('bash', { description: 'touch the box', command: 'true' })]), reply('Done with the box.'));
    await sendMessage(page, 'use a sandbox');
    const id = await threadIdOf(page);
    await page.getByText('Done with the box.').waitFor();
    await runEnded(page);
    await page.getByRole('link', { name: 'Sandboxes' }).click();
    const row = page.getByRole('row', { name: new RegExp(id) });
    await row.waitFor();
    assert.match(await row.textContent(), /idle|active|starting|stopping/);
    await page.getByText(/^\d+ sandbox(es)?, as of /).waitFor();
    await screenshot(page, 'sandboxes');
    await assertClean(page, watch);
    await context.close();
  });

  it('keeps the sandboxes from a user who is not an administrator', async () => {
    const user = await setupUser(srv, 'bob@example.com');
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page, 'bob@example.com', user.password);
    assert.equal(await page.getByRole('link', { name: 'Sandboxes' }).count(), 0);
    await page.goto('/#/admin/sandboxes');
    await page.getByText('Only administrators can see the sandboxes.').waitFor();
    assert.equal(await page.locator('table.grid tbody tr').count(), 0);
    await assertClean(page, watch);
    await context.close();
  });

  it('shows the skills to every signed-in user, read-only, their names and descriptions as text', async () => {
    const user = await setupUser(srv, 'carol@example.com');
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page, 'carol@example.com', user.password);
    await page.getByRole('link', { name: 'Skills' }).click();
    await page.getByRole('heading', { name: 'Skills', level: 1 }).waitFor();
    await page.getByText('2 skills.').waitFor();
    const rows = page.locator('table.grid tbody tr');
    const cells = async (i) => rows.nth(i).locator('td').allTextContents();
    assert.deepEqual(await cells(0), [HOSTILE_SKILL, 'custom', HOSTILE_DESCRIPTION, '<b>MIT</b>', 'yes']);
    assert.deepEqual(await cells(1), ['pdf', 'public', 'Read and fill PDF forms', 'Apache-2.0', 'yes']);
    assert.equal(await page.locator('table.grid img, table.grid script, table.grid a, table.grid b').count(), 0, 'no markup from the files');
    assert.equal(await page.locator('table.grid button, table.grid input').count(), 0, 'read-only');
    await screenshot(page, 'skills');
    await page.reload();
    await page.getByText('2 skills.').waitFor();
    await assertClean(page, watch);
    await context.close();
  });

  it('changes the password: a wrong current one is refused, other sessions end, this one goes on', async () => {
    const other = await openPage(browser, srv);
    await signInBrowser(other.page);
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page);
    await page.goto('/#/account');
    const form = page.getByRole('form', { name: 'Change password' });
    await form.getByLabel('Current password').fill('not my password');
    await form.getByLabel('New password', { exact: true }).fill('a much better secret');
    await form.getByLabel('New password again').fill('a much better secret');
    await form.getByRole('button', { name: 'Change password' }).click();
    await form.getByRole('alert').filter({ hasText: 'The current password is wrong.' }).waitFor();

    await form.getByLabel('New password again').fill('something different');
    await form.getByRole('button', { name: 'Change password' }).click();
    await form.getByRole('alert').filter({ hasText: 'The new passwords differ.' }).waitFor();

    await form.getByLabel('Current password').fill(ADMIN_PASSWORD);
    await form.getByLabel('New password again').fill('a much better secret');
    await form.getByRole('button', { name: 'Change password' }).click();
    await form.getByText('Password changed. Other sessions are signed out.').waitFor();
    assert.equal((await login(srv, ADMIN_NAME, 'a much better secret')).res.status, 200);
    assert.equal((await login(srv, ADMIN_NAME, ADMIN_PASSWORD)).res.status, 401);

    // This page has fresh cookies and goes on; the other one is signed out.
    await page.getByRole('link', { name: '+ New chat' }).click();
    await page.getByRole('heading', { name: 'New chat', level: 1 }).waitFor();
    assert.equal(await page.getByRole('heading', { name: 'Sign in to fawn' }).count(), 0);
    await other.page.getByRole('link', { name: ADMIN_NAME }).click();
    await other.page.getByRole('heading', { name: 'Sign in to fawn' }).waitFor();
    await assertClean(page, watch);
    await assertClean(other.page, other.watch);
    await context.close();
    await other.context.close();
    const jar = (await login(srv, ADMIN_NAME, 'a much better secret')).jar;
    assert.equal((await client(srv, { jar }).get('/api/v1/auth/me')).status, 200);
  });
});
