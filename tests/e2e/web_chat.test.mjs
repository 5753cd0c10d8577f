// The web UI in Chromium: a chat's run streams as it happens (the model's
// text before the reply is complete), each tool call with its arguments,
// status, exit code, duration and output; long output cut with its saved
// full text a click away; the model picker; and the chat list's search,
// rename and delete, with the titles other clients set (values.title).
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, client, setupAdmin, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, held, reply } from './lib/fake_openai.mjs';
import { assertClean, launch, runEnded, screenshot, sendMessage, threadIdOf, openSignedIn } from './lib/browser.mjs';

describe('web UI: chats', () => {
  let srv;
  let fake;
  let browser;
  let api;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model('small', { model: 'small-1' }), fake.model('large', { model: 'large-1', display_name: 'Large model' })] });
    const admin = await setupAdmin(srv);
    api = client(srv, { bearer: admin.token });
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await srv?.stop();
    await fake?.stop();
  });

  const signedIn = () => openSignedIn(browser, srv);

  it('streams the reply as it arrives, and each tool call with its arguments, status, exit code, duration and output', async () => {
    const { page, watch, context } = await signedIn();
    const gate = held('and the rest of it.', 'Partial answer ');
    fake.queue(reply('Checking **now**.', [call('bash', { description: 'count things', command: 'echo one; echo two >&2; exit 4' })]), gate.step);
    await sendMessage(page, 'count my things');
    const id = await threadIdOf(page);

    const card = page.locator('.tool').first();
    await card.locator('.tool-meta', { hasText: 'exit 4' }).waitFor();
    assert.match(await card.locator('.tool-meta').textContent(), /^error · exit 4 · \d+(\.\d)? m?s$/);
    assert.equal(await card.locator('.tool-name').textContent(), 'bash');
    assert.equal(await card.locator('.tool-summary').textContent(), 'count things');
    // The held reply's first words are on screen while the run still goes.
    await page.locator('.msg.ai .md', { hasText: 'Partial answer' }).waitFor();
    assert.ok(await page.getByRole('button', { name: 'Stop' }).isVisible(), 'the run is still going');
    assert.equal(await page.getByText('and the rest of it.').count(), 0);
    assert.equal(await page.locator('.msg.ai strong', { hasText: 'now' }).count(), 1, 'Markdown rendered');
    await screenshot(page, 'chat-streaming');
    gate.release();
    await page.getByText('Partial answer and the rest of it.').waitFor();
    await runEnded(page);

    await card.locator('summary').click();
    assert.match(await card.locator('pre.args').textContent(), /"command": "echo one; echo two >&2; exit 4"/);
    const output = await card.locator('pre.output').textContent();
    assert.match(output, /one/);
    assert.match(output, /two/);
    assert.match(output, /Exit Code: 4/);
    await page.locator('.thread-link', { hasText: 'count my things' }).waitFor();
    assert.match(await page.locator('li.active .thread-ago').textContent(), /just now/);
    await screenshot(page, 'chat');

    const state = await api.get(`/api/threads/${id}/state`);
    assert.equal(state.json.values.title, 'count my things');
    await assertClean(page, watch);
    await context.close();
  });

  it('cuts a long tool output, shows it whole on demand, and opens the saved full text', async () => {
    const { page, watch, context } = await signedIn();
    fake.queue(reply('', [call('bash', { description: 'lots of output', command: "head -c 15000 /dev/zero | tr '\\0' x; echo; echo END-OF-OUTPUT" })]), reply('That was long.'));
    await sendMessage(page, 'print a lot');
    await page.getByText('That was long.').waitFor();
    await runEnded(page);
    const card = page.locator('.tool').first();
    await card.locator('summary').click();
    const shown = await card.locator('pre.output').textContent();
    assert.ok(shown.length < 4000, `cut to a screenful (${shown.length})`);
    assert.match(shown, /characters omitted/);
    await card.getByRole('button', { name: /^Show all \d+ characters$/ }).click();
    assert.ok((await card.locator('pre.output').textContent()).length > shown.length);
    await card.getByRole('button', { name: 'Open the saved full output' }).click();
    const preview = page.locator('.files-panel pre.text-preview');
    await preview.waitFor();
    const whole = await preview.textContent();
    assert.ok(whole.includes('x'.repeat(15000)) && whole.includes('END-OF-OUTPUT'), 'the whole output');
    await assertClean(page, watch);
    await context.close();
  });

  it('runs the model picked, and remembers it', async () => {
    const { page, watch, context } = await signedIn();
    const picker = page.getByRole('combobox', { name: 'Model' });
    assert.deepEqual(await picker.locator('option').allTextContents(), ['small', 'Large model']);
    await picker.selectOption('large');
    const before = fake.requests.length;
    await sendMessage(page, 'which model?');
    await page.getByText('done').waitFor();
    await runEnded(page);
    assert.equal(fake.requests.at(-1).body.model, 'large-1');
    assert.equal(fake.requests.length, before + 1);
    await page.reload();
    await page.getByRole('combobox', { name: 'Model' }).waitFor();
    assert.equal(await page.getByRole('combobox', { name: 'Model' }).inputValue(), 'large');
    await assertClean(page, watch);
    await context.close();
  });

  it('lists chats by last activity with the titles other clients set, searches titles, renames and deletes', async () => {
    // Titled by another client as DeerFlow's UI does: POST /state values.title.
    for (const title of ['Alpha report', 'Beta notes', 'Gamma plan']) {
      const r = await api.post('/api/threads', { metadata: {} });
      assert.equal(r.status, 200);
      assert.equal((await api.post(`/api/threads/${r.json.thread_id}/state`, { values: { title } })).status, 200);
    }
    const { page, watch, context } = await signedIn();
    const titles = () => page.locator('.thread-title').allTextContents();
    await page.locator('.thread-title', { hasText: 'Gamma plan' }).waitFor();
    const listed = await titles();
    assert.deepEqual(listed.slice(0, 3), ['Gamma plan', 'Beta notes', 'Alpha report'], 'most recent first');

    await page.getByRole('searchbox', { name: 'Search chats' }).fill('BETA');
    await waitFor(async () => (await titles()).join() === 'Beta notes', undefined, 'only Beta listed');
    await page.getByRole('searchbox', { name: 'Search chats' }).fill('');
    await waitFor(async () => (await titles()).length === listed.length, undefined, 'all listed again');

    // Rename with the keyboard: the button, the dialog's field, Enter.
    await page.getByRole('link', { name: /Gamma plan/ }).click();
    await page.getByRole('heading', { name: 'Gamma plan', level: 1 }).waitFor();
    await page.getByRole('button', { name: 'Rename Gamma plan' }).focus();
    await page.keyboard.press('Enter');
    const field = page.getByRole('dialog', { name: 'Rename chat' }).getByRole('textbox', { name: 'Title' });
    await field.fill('Delta plan');
    await field.press('Enter');
    await page.locator('.thread-title', { hasText: 'Delta plan' }).waitFor();
    await page.getByRole('heading', { name: 'Delta plan', level: 1 }).waitFor();
    const id = await threadIdOf(page);
    assert.equal((await api.get(`/api/threads/${id}/state`)).json.values.title, 'Delta plan');
    const renamed = (await api.get(`/api/threads/${id}`)).json;
    assert.equal(renamed.values.title, 'Delta plan');
    assert.deepEqual(renamed.metadata, {}, 'the title lives in the state only, not mirrored into the metadata');

    // The rename survives a reload: the list and the chat read values.title.
    await page.reload();
    await page.getByRole('heading', { name: 'Delta plan', level: 1 }).waitFor();
    await page.locator('.thread-title', { hasText: 'Delta plan' }).waitFor();
    assert.ok(!(await titles()).includes('Gamma plan'));

    await page.getByRole('button', { name: 'Delete Delta plan' }).click();
    await page.getByRole('dialog', { name: 'Delete chat' }).getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('heading', { name: 'New chat', level: 1 }).waitFor();
    await waitFor(async () => !(await titles()).includes('Delta plan'), undefined, 'the deleted chat gone from the list');
    assert.equal((await api.get(`/api/threads/${id}`)).status, 404);

    // Cancelling the dialog keeps the chat.
    await page.getByRole('button', { name: 'Delete Alpha report' }).click();
    await page.getByRole('dialog', { name: 'Delete chat' }).getByRole('button', { name: 'Cancel' }).click();
    assert.ok((await titles()).includes('Alpha report'));
    await assertClean(page, watch);
    await context.close();
  });

  it("shows the title of a chat another client ran, from its run's first message", async () => {
    const t = (await api.post('/api/threads', {})).json;
    fake.queue(reply('Answered elsewhere.'));
    const run = await api.post(`/api/threads/${t.thread_id}/runs/wait`, {
      assistant_id: 'lead_agent', input: { messages: [{ type: 'human', content: [{ type: 'text', text: 'Question from the SDK' }] }] },
    });
    assert.equal(run.status, 200, run.text);
    assert.equal((await api.get(`/api/threads/${t.thread_id}`)).json.values.title, 'Question from the SDK');
    const { page, watch, context } = await signedIn();
    await page.locator('.thread-title', { hasText: 'Question from the SDK' }).click();
    await page.getByRole('heading', { name: 'Question from the SDK', level: 1 }).waitFor();
    await page.getByText('Answered elsewhere.').waitFor();
    await assertClean(page, watch);
    await context.close();
  });
});
