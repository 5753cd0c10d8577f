// The web UI in Chromium: uploads picked or dropped, checked against the
// thread's limits (shown on a new chat at once) with every skipped file
// explained; files attached to a message kept with it (additional_kwargs.files)
// after its run and a reload, at most as many as a message may name; the files panel
// previewing what the agent presented (Markdown, text, CSV, an image, HTML
// and SVG only in a sandboxed frame) and downloading it; and editing a
// text output, with a conflict shown when the file changed meanwhile.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, client, setupAdmin, sha256, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, reply } from './lib/fake_openai.mjs';
import { assertClean, launch, runEnded, screenshot, sendMessage, signInBrowser, threadIdOf, openSignedIn } from './lib/browser.mjs';

const OUT = '/mnt/user-data/outputs';
// A 1 x 1 PNG.
const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';

const write = (name, content) => call('write_file', { description: `write ${name}`, path: `${OUT}/${name}`, content });

describe('web UI: uploads and files', () => {
  let srv;
  let fake;
  let browser;
  let admin;
  let api;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({
      models: [fake.model('fake')],
      uploads: { max_files: 3, max_file_size_mb: 1, max_total_size_mb: 2 },
    });
    admin = await setupAdmin(srv);
    api = client(srv, { bearer: admin.token });
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await srv?.stop();
    await fake?.stop();
  });

  const signedIn = () => openSignedIn(browser, srv);

  /** A chat in which the agent wrote files, presented them and answered. */
  async function chatWithFiles(page, calls, presented, prompt) {
    fake.queue(reply('Writing.', calls), reply('', [call('present_files', { filepaths: presented.map((n) => `${OUT}/${n}`) })]), reply('Here they are.'));
    await sendMessage(page, prompt);
    await page.getByText('Here they are.').waitFor();
    await runEnded(page);
    return threadIdOf(page);
  }

  it('uploads files picked or dropped, within the limits it shows, and explains each it skips', async () => {
    const { page, watch, context } = await signedIn();
    await page.locator('.composer input[type=file]').setInputFiles([
      { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('some notes\n') },
      { name: 'big.bin', mimeType: 'application/octet-stream', buffer: Buffer.alloc(1536 * 1024, 1) },
      { name: '.fawn-tmp-sneaky', mimeType: 'text/plain', buffer: Buffer.from('x') },
    ]);
    const skipped = page.locator('.skipped');
    await skipped.getByText('Not uploaded (2):').waitFor();
    assert.match(await skipped.textContent(), /big\.bin — larger than 1\.0 MiB, the most a file may have/);
    assert.match(await skipped.textContent(), /\.fawn-tmp-sneaky — the name is reserved/);
    await page.locator('.attachments .chip', { hasText: 'notes.txt' }).waitFor();
    assert.equal(await page.locator('.limits').textContent(), 'Up to 3 files, 1 MiB each, 2 MiB per upload');
    const id = await threadIdOf(page);

    // Dropped onto the chat.
    const dt = await page.evaluateHandle(() => {
      const d = new DataTransfer();
      d.items.add(new File(['name,n\nx,1\n'], 'dropped.csv', { type: 'text/csv' }));
      for (let i = 0; i < 4; i++) d.items.add(new File([`${i}`], `many-${i}.txt`, { type: 'text/plain' }));
      return d;
    });
    await page.dispatchEvent('.chat', 'dragover', { dataTransfer: dt });
    await page.getByText('Drop files to upload them to this chat').waitFor();
    await page.dispatchEvent('.chat', 'drop', { dataTransfer: dt });
    await page.locator('.attachments .chip', { hasText: 'dropped.csv' }).waitFor();
    await skipped.getByText('Not uploaded (2):').waitFor();
    assert.match(await skipped.textContent(), /many-3\.txt — one upload holds at most 3 files/);
    await screenshot(page, 'uploads');

    const listed = await api.get(`/api/threads/${id}/uploads/list`);
    assert.deepEqual(listed.json.files.map((f) => f.filename), ['dropped.csv', 'many-0.txt', 'many-1.txt', 'notes.txt']);
    await page.getByRole('button', { name: /^Files/ }).click();
    const panel = page.getByRole('complementary', { name: 'Files' });
    await panel.getByRole('button', { name: /notes\.txt/ }).click();
    assert.equal(await panel.locator('pre.text-preview').textContent(), 'some notes\n');
    assert.equal(await panel.getByRole('button', { name: 'Edit' }).count(), 0, 'uploads are not edited');
    await assertClean(page, watch);
    await context.close();
  });

  it('shows the upload limits on a new chat at once, before its thread exists', async () => {
    const { page, watch, context } = await signedIn();
    await page.getByRole('heading', { name: 'New chat', level: 1 }).waitFor();
    const limits = page.locator('.limits');
    await waitFor(async () => (await limits.textContent()) !== '', undefined, 'the limits shown');
    assert.equal(await limits.textContent(), 'Up to 3 files, 1 MiB each, 2 MiB per upload');
    assert.doesNotMatch(page.url(), /#\/t\//, 'still a new chat');
    const asked = watch.requests.filter((u) => u.endsWith('/uploads/limits'));
    assert.equal(asked.length, 1);
    const id = /\/api\/threads\/([A-Za-z0-9_-]+)\/uploads\/limits$/.exec(asked[0])[1];
    assert.equal((await api.get(`/api/threads/${id}`)).status, 404, 'asking made no thread');
    assert.equal(await page.locator('.toast').count(), 0, 'no error shown');
    await assertClean(page, watch);
    await context.close();
  });

  it('keeps the files attached to a message with it after the run and after a reload', async () => {
    const { page, watch, context } = await signedIn();
    await page.locator('.composer input[type=file]').setInputFiles([
      { name: 'numbers.csv', mimeType: 'text/csv', buffer: Buffer.from('n\n1\n2\n') },
      { name: 'readme.txt', mimeType: 'text/plain', buffer: Buffer.from('read me\n') },
    ]);
    await page.locator('.attachments .chip', { hasText: 'readme.txt' }).waitFor();
    const first = fake.requests.length;
    fake.queue(reply('Both files read.'));
    await sendMessage(page, 'look at the files');
    await page.getByText('Both files read.').waitFor();
    await runEnded(page);
    const id = await threadIdOf(page);
    const chips = () => page.locator('.msg.human .chip').allTextContents();
    assert.deepEqual(await chips(), ['numbers.csv', 'readme.txt'], 'after the run');
    assert.equal(await page.locator('.attachments .chip').count(), 0, 'the composer is cleared');

    // What the page sent passed the gateway's check of attached files whole,
    // and the model was told of them.
    const human = (await api.get(`/api/threads/${id}/state`)).json.values.messages.find((m) => m.type === 'human');
    assert.deepEqual(human.additional_kwargs.files, [
      { filename: 'numbers.csv', size: 6, path: '/mnt/user-data/uploads/numbers.csv', status: 'uploaded' },
      { filename: 'readme.txt', size: 8, path: '/mnt/user-data/uploads/readme.txt', status: 'uploaded' },
    ]);
    const asked = fake.requests[first].body.messages.filter((m) => m.role === 'user').at(-1).content;
    assert.match(asked, /^<uploaded_files>\n[^]*- "\/mnt\/user-data\/uploads\/numbers\.csv" \(6 bytes\)\n- "\/mnt\/user-data\/uploads\/readme\.txt" \(8 bytes\)\n/);

    await page.reload();
    await page.getByText('Both files read.').waitFor();
    assert.deepEqual(await chips(), ['numbers.csv', 'readme.txt'], 'after a reload');
    await assertClean(page, watch);
    await context.close();
  });

  it('attaches at most the 100 files a message may name, and says why the rest wait', async () => {
    const { page, watch, context } = await signedIn();
    const picker = page.locator('.composer input[type=file]');
    const attached = page.locator('.attachments .chip');
    // Three at a time (this server's max_files): 99, then 3 more of which 1 fits.
    for (let round = 0; round < 34; round++) {
      await picker.setInputFiles([0, 1, 2].map((k) => ({ name: `f-${round * 3 + k}.txt`, mimeType: 'text/plain', buffer: Buffer.from('x') })));
      await waitFor(async () => (await attached.count()) === Math.min((round + 1) * 3, 100), undefined, `round ${round} attached`);
    }
    const skipped = page.locator('.skipped');
    await skipped.getByText('Not uploaded (2):').waitFor();
    assert.match(await skipped.textContent(), /f-100\.txt — a message names at most 100 files: send the ones attached first/);
    assert.match(await skipped.textContent(), /f-101\.txt — a message names at most 100 files/);
    const id = await threadIdOf(page);
    fake.queue(reply('A hundred files.'));
    await sendMessage(page, 'all of them');
    await page.getByText('A hundred files.').waitFor();
    await runEnded(page);
    const human = (await api.get(`/api/threads/${id}/state`)).json.values.messages.find((m) => m.type === 'human');
    assert.equal(human.additional_kwargs.files.length, 100, 'the gateway took them all');
    assert.equal(await page.locator('.msg.human .chip').count(), 100);
    await assertClean(page, watch);
    await context.close();
  });

  it('previews Markdown, text, CSV and an image, HTML and SVG only in a sandboxed frame, and downloads', async () => {
    const { page, watch, context } = await signedIn();
    const calls = [
      write('report.md', '# Quarterly report\n\nSales **rose**.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n'),
      write('data.csv', 'name,city\nalice,"Paris, France"\nbob,Oslo\n'),
      write('script.py', 'print("hello")\n'),
      write('page.html', '<!doctype html><h1>Hello page</h1><p>body text</p>'),
      write('pic.svg', '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40"><circle id="c" cx="20" cy="20" r="15"/></svg>'),
      call('bash', { description: 'make an image', command: `echo ${PNG_BASE64} | base64 -d > ${OUT}/dot.png` }),
    ];
    await chatWithFiles(page, calls, ['report.md', 'data.csv', 'script.py', 'page.html', 'pic.svg', 'dot.png'], 'make me some files');
    await page.getByRole('button', { name: 'Files (6)' }).click();
    const panel = page.getByRole('complementary', { name: 'Files' });
    const open = (name) => panel.getByRole('button', { name: new RegExp(`^${name.replace('.', '\\.')}`) }).click();
    const back = () => panel.getByRole('button', { name: 'Back to the file list' }).click();

    await open('report.md');
    await panel.locator('.preview-body .md h1', { hasText: 'Quarterly report' }).waitFor();
    assert.equal(await panel.locator('.preview-body .md td').count(), 2);
    await screenshot(page, 'files-markdown');
    await back();
    await open('data.csv');
    await panel.locator('table.csv th', { hasText: 'city' }).waitFor();
    assert.deepEqual(await panel.locator('table.csv tbody tr').first().locator('td').allTextContents(), ['alice', 'Paris, France']);
    await back();
    await open('script.py');
    assert.equal(await panel.locator('pre.text-preview').textContent(), 'print("hello")\n');
    await back();
    await open('dot.png');
    const img = panel.locator('img.image-preview');
    await waitFor(() => img.evaluate((el) => el.complete && el.naturalWidth === 1), undefined, 'the image loaded');
    await back();
    for (const [name, inside] of [['page.html', 'h1'], ['pic.svg', 'circle']]) {
      await open(name);
      const frame = panel.locator('iframe.frame-preview');
      await frame.waitFor();
      assert.equal(await frame.getAttribute('sandbox'), '', `${name}: sandboxed, no allowances`);
      await page.frameLocator('.files-panel iframe.frame-preview').locator(inside).first().waitFor();
      await back();
    }
    await open('report.md');
    const [download] = await Promise.all([page.waitForEvent('download'), panel.getByRole('link', { name: 'Download' }).click()]);
    assert.equal(download.suggestedFilename(), 'report.md');
    assert.match(fs.readFileSync(await download.path(), 'utf8'), /^# Quarterly report/);
    await assertClean(page, watch);
    await context.close();
  });

  it('edits a text output, and shows a conflict when the file changed since it was opened', async () => {
    const { page, watch, context } = await signedIn();
    const id = await chatWithFiles(page, [write('draft.md', '# Draft\n\nfirst words\n')], ['draft.md'], 'write a draft');
    const onHost = path.join(srv.userData(admin.id, id), 'outputs', 'draft.md');
    await page.getByRole('button', { name: 'Files (1)' }).click();
    const panel = page.getByRole('complementary', { name: 'Files' });
    await panel.getByRole('button', { name: /^draft\.md/ }).click();
    await panel.getByRole('button', { name: 'Edit' }).click();
    const editor = panel.getByRole('textbox', { name: 'Contents of draft.md' });
    assert.equal(await editor.inputValue(), '# Draft\n\nfirst words\n');
    await editor.fill('# Draft\n\nmy words\n');
    await panel.getByRole('button', { name: 'Save' }).click();
    await panel.locator('.md p', { hasText: 'my words' }).waitFor();
    assert.equal(fs.readFileSync(onHost, 'utf8'), '# Draft\n\nmy words\n');

    await panel.getByRole('button', { name: 'Edit' }).click();
    await editor.fill('# Draft\n\nsecond thoughts\n');
    fs.writeFileSync(onHost, '# Draft\n\nchanged by someone else\n');
    await panel.getByRole('button', { name: 'Save' }).click();
    await panel.getByRole('alert').filter({ hasText: 'Conflict: the file changed since you opened it.' }).waitFor();
    assert.equal(await editor.inputValue(), '# Draft\n\nsecond thoughts\n', 'the edit is kept');
    assert.equal(fs.readFileSync(onHost, 'utf8'), '# Draft\n\nchanged by someone else\n', 'nothing overwritten');
    await screenshot(page, 'files-conflict');

    await panel.getByRole('button', { name: 'Save mine over it' }).click();
    await panel.locator('.md p', { hasText: 'second thoughts' }).waitFor();
    assert.equal(fs.readFileSync(onHost, 'utf8'), '# Draft\n\nsecond thoughts\n');
    await assertClean(page, watch);
    await context.close();
  });

  it('saves an edit where crypto.subtle is missing (plain HTTP to another host), hashing in JavaScript', async () => {
    const context = await browser.newContext({ baseURL: srv.base });
    await context.addInitScript(() => Object.defineProperty(globalThis.crypto, 'subtle', { get: () => undefined }));
    const page = await context.newPage();
    await page.goto('/');
    assert.equal(await page.evaluate(() => crypto.subtle), undefined);
    const inputs = ['', 'abc', 'a'.repeat(55), 'b'.repeat(56), 'c'.repeat(64), 'héllo wörld ✓'.repeat(5000)];
    const hashed = await page.evaluate(async (texts) => {
      const { sha256Hex } = await import('/assets/dom.js');
      return Promise.all(texts.map((t) => sha256Hex(new TextEncoder().encode(t))));
    }, inputs);
    assert.deepEqual(hashed, inputs.map((t) => sha256(Buffer.from(t))));

    await signInBrowser(page);
    const id = await chatWithFiles(page, [write('plain.txt', 'old text\n')], ['plain.txt'], 'write plain text');
    await page.getByRole('button', { name: 'Files (1)' }).click();
    const panel = page.getByRole('complementary', { name: 'Files' });
    await panel.getByRole('button', { name: /^plain\.txt/ }).click();
    await panel.getByRole('button', { name: 'Edit' }).click();
    await panel.getByRole('textbox', { name: 'Contents of plain.txt' }).fill('new text\n');
    await panel.getByRole('button', { name: 'Save' }).click();
    await panel.locator('pre.text-preview', { hasText: 'new text' }).waitFor();
    assert.equal(fs.readFileSync(path.join(srv.userData(admin.id, id), 'outputs', 'plain.txt'), 'utf8'), 'new text\n');
    await context.close();
  });
});
