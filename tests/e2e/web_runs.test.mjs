// The web UI in Chromium, while runs go on: a reload in the middle of a
// run brings the conversation back whole and streaming again; a broken
// stream is joined again after the last event seen (Last-Event-ID); a gap
// reloads the state; Stop cancels; a clarification is answered in place;
// model retries and failures are shown.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from './lib/test.mjs';

import { FawnServer, client, setupAdmin, waitFor } from './lib/server.mjs';
import { FakeOpenAI, call, fail, held, reply } from './lib/fake_openai.mjs';
import { assertClean, launch, runEnded, screenshot, sendMessage, threadIdOf, openSignedIn } from './lib/browser.mjs';

/**
 * Sends req (a run started by the page) to the server itself and answers
 * the page with the first events only, up to the one with id lastId, as if
 * the connection broke there: the run goes on (on_disconnect continue).
 */
async function cutStream(srv, req, lastId) {
  const headers = await req.allHeaders();
  const body = req.postDataBuffer();
  const text = await new Promise((resolve, reject) => {
    const up = http.request({ host: '127.0.0.1', port: srv.port, method: 'POST', path: new URL(req.url()).pathname, headers }, (res) => {
      let got = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        got += d;
        const end = got.indexOf(`\nid: ${lastId}\n\n`);
        if (end >= 0) {
          up.destroy();
          resolve(got.slice(0, end + `\nid: ${lastId}\n\n`.length));
        }
      });
      res.on('end', () => reject(new Error(`the stream ended before event ${lastId}:\n${got}`)));
    });
    up.on('error', () => {});
    up.end(body);
  });
  return text;
}

describe('web UI: runs that outlive a page, and runs that stop', () => {
  let srv;
  let fake;
  let browser;
  let api;

  before(async () => {
    fake = await FakeOpenAI.start();
    srv = await FawnServer.start({ models: [fake.model('fake')] });
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

  const lastRun = async (id) => (await api.get(`/api/threads/${id}/runs?limit=1`)).json[0];

  it('brings the conversation back whole after a reload in the middle of a run, and streams on', async () => {
    const { page, watch, context } = await signedIn();
    const gate = held('and after the reload.', 'Said before the reload ');
    fake.queue(reply('First a command.', [call('bash', { description: 'greet', command: 'echo hello-from-the-box' })]), gate.step);
    await sendMessage(page, 'survive a reload');
    const id = await threadIdOf(page);
    await page.locator('.msg.ai .md', { hasText: 'Said before the reload' }).waitFor();

    await page.reload();
    await page.locator('.msg.human', { hasText: 'survive a reload' }).waitFor();
    await page.locator('.tool .tool-meta', { hasText: 'success · exit 0' }).waitFor();
    await page.locator('.msg.ai .md', { hasText: 'Said before the reload' }).waitFor();
    await page.getByRole('button', { name: 'Stop' }).waitFor();
    assert.ok(watch.requests.some((u) => /\/runs\/[0-9a-f-]+\/stream$/.test(u)), 'the page joined the run');

    gate.release();
    await page.getByText('Said before the reload and after the reload.').waitFor();
    await runEnded(page);
    assert.equal(await page.locator('.msg.human').count(), 1);
    assert.equal(await page.locator('.tool').count(), 1);
    assert.equal(await page.locator('.msg.ai').count(), 2);
    assert.equal((await lastRun(id)).status, 'success', 'the reload did not stop the run');
    await assertClean(page, watch);
    await context.close();
  });

  it('joins a broken stream again after the last event it saw (Last-Event-ID)', async () => {
    const { page, watch, context } = await signedIn();
    const gate = held('all of it.', 'Some ');
    fake.queue(gate.step);
    const joins = [];
    let cut = false;
    await page.route('**/runs/**', async (route) => {
      const req = route.request();
      if (req.method() === 'POST' && req.url().endsWith('/runs/stream') && !cut) {
        cut = true;
        const partial = await cutStream(srv, req, 2);
        return route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: partial });
      }
      if (req.method() === 'GET' && /\/stream$/.test(req.url())) joins.push(req.headers()['last-event-id'] ?? null);
      return route.continue();
    });
    await sendMessage(page, 'a stream that breaks');
    await waitFor(() => joins.length > 0, undefined, 'the page to join the run again');
    assert.equal(joins[0], '2', 'it resumes after the last event it had');
    await page.locator('.msg.ai .md', { hasText: 'Some' }).waitFor();
    gate.release();
    await page.getByText('Some all of it.').waitFor();
    await runEnded(page);
    assert.equal(await page.locator('.msg.human').count(), 1);
    await page.unrouteAll();
    await assertClean(page, watch);
    await context.close();
  });

  it('reloads the state on a gap and follows on after the latest event', async () => {
    const { page, watch, context } = await signedIn();
    const gate = held('after the gap.', 'Before ');
    fake.queue(reply('A step.', [call('bash', { description: 'a step', command: 'echo step' })]), gate.step);
    await sendMessage(page, 'a gap in the events');
    await page.locator('.msg.ai .md', { hasText: 'Before' }).waitFor();
    const joins = [];
    const statesAfterGap = [];
    let gapped = false;
    await page.route('**/runs/*/stream', async (route) => {
      const req = route.request();
      if (req.method() !== 'GET') return route.continue();
      if (!gapped) {
        gapped = true;
        const gap = { code: 'stream_replay_gap', run_id: 'x', requested_event_id: 0, earliest_available_event_id: 2, latest_available_event_id: 1, recovery: 'reload_durable_state' };
        return route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: `event: gap\ndata: ${JSON.stringify(gap)}\n\n` });
      }
      joins.push(req.headers()['last-event-id'] ?? null);
      return route.continue();
    });
    page.on('request', (r) => {
      if (gapped && r.url().endsWith('/state')) statesAfterGap.push(r.url());
    });
    await page.reload();
    await waitFor(() => joins.length > 0, undefined, 'the page to join after the gap');
    assert.equal(joins[0], '1', 'it follows on after the latest event the gap named');
    assert.ok(statesAfterGap.length >= 1, 'the gap reloaded the state');
    await page.locator('.tool .tool-meta', { hasText: 'success · exit 0' }).waitFor();
    gate.release();
    await page.getByText('Before after the gap.').waitFor();
    await runEnded(page);
    assert.equal(await page.locator('.msg.human').count(), 1);
    await page.unrouteAll();
    await assertClean(page, watch);
    await context.close();
  });

  it('stops a run with Stop', async () => {
    const { page, watch, context } = await signedIn();
    const gate = held('never shown');
    fake.queue(gate.step);
    const asked = fake.requests.length;
    await sendMessage(page, 'take your time');
    const id = await threadIdOf(page);
    await waitFor(() => fake.requests.length > asked, undefined, 'the model call');
    await page.getByRole('button', { name: 'Stop' }).click();
    await page.locator('.note', { hasText: 'Stopped.' }).waitFor();
    await runEnded(page);
    assert.equal((await lastRun(id)).status, 'interrupted');
    assert.equal(await page.getByText('never shown').count(), 0);
    gate.release();
    await assertClean(page, watch);
    await context.close();
  });

  it('answers a clarification in place', async () => {
    const { page, watch, context } = await signedIn();
    fake.queue(reply('', [call('ask_clarification', { question: 'Which colour?', context: 'Painting the shed.', options: ['Red', 'Blue'], clarification_type: 'approach_choice' })]));
    await sendMessage(page, 'paint it');
    const id = await threadIdOf(page);
    const card = page.getByRole('group', { name: 'Question from the agent' });
    await card.getByText('Which colour?').waitFor();
    await card.getByText('Painting the shed.').waitFor();
    await runEnded(page);
    await card.getByRole('button', { name: 'Blue' }).waitFor({ state: 'visible' });
    assert.ok(await card.getByRole('button', { name: 'Blue' }).isEnabled());
    await screenshot(page, 'clarification');
    fake.queue(reply('Blue it is.'));
    await card.getByRole('button', { name: 'Blue' }).click();
    await page.getByText('Blue it is.').waitFor();
    await runEnded(page);
    assert.match(JSON.stringify(fake.requests.at(-1).body.messages.at(-1)), /Blue/);
    assert.equal(await card.getByRole('button', { name: 'Blue' }).count(), 0, 'answered: no more options');
    const msgs = (await api.get(`/api/threads/${id}/state`)).json.values.messages;
    assert.equal(msgs.filter((m) => m.type === 'human').at(-1).content, 'Blue');

    // A question can also be answered in words.
    fake.queue(reply('', [call('ask_clarification', { question: 'How wide?' })]));
    await sendMessage(page, 'and the door');
    const second = page.getByRole('group', { name: 'Question from the agent' }).last();
    await second.getByText('How wide?').waitFor();
    await runEnded(page);
    fake.queue(reply('Noted.'));
    await second.getByRole('textbox', { name: 'Your answer' }).fill('two metres');
    await second.getByRole('textbox', { name: 'Your answer' }).press('Enter');
    await page.getByText('Noted.').waitFor();
    await runEnded(page);
    assert.match(JSON.stringify(fake.requests.at(-1).body.messages.at(-1)), /two metres/);
    await assertClean(page, watch);
    await context.close();
  });

  it('shows model retries as they happen, and a run that fails, also after a reload', async () => {
    const { page, watch, context } = await signedIn();
    fake.queue(fail(503), reply('Recovered after a retry.'));
    await sendMessage(page, 'flaky model');
    await page.locator('.note.retry', { hasText: /^Model call 1 of \d+ failed \(model fake: HTTP 503: fake failure\); retrying in / }).waitFor();
    await page.getByText('Recovered after a retry.').waitFor();
    await runEnded(page);

    fake.queue(fail(400, { message: 'your request is malformed' }));
    await sendMessage(page, 'broken model');
    await page.locator('.note.error', { hasText: /^The run failed: / }).waitFor();
    await runEnded(page);
    await screenshot(page, 'chat-error');
    await page.reload();
    await page.locator('.note.error', { hasText: /^The last run failed: / }).waitFor();
    await assertClean(page, watch);
    await context.close();
  });
});
