// One chat: the conversation of a thread, its runs streaming as they
// happen, the composer, and the thread's files panel.
//
// The conversation is the thread state's messages (GET /state). A run is
// started with POST /runs/stream (messages-tuple and custom events,
// on_disconnect continue: a reload does not stop it) and its events are
// applied as they come: the model's text chunk by chunk, each tool call as
// a card that its result completes. Message ids make every event
// idempotent, so a page that joins a run late (a reload) reads the state,
// then replays the run's events from the first, skipping the messages the
// state already holds whole. A stream that breaks is joined again with
// Last-Event-ID; a gap (the events were dropped) reloads the state. When
// the run ends the state is read again and is what stays on screen.
import { api, ApiError, events, threadPath } from './api.js';
import { fmtDuration, h, icon, markdown, randomId, replace, toast } from './dom.js';
import { FILES_PER_MESSAGE, FilesPanel, toolResultPath } from './files.js';
import { threadTitle, valuesTitle } from './threads.js';

// Characters of a tool's output shown before "Show all".
const OUTPUT_SHOWN = 3000;
// Waits before each attempt to join a broken stream again, then the last
// one repeated, up to RECONNECT_ATTEMPTS attempts (about four minutes).
const RECONNECT_DELAYS_MS = [500, 1000, 2000, 4000, 8000];
const RECONNECT_ATTEMPTS = 35;
const ACTIVE = ['pending', 'running'];
const STOP_REASONS = {
  loop_capped: 'The run was stopped: the agent kept repeating the same tool call.',
  model_length_capped: 'The run was stopped: the reply reached the model\'s length limit.',
  safety_capped: 'The run was stopped by the model\'s content filter.',
};
const MODEL_KEY = 'fawn.model';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The text of a message's content: a string, or its text parts. */
export function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content.map((p) => (typeof p === 'string' ? p : p?.type === 'text' && typeof p.text === 'string' ? p.text : '')).join('\n');
  }
  return '';
}

/** A short line that says what a tool call does. */
function callSummary(call) {
  const a = call.args && typeof call.args === 'object' ? call.args : {};
  const first = [a.description, a.command, a.path, a.pattern, a.question, a.url, a.query, Array.isArray(a.filepaths) ? a.filepaths.join(', ') : null]
    .find((v) => typeof v === 'string' && v.trim());
  const line = (first || '').split('\n')[0];
  return line.length > 120 ? `${line.slice(0, 117)}…` : line;
}

export class ChatView {
  constructor(app, threadId) {
    this.app = app;
    // A new chat's thread id is chosen now and the thread made at its
    // first message or upload.
    this.threadId = threadId || randomId();
    this.exists = !!threadId;
    this.thread = null;
    this.msgs = [];
    this.views = new Map(); // message id → {el, md}
    this.results = new Map(); // tool_call_id → tool message
    this.cards = new Map(); // tool_call_id → card element
    this.settled = new Set(); // ids of messages the state holds whole
    this.run = null; // {id, lastEventId, stopping}
    this.alive = true;
    this.abort = new AbortController();
    this.attachments = [];
    this.pendingRender = new Set();
    this.build();
  }

  build() {
    this.titleEl = h('h1', { class: 'chat-title', text: this.exists ? 'Loading…' : 'New chat' });
    this.files = new FilesPanel(this);
    this.filesBtn = h('button', {
      type: 'button', class: 'files-toggle', 'aria-expanded': 'false', 'aria-controls': this.files.el.id,
      onclick: () => this.files.toggle(),
    }, 'Files');
    this.conv = h('div', { class: 'conversation', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'polite' });
    this.notes = h('div', { class: 'run-notes', 'aria-live': 'polite' });
    this.working = h('div', { class: 'working', hidden: true, role: 'status' }, h('span', { class: 'pulse' }), 'Working…');
    this.scroller = h('div', { class: 'scroller' }, this.conv, this.notes, this.working);
    this.buildComposer();
    this.dropHint = h('div', { class: 'drop-hint', hidden: true, text: 'Drop files to upload them to this chat' });
    this.el = h('section', { class: 'chat', 'aria-label': 'Chat' },
      h('header', { class: 'chat-head' }, this.titleEl, this.filesBtn),
      h('div', { class: 'chat-body' }, h('div', { class: 'chat-main' }, this.scroller, this.composer), this.files.el),
      this.dropHint);
    this.el.addEventListener('dragover', (e) => this.onDrag(e));
    this.el.addEventListener('dragleave', (e) => {
      if (!this.el.contains(e.relatedTarget)) this.dropHint.hidden = true;
    });
    this.el.addEventListener('drop', (e) => this.onDrop(e));
  }

  buildComposer() {
    this.input = h('textarea', {
      rows: 1, placeholder: 'Message the agent…', 'aria-label': 'Message', title: 'Enter sends; Shift+Enter starts a new line',
      onkeydown: (e) => {
        if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          this.composer.requestSubmit();
        }
      },
      oninput: () => this.fitInput(),
    });
    this.picker = h('input', { type: 'file', multiple: true, hidden: true, onchange: () => this.upload([...this.picker.files]) });
    this.attachBtn = h('button', { type: 'button', class: 'icon', 'aria-label': 'Attach files', title: 'Attach files', onclick: () => this.picker.click() }, icon('attach'));
    this.modelSel = h('select', { 'aria-label': 'Model', class: 'model', onchange: () => localStorage.setItem(MODEL_KEY, this.modelSel.value) });
    this.fillModels();
    this.limitsEl = h('span', { class: 'limits muted small' });
    this.stopBtn = h('button', { type: 'button', class: 'danger', text: 'Stop', hidden: true, onclick: () => this.stop() });
    this.sendBtn = h('button', { type: 'submit', class: 'primary', text: 'Send' });
    this.chips = h('div', { class: 'attachments' });
    this.skipped = h('div', { class: 'skipped', 'aria-live': 'polite' });
    this.composer = h('form', {
      class: 'composer', 'aria-label': 'Message',
      onsubmit: (e) => {
        e.preventDefault();
        this.send(this.input.value);
      },
    }, this.skipped, this.chips, this.input,
    h('div', { class: 'composer-row' }, this.attachBtn, this.picker, this.modelSel, this.limitsEl,
      h('span', { class: 'spacer' }), this.stopBtn, this.sendBtn));
  }

  fillModels() {
    const models = this.app.models || [];
    const saved = localStorage.getItem(MODEL_KEY);
    replace(this.modelSel, models.map((m) => h('option', { value: m.name, text: m.display_name || m.name, selected: m.name === saved })));
    this.modelSel.hidden = models.length === 0;
  }

  fitInput() {
    this.input.style.height = 'auto';
    this.input.style.height = `${Math.min(this.input.scrollHeight + 2, 240)}px`;
  }

  destroy() {
    this.alive = false;
    this.abort.abort();
  }

  focus() {
    this.input.focus();
  }

  // ---- loading ----

  async load() {
    this.files.limits().catch((e) => {
      if (this.alive) toast(`Could not read the upload limits: ${e.message}`, 'error');
    });
    if (!this.exists) {
      this.renderAll();
      return;
    }
    try {
      this.thread = await api('GET', threadPath(this.threadId), undefined, { signal: this.abort.signal });
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        this.notFound();
        return;
      }
      throw e;
    }
    this.setTitle(threadTitle(this.thread));
    await this.reloadState();
    this.files.refreshUploads();
    const runs = await api('GET', `${threadPath(this.threadId)}/runs?limit=1`, undefined, { signal: this.abort.signal });
    const last = runs?.[0];
    if (last && ACTIVE.includes(last.status)) this.join(last.run_id);
    else if (last?.status === 'error' && last.error) this.note('error', `The last run failed: ${last.error}`);
  }

  notFound() {
    this.exists = false;
    this.setTitle('Chat not found');
    replace(this.conv, h('div', { class: 'empty' },
      h('p', { text: 'This chat does not exist, or it is not yours.' }),
      h('a', { href: '#/', class: 'button', text: 'Start a new chat' })));
    this.composer.hidden = true;
    this.filesBtn.hidden = true;
  }

  async reloadState() {
    const st = await api('GET', `${threadPath(this.threadId)}/state`, undefined, { signal: this.abort.signal });
    this.applyState(st?.values || {});
  }

  /** Shows the messages of a state (all of them: a state is whole). */
  applyState(values) {
    this.msgs = Array.isArray(values.messages) ? values.messages.filter((m) => m && typeof m === 'object') : [];
    this.omitted = Number.isInteger(values.messages_omitted) ? values.messages_omitted : 0;
    this.settled = new Set(this.msgs.map((m) => m.id));
    this.results = new Map(this.msgs.filter((m) => m.type === 'tool').map((m) => [m.tool_call_id, m]));
    const title = valuesTitle(values);
    if (title) this.setTitle(title);
    this.files.setArtifacts(Array.isArray(values.artifacts) ? values.artifacts : []);
    this.renderAll();
  }

  setTitle(title) {
    this.title = title;
    this.titleEl.textContent = title;
    document.title = `${title} · fawn`;
  }

  // ---- rendering ----

  renderAll() {
    const stick = this.nearBottom();
    this.views.clear();
    this.cards.clear();
    const parts = [];
    if (this.omitted) parts.push(h('p', { class: 'muted small center', text: `${this.omitted} older messages are not shown.` }));
    if (!this.msgs.length && !this.run) {
      parts.push(h('div', { class: 'empty' },
        h('h2', { text: 'What shall we work on?' }),
        h('p', { class: 'muted', text: 'The agent can run commands and write files in this chat\'s own sandbox. Drop files here or attach them below to upload them; the agent finds them in /mnt/user-data/uploads. Enter sends a message, Shift+Enter starts a new line.' })));
    }
    for (const m of this.msgs) if (m.type !== 'tool') parts.push(this.view(m));
    replace(this.conv, parts);
    for (const m of this.msgs) {
      if (m.type === 'tool' && !this.cards.has(m.tool_call_id)) this.conv.append(this.orphanCard(m));
    }
    this.refreshClarify();
    if (stick) this.toBottom();
  }

  view(m) {
    let el;
    if (m.type === 'human') {
      el = h('div', { class: 'msg human' }, h('div', { class: 'bubble', text: textOf(m.content) }), this.fileChips(m));
      this.views.set(m.id, { el });
    } else if (m.type === 'ai') {
      const md = h('div', { class: 'md' });
      const tools = h('div', { class: 'tools' });
      el = h('div', { class: 'msg ai' }, md, tools);
      this.views.set(m.id, { el, md, tools });
      this.renderAi(m);
    } else {
      el = h('div', { class: 'msg system muted small', text: textOf(m.content) });
      this.views.set(m.id, { el });
    }
    return el;
  }

  fileChips(m) {
    const files = m.additional_kwargs?.files;
    if (!Array.isArray(files) || !files.length) return null;
    return h('div', { class: 'chips' }, files.map((f) => h('span', { class: 'chip' }, icon('file'), String(f?.filename ?? ''))));
  }

  renderAi(m) {
    const v = this.views.get(m.id);
    if (!v) return;
    const text = textOf(m.content);
    replace(v.md, text ? markdown(text, this.threadId) : null);
    v.md.hidden = !text;
    const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
    for (const call of calls) {
      if (!call || typeof call.id !== 'string') continue;
      const old = this.cards.get(call.id);
      const card = this.card(call);
      if (old?.isConnected) old.replaceWith(card);
      else v.tools.append(card);
    }
  }

  /** Renders the messages whose text changed at most once per frame. */
  scheduleRender(m) {
    this.pendingRender.add(m.id);
    if (this.pendingRender.size > 1) return;
    requestAnimationFrame(() => {
      const stick = this.nearBottom();
      for (const id of this.pendingRender) {
        const msg = this.msgs.find((x) => x.id === id);
        if (msg) this.renderAi(msg);
      }
      this.pendingRender.clear();
      if (stick) this.toBottom();
    });
  }

  card(call) {
    const res = this.results.get(call.id);
    const el = call.name === 'ask_clarification' ? this.clarifyCard(call, res) : this.toolCard(call, res);
    this.cards.set(call.id, el);
    return el;
  }

  toolCard(call, res) {
    const st = res?.additional_kwargs?.tool_status || {};
    const status = res ? String(st.status || res.status || 'success') : this.run ? 'running' : 'no result';
    const meta = [status];
    if (Number.isInteger(st.exit_code)) meta.push(`exit ${st.exit_code}`);
    if (Number.isFinite(st.duration_ms)) meta.push(fmtDuration(st.duration_ms));
    const body = h('div', { class: 'tool-body' },
      h('div', { class: 'label', text: 'Arguments' }),
      h('pre', { class: 'args', text: JSON.stringify(call.args ?? {}, null, 2) }));
    if (res) body.append(...this.output(call, res, st));
    return h('details', { class: `tool status-${status.replace(/[^a-z_ ]/g, '').replace(/ /g, '-')}`, dataset: { call: call.id } },
      h('summary', {},
        h('span', { class: 'dot', 'aria-hidden': 'true' }),
        h('span', { class: 'tool-name', text: String(call.name ?? '') }),
        h('span', { class: 'tool-summary', text: callSummary(call) }),
        h('span', { class: 'tool-meta', text: meta.join(' · ') })),
      body);
  }

  output(call, res, st) {
    const text = textOf(res.content);
    const pre = h('pre', { class: 'output', text: text.length > OUTPUT_SHOWN ? `${text.slice(0, OUTPUT_SHOWN)}…` : text || '(no output)' });
    const parts = [h('div', { class: 'label', text: st.error_type ? `Output (${st.error_type})` : 'Output' }), pre];
    const actions = h('div', { class: 'tool-actions' });
    if (text.length > OUTPUT_SHOWN) {
      actions.append(h('button', {
        type: 'button', class: 'link', text: `Show all ${text.length} characters`,
        onclick: (e) => {
          pre.textContent = text;
          e.target.remove();
        },
      }));
    }
    // Only an output the agent saved says where (a page cut at its size
    // limit is truncated too, with nothing saved).
    if (st.truncated && text.includes(toolResultPath(call.id))) {
      actions.append(h('button', {
        type: 'button', class: 'link', text: 'Open the saved full output',
        onclick: () => this.files.open(toolResultPath(call.id)),
      }));
    }
    if (actions.childElementCount) parts.push(actions);
    return parts;
  }

  orphanCard(m) {
    return this.toolCard({ id: m.tool_call_id, name: m.name, args: {} }, m);
  }

  /** A question the agent asked (ask_clarification): its options and a
   *  field answer it in place, as the next message. */
  clarifyCard(call) {
    const a = call.args && typeof call.args === 'object' ? call.args : {};
    const options = Array.isArray(a.options) ? a.options.filter((o) => typeof o === 'string') : [];
    const field = h('input', { type: 'text', 'aria-label': 'Your answer', placeholder: 'Your answer' });
    const el = h('div', { class: 'clarify', role: 'group', 'aria-label': 'Question from the agent', dataset: { call: call.id } },
      h('div', { class: 'label', text: 'The agent asks' }),
      typeof a.context === 'string' && a.context ? h('p', { class: 'muted', text: a.context }) : null,
      h('p', { class: 'question', text: typeof a.question === 'string' ? a.question : '' }),
      options.length ? h('div', { class: 'options' }, options.map((o) => h('button', { type: 'button', text: o, onclick: () => this.send(o) }))) : null,
      h('form', {
        class: 'answer',
        onsubmit: (e) => {
          e.preventDefault();
          if (field.value.trim()) this.send(field.value);
        },
      }, field, h('button', { type: 'submit', text: 'Answer' })));
    return el;
  }

  /** Enables the questions that are still open: the last message is the
   *  one that asked, and no run is going. */
  refreshClarify() {
    const lastAi = [...this.msgs].reverse().find((m) => m.type !== 'tool');
    for (const [id, el] of this.cards) {
      if (!el.classList.contains('clarify')) continue;
      const open = !this.run && lastAi?.type === 'ai' && (lastAi.tool_calls || []).some((c) => c?.id === id);
      el.classList.toggle('answered', !open);
      for (const c of el.querySelectorAll('button, input')) c.disabled = !open;
    }
  }

  note(kind, text) {
    const stick = this.nearBottom();
    this.notes.append(h('div', { class: `note ${kind}`, role: kind === 'error' ? 'alert' : null, text }));
    if (stick) this.toBottom();
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  toBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  // ---- applying a run's events ----

  upsert(m) {
    const i = this.msgs.findIndex((x) => x.id === m.id);
    if (i >= 0) this.msgs[i] = m;
    else this.msgs.push(m);
    return i < 0;
  }

  onChunk(c) {
    if (typeof c.id !== 'string' || this.settled.has(c.id)) return;
    let m = this.msgs.find((x) => x.id === c.id);
    if (!m) {
      m = { type: 'ai', id: c.id, content: '', tool_calls: [] };
      this.onMessage(m);
    }
    if (typeof c.content === 'string') m.content = textOf(m.content) + c.content;
    if (Array.isArray(c.tool_calls) && c.tool_calls.length) {
      m.tool_calls = c.tool_calls;
      this.renderAi(m);
      this.refreshClarify();
    } else {
      this.scheduleRender(m);
    }
  }

  onMessage(m) {
    if (!m || typeof m !== 'object' || typeof m.id !== 'string') return;
    if (m.type === 'tool') {
      this.results.set(m.tool_call_id, m);
      this.upsert(m);
      const old = this.cards.get(m.tool_call_id);
      if (old) {
        const call = this.callOf(m.tool_call_id);
        const fresh = this.card(call || { id: m.tool_call_id, name: m.name, args: {} });
        old.replaceWith(fresh);
        if (old instanceof HTMLDetailsElement && old.open) fresh.open = true;
      } else {
        this.conv.append(this.orphanCard(m));
      }
      if (m.name === 'present_files') this.reloadArtifacts();
      return;
    }
    const stick = this.nearBottom();
    const added = this.upsert(m);
    const v = this.views.get(m.id);
    if (added || !v) {
      this.conv.querySelector('.empty')?.remove();
      this.conv.append(this.view(m));
    } else if (m.type === 'ai') {
      this.renderAi(m);
    } else {
      v.el.replaceWith(this.view(m));
    }
    this.refreshClarify();
    if (stick || m.type === 'human') this.toBottom();
  }

  callOf(id) {
    for (const m of this.msgs) for (const c of m.tool_calls || []) if (c?.id === id) return c;
    return null;
  }

  async reloadArtifacts() {
    try {
      const st = await api('GET', `${threadPath(this.threadId)}/state`, undefined, { signal: this.abort.signal });
      this.files.setArtifacts(Array.isArray(st?.values?.artifacts) ? st.values.artifacts : []);
    } catch {
      // shown at the end of the run
    }
  }

  onCustom(d) {
    if (d?.type === 'llm_retry') {
      this.note('retry', `Model call ${d.attempt} of ${d.max_attempts} failed (${d.message || d.reason}); retrying in ${fmtDuration(d.wait_ms)}.`);
    } else if (d?.type === 'run_stopped' && d.stop_reason !== 'clarification') {
      this.note('info', STOP_REASONS[d.stop_reason] || `The run was stopped (${d.stop_reason}).`);
    }
  }

  /** Applies one event; 'end' and 'gap' are returned for the caller. */
  onEvent(ev) {
    const d = ev.data;
    switch (ev.event) {
      case 'metadata':
        if (this.run && !this.run.id && typeof d?.run_id === 'string') this.run.id = d.run_id;
        break;
      case 'messages':
        if (Array.isArray(d) && d[0]?.type === 'AIMessageChunk') this.onChunk(d[0]);
        else if (Array.isArray(d)) this.onMessage(d[0]);
        break;
      case 'values':
        if (d && Array.isArray(d.messages)) this.applyState(d);
        break;
      case 'updates':
        for (const node of Object.values(d || {})) for (const m of node?.messages || []) this.onMessage(m);
        break;
      case 'custom':
        this.onCustom(d);
        break;
      case 'error':
        this.note('error', `The run failed: ${d?.message || 'unknown error'}`);
        break;
      case 'gap':
      case 'end':
        return ev.event;
      default:
        break;
    }
    return null;
  }

  // ---- runs ----

  setRunning(on) {
    this.stopBtn.hidden = !on;
    this.stopBtn.disabled = false;
    this.stopBtn.textContent = 'Stop';
    this.sendBtn.disabled = on;
    this.working.hidden = !on;
    this.files.setBusy(on);
    this.refreshClarify();
  }

  startRun(id = null) {
    this.run = { id, lastEventId: null, stopping: false };
    this.setRunning(true);
    return this.run;
  }

  /** Follows the stream of run until it ends, joining it again when the
   *  connection breaks. */
  async follow(run, res) {
    for (let attempt = 0; this.alive && run === this.run;) {
      let outcome = 'broken';
      if (res) {
        try {
          outcome = await this.consume(run, res);
        } catch {
          if (!this.alive) return;
        }
      }
      if (outcome === 'end') return this.finish(run);
      if (outcome === 'gap') {
        await this.reloadState().catch(() => {});
        attempt = 0;
      } else if (res && outcome === 'broken') {
        attempt = 0; // it was connected: start the delays over
      }
      if (!run.id || attempt >= RECONNECT_ATTEMPTS) {
        this.note('error', 'The connection to the run was lost. Reload the page to see where it stands.');
        return this.finish(run);
      }
      this.working.lastChild.textContent = 'Reconnecting…';
      await sleep(RECONNECT_DELAYS_MS[Math.min(attempt, RECONNECT_DELAYS_MS.length - 1)]);
      attempt++;
      res = await this.openStream(run);
    }
  }

  /** Joins run's stream after the last event seen; null when it failed
   *  (the caller tries again), and the run ends here if it is gone. */
  async openStream(run) {
    if (!this.alive || run !== this.run) return null;
    try {
      const headers = run.lastEventId ? { 'Last-Event-ID': run.lastEventId } : {};
      const res = await api('GET', `${threadPath(this.threadId)}/runs/${encodeURIComponent(run.id)}/stream`, undefined,
        { raw: true, headers, signal: this.abort.signal });
      this.working.lastChild.textContent = 'Working…';
      return res;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        this.run = null;
        await this.finish(run);
      }
      return null;
    }
  }

  /** Reads events from res until the stream ends: 'end', 'gap' or 'broken'. */
  async consume(run, res) {
    for await (const ev of events(res)) {
      if (!this.alive || run !== this.run) return 'gone';
      if (ev.id !== null && /^\d+$/.test(ev.id)) run.lastEventId = ev.id;
      const outcome = this.onEvent(ev);
      if (outcome === 'gap') {
        const latest = ev.data?.latest_available_event_id;
        if (Number.isInteger(latest)) run.lastEventId = String(latest);
        return 'gap';
      }
      if (outcome === 'end') return 'end';
    }
    return 'broken';
  }

  async finish(run) {
    if (this.run === run) this.run = null;
    this.setRunning(false);
    if (!this.alive) return;
    if (run?.stopping) this.note('info', 'Stopped.');
    try {
      await this.reloadState();
      await this.reloadThread();
    } catch (e) {
      if (this.alive) toast(e.message, 'error');
    }
  }

  /** The thread read again after a run: the list shows its title (the
   *  run's, in values.title) and its last activity. */
  async reloadThread() {
    this.thread = await api('GET', threadPath(this.threadId), undefined, { signal: this.abort.signal });
    this.app.threads.update(this.thread);
  }

  async join(runId) {
    const run = this.startRun(runId);
    this.follow(run, await this.openStream(run));
  }

  /** Creates the thread of a new chat (on its first message or upload). */
  async ensureThread() {
    if (this.exists) return;
    this.thread = await api('POST', '/api/threads', { thread_id: this.threadId, metadata: {} });
    this.exists = true;
    this.app.threadCreated(this);
  }

  async send(raw) {
    const text = String(raw ?? '').trim();
    if (!text || this.run) return;
    try {
      await this.ensureThread();
    } catch (e) {
      toast(`Could not start the chat: ${e.message}`, 'error');
      return;
    }
    const files = this.attachments.map((f) => ({ filename: f.filename, size: f.size, path: f.virtual_path, status: 'uploaded' }));
    const human = { type: 'human', content: text, id: randomId(), additional_kwargs: files.length ? { files } : {} };
    replace(this.notes);
    if (!this.msgs.length) this.setTitle(text.length > 50 ? `${text.slice(0, 50)}...` : text);
    this.onMessage(human);
    const typed = this.input.value;
    this.input.value = '';
    this.fitInput();
    const run = this.startRun();
    const body = {
      assistant_id: 'lead_agent', input: { messages: [human] }, stream_mode: ['messages-tuple', 'custom'],
      on_disconnect: 'continue',
    };
    if (this.modelSel.value) body.context = { model_name: this.modelSel.value };
    let res;
    try {
      res = await api('POST', `${threadPath(this.threadId)}/runs/stream`, body, { raw: true, signal: this.abort.signal });
    } catch (e) {
      if (!this.alive) return;
      this.msgs = this.msgs.filter((m) => m.id !== human.id);
      this.input.value = typed;
      this.note('error', `The message was not sent: ${e.message}`);
      this.run = null;
      this.setRunning(false);
      this.renderAll();
      return;
    }
    this.attachments = [];
    this.renderChips();
    const loc = res.headers.get('Content-Location');
    if (loc) run.id = decodeURIComponent(loc.split('/').pop());
    this.follow(run, res);
  }

  async stop() {
    const run = this.run;
    if (!run?.id) return;
    run.stopping = true;
    this.stopBtn.disabled = true;
    this.stopBtn.textContent = 'Stopping…';
    try {
      await api('POST', `${threadPath(this.threadId)}/runs/${encodeURIComponent(run.id)}/cancel`, undefined, { accept: [409] });
    } catch (e) {
      toast(`Could not stop the run: ${e.message}`, 'error');
      this.stopBtn.disabled = false;
      this.stopBtn.textContent = 'Stop';
    }
  }

  // ---- uploads ----

  onDrag(e) {
    if (!e.dataTransfer?.types?.includes('Files') || this.composer.hidden) return;
    e.preventDefault();
    this.dropHint.hidden = false;
  }

  onDrop(e) {
    if (!e.dataTransfer?.files?.length || this.composer.hidden) return;
    e.preventDefault();
    this.dropHint.hidden = true;
    this.upload([...e.dataTransfer.files]);
  }

  async upload(list) {
    this.picker.value = '';
    if (!list.length) return;
    if (this.run) {
      toast('Files can be uploaded once the run has ended.', 'error');
      return;
    }
    try {
      await this.ensureThread();
    } catch (e) {
      toast(`Could not start the chat: ${e.message}`, 'error');
      return;
    }
    const { uploaded, skipped } = await this.files.upload(list, FILES_PER_MESSAGE - this.attachments.length);
    this.attachments.push(...uploaded.filter((f) => !this.attachments.some((a) => a.filename === f.filename)));
    this.renderChips();
    replace(this.skipped, skipped.length ? h('div', { class: 'note warn', role: 'alert' },
      h('strong', { text: `Not uploaded (${skipped.length}):` }),
      h('ul', {}, skipped.map((s) => h('li', {}, h('span', { class: 'filename', text: s.name }), ` — ${s.reason}`))),
      h('button', { type: 'button', class: 'link', text: 'Dismiss', onclick: () => replace(this.skipped) })) : null);
  }

  showLimits(limits) {
    const mib = (n) => `${Math.round(n / 1048576)} MiB`;
    this.limitsEl.textContent = `Up to ${limits.max_files} files, ${mib(limits.max_file_size)} each, ${mib(limits.max_total_size)} per upload`;
  }

  renderChips() {
    replace(this.chips, this.attachments.map((f) => h('span', { class: 'chip' },
      icon('file'), h('span', { text: f.filename }),
      h('button', {
        type: 'button', class: 'icon', 'aria-label': `Remove ${f.filename}`,
        onclick: () => {
          this.attachments = this.attachments.filter((a) => a !== f);
          this.renderChips();
        },
      }, icon('close')))));
  }

  titleChanged(title) {
    this.setTitle(title);
  }
}
