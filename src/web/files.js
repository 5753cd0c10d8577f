// A chat's files: the panel that lists what the agent presented and what
// was uploaded, previews them, downloads them and edits text outputs; and
// uploads with the thread's limits checked first.
//
// Previews never run a file's content: Markdown is sanitized (dom.js),
// text, code and CSV are shown as text, images are <img> from this origin,
// and HTML and SVG are shown only in an <iframe sandbox> without
// allow-scripts or allow-same-origin, which also inherits the page's
// Content-Security-Policy (no script, nothing loaded from elsewhere).
import { api, ApiError, artifactUrl, threadPath } from './api.js';
import { confirmDialog, fmtBytes, h, icon, markdown, replace, sha256Hex, toast } from './dom.js';

// Bytes of a file a preview reads, and the largest file that can be
// edited: the gateway's limit on an artifact edit (ARTIFACT_EDIT_MAX_BYTES).
const PREVIEW_MAX = 2 * 1024 * 1024;
// Rows and columns of a CSV preview.
const CSV_ROWS = 500;
const CSV_COLS = 50;
const OUTPUTS = '/mnt/user-data/outputs/';
const TOOL_RESULTS = `${OUTPUTS}.tool-results/`;
// Upload names the gateway refuses (docs/http-api.md, Uploads): checked
// first so that the rest of the files can still go.
const NAME_BYTES_MAX = 255;
// Files one message may name as its attachments (the gateway's
// AGENT_MESSAGE_FILES_MAX: a message naming more is refused).
export const FILES_PER_MESSAGE = 100;

const MARKDOWN = new Set(['md', 'markdown']);
const CSV = new Set(['csv', 'tsv']);
const IMAGE = new Set(['png', 'jpg', 'jpeg', 'gif', 'webp', 'bmp', 'ico']);
const FRAME = new Set(['html', 'htm', 'xhtml', 'svg']);

let panels = 0;

const extOf = (p) => (/\.([A-Za-z0-9]+)$/.exec(p)?.[1] || '').toLowerCase();
const baseName = (p) => p.split('/').pop();

/** Where the agent saved the whole output of a tool call it truncated. */
export function toolResultPath(callId) {
  const safe = [...String(callId)].slice(0, 79).map((c) => (/[A-Za-z0-9_-]/.test(c) ? c : '_')).join('');
  return `${TOOL_RESULTS}${safe || 'output'}.txt`;
}

/** Why the gateway would refuse an upload's name, or null. */
export function uploadNameProblem(name) {
  if (!name || name === '.' || name === '..') return 'not a file name';
  if (new TextEncoder().encode(name).length > NAME_BYTES_MAX) return `the name is longer than ${NAME_BYTES_MAX} bytes`;
  if (name.includes('\\')) return 'the name holds a backslash';
  if (/[\u0000-\u001f\u007f]/.test(name)) return 'the name holds a control character';
  if (/^\.upload-.*\.part$/.test(name) || name.startsWith('.fawn-tmp-')) return 'the name is reserved for files being written';
  return null;
}

/** CSV or TSV text as rows of cells (quotes as RFC 4180 has them). */
export function parseDelimited(text, sep, maxRows = CSV_ROWS) {
  const rows = [];
  let row = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length && rows.length < maxRows; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"' && cell === '') quoted = true;
    else if (c === sep) {
      row.push(cell);
      cell = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(cell);
      rows.push(row);
      row = [];
      cell = '';
    } else cell += c;
  }
  if ((cell || row.length) && rows.length < maxRows) rows.push([...row, cell]);
  return rows;
}

export class FilesPanel {
  constructor(chat) {
    this.chat = chat;
    this.artifacts = [];
    this.uploads = [];
    this.busy = false;
    this.current = null; // the file open: {path, bytes, total, whole, text}
    this.presentedList = h('ul', { class: 'file-list' });
    this.uploadList = h('ul', { class: 'file-list' });
    this.listView = h('div', { class: 'panel-list' },
      h('h3', { text: 'Presented by the agent' }), this.presentedList,
      h('h3', { text: 'Uploads' }), this.uploadList);
    this.previewHead = h('div', { class: 'preview-head' });
    this.previewBody = h('div', { class: 'preview-body' });
    this.previewView = h('div', { class: 'preview', hidden: true }, this.previewHead, this.previewBody);
    this.el = h('aside', { class: 'files-panel', id: `files-panel-${++panels}`, hidden: true, 'aria-label': 'Files' },
      h('div', { class: 'panel-head' },
        h('h2', { text: 'Files' }),
        h('button', { type: 'button', class: 'icon', 'aria-label': 'Close files', onclick: () => this.toggle(false) }, icon('close'))),
      this.listView, this.previewView);
    this.el.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && !e.target.closest('textarea')) this.toggle(false);
    });
    this.renderLists();
  }

  get threadId() {
    return this.chat.threadId;
  }

  toggle(open = this.el.hidden) {
    this.el.hidden = !open;
    this.chat.filesBtn.setAttribute('aria-expanded', String(open));
    if (open) this.el.querySelector('button, a')?.focus();
    else this.chat.filesBtn.focus();
  }

  setBusy(busy) {
    this.busy = busy;
    for (const b of this.previewHead.querySelectorAll('.edit')) b.disabled = busy;
  }

  setArtifacts(paths) {
    this.artifacts = paths.filter((p) => typeof p === 'string');
    this.renderLists();
  }

  async refreshUploads() {
    if (!this.chat.exists) return;
    try {
      const r = await api('GET', `${threadPath(this.threadId)}/uploads/list`);
      this.uploads = Array.isArray(r?.files) ? r.files : [];
      this.renderLists();
    } catch {
      // the list stays as it was
    }
  }

  renderLists() {
    const count = this.artifacts.length + this.uploads.length;
    this.chat.filesBtn?.replaceChildren(`Files${count ? ` (${count})` : ''}`);
    replace(this.presentedList, this.artifacts.length
      ? this.artifacts.map((p) => this.item(p, p.startsWith(OUTPUTS) ? p.slice(OUTPUTS.length) : p))
      : h('li', { class: 'muted small', text: 'Nothing yet.' }));
    replace(this.uploadList, this.uploads.length
      ? this.uploads.map((f) => this.item(String(f.virtual_path || ''), String(f.filename ?? ''), fmtBytes(f.size)))
      : h('li', { class: 'muted small', text: 'No uploads.' }));
  }

  item(path, label, detail = '') {
    return h('li', {},
      h('button', { type: 'button', class: 'file', title: path, onclick: () => this.open(path) },
        h('span', { class: 'filename', text: label }),
        detail ? h('span', { class: 'muted small', text: detail }) : null),
      h('a', { class: 'icon', href: artifactUrl(this.threadId, path, true), download: baseName(path), 'aria-label': `Download ${label}`, title: 'Download' }, icon('download')));
  }

  // ---- uploads ----

  /** The upload limits (the same for every thread: the gateway's
   *  configuration, answered for any id, so a new chat asks before its
   *  thread exists), asked once and kept by the app. */
  async limits() {
    const app = this.chat.app;
    if (!app.uploadLimits) app.uploadLimits = await api('GET', `${threadPath(this.threadId)}/uploads/limits`);
    this.chat.showLimits(app.uploadLimits);
    return app.uploadLimits;
  }

  /** Uploads the files of list that the limits let through, at most room
   *  of them (what the message being written may still name), in one
   *  request. Resolves {uploaded: [file], skipped: [{name, reason}]}. */
  async upload(list, room = FILES_PER_MESSAGE) {
    const skipped = [];
    let limits;
    try {
      limits = await this.limits();
    } catch (e) {
      return { uploaded: [], skipped: list.map((f) => ({ name: f.name, reason: e.message })) };
    }
    const chosen = [];
    let total = 0;
    for (const f of list) {
      const bad = uploadNameProblem(f.name);
      if (bad) skipped.push({ name: f.name, reason: bad });
      else if (f.size > limits.max_file_size) skipped.push({ name: f.name, reason: `larger than ${fmtBytes(limits.max_file_size)}, the most a file may have` });
      else if (chosen.length >= room) skipped.push({ name: f.name, reason: `a message names at most ${FILES_PER_MESSAGE} files: send the ones attached first` });
      else if (chosen.length >= limits.max_files) skipped.push({ name: f.name, reason: `one upload holds at most ${limits.max_files} files` });
      else if (total + f.size > limits.max_total_size) skipped.push({ name: f.name, reason: `the files together would pass ${fmtBytes(limits.max_total_size)}` });
      else {
        chosen.push(f);
        total += f.size;
      }
    }
    if (!chosen.length) return { uploaded: [], skipped };
    const form = new FormData();
    for (const f of chosen) form.append('files', f, f.name);
    const note = toastless(this.chat, `Uploading ${chosen.length} file${chosen.length === 1 ? '' : 's'} (${fmtBytes(total)})…`);
    try {
      const r = await api('POST', `${threadPath(this.threadId)}/uploads`, form);
      for (const name of r.skipped_files || []) {
        skipped.push({ name: String(name), reason: 'not written: the file of that name in uploads is a link or not a regular file' });
      }
      await this.refreshUploads();
      return { uploaded: Array.isArray(r.files) ? r.files : [], skipped };
    } catch (e) {
      return { uploaded: [], skipped: skipped.concat(chosen.map((f) => ({ name: f.name, reason: e.message }))) };
    } finally {
      note.remove();
    }
  }

  // ---- preview ----

  async open(path) {
    this.toggle(true);
    this.listView.hidden = true;
    this.previewView.hidden = false;
    const back = h('button', { type: 'button', class: 'icon', 'aria-label': 'Back to the file list', onclick: () => this.close() }, icon('back'));
    replace(this.previewHead, back, h('span', { class: 'filename', title: path, text: baseName(path) }));
    replace(this.previewBody, h('p', { class: 'muted', text: 'Loading…' }));
    back.focus();
    this.current = { path };
    const ext = extOf(path);
    try {
      if (IMAGE.has(ext)) return this.showImage(path);
      const file = await this.fetch(path);
      if (this.current?.path !== path) return;
      this.current = { path, ...file };
      this.render();
    } catch (e) {
      if (this.current?.path === path) replace(this.previewBody, h('p', { class: 'note error', text: e.message }));
    }
  }

  close() {
    this.current = null;
    this.previewView.hidden = true;
    this.listView.hidden = false;
    this.listView.querySelector('button')?.focus();
  }

  /** The first PREVIEW_MAX bytes of a file: {bytes, total, whole, text}
   *  (text null when they are not UTF-8 or hold NUL). */
  async fetch(path) {
    const res = await api('GET', artifactUrl(this.threadId, path), undefined,
      { raw: true, headers: { Range: `bytes=0-${PREVIEW_MAX - 1}` }, accept: [416] });
    const bytes = res.status === 416 ? new Uint8Array(0) : new Uint8Array(await res.arrayBuffer());
    let total = bytes.length;
    const range = /\/(\d+)$/.exec(res.headers.get('Content-Range') || '');
    if (res.status === 206 && range) total = Number(range[1]);
    let text = null;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      if (text.includes('\u0000')) text = null;
    } catch {
      // a partial last character, or not text
      if (bytes.length < total) text = new TextDecoder().decode(bytes);
    }
    return { bytes, total, whole: bytes.length >= total, text };
  }

  head(extra = []) {
    const c = this.current;
    const edit = c.whole && c.text !== null && c.path.startsWith(OUTPUTS) && !c.path.startsWith(TOOL_RESULTS)
      ? h('button', { type: 'button', class: 'edit', text: 'Edit', disabled: this.busy, onclick: () => this.edit() }) : null;
    replace(this.previewHead,
      h('button', { type: 'button', class: 'icon', 'aria-label': 'Back to the file list', onclick: () => this.close() }, icon('back')),
      h('span', { class: 'filename', title: c.path, text: baseName(c.path) }),
      h('span', { class: 'spacer' }), extra, edit,
      h('a', { class: 'button', href: artifactUrl(this.threadId, c.path, true), download: baseName(c.path), text: 'Download' }));
  }

  showImage(path) {
    this.current = { path, whole: false, text: null };
    this.head();
    replace(this.previewBody, h('img', { class: 'image-preview', src: artifactUrl(this.threadId, path), alt: baseName(path) }));
  }

  render() {
    const c = this.current;
    this.head();
    const ext = extOf(c.path);
    const parts = [];
    if (!c.whole) parts.push(h('p', { class: 'note warn', text: `Showing the first ${fmtBytes(c.bytes.length)} of ${fmtBytes(c.total)}; download the file to see all of it.` }));
    if (c.text === null) {
      parts.push(h('p', { class: 'muted', text: `${fmtBytes(c.total)} of binary data: no preview. Download it to open it.` }));
    } else if (FRAME.has(ext)) {
      parts.push(h('iframe', {
        sandbox: '', srcdoc: c.text, class: 'frame-preview', title: `Preview of ${baseName(c.path)} (scripts disabled)`, referrerpolicy: 'no-referrer',
      }));
      parts.push(h('p', { class: 'muted small', text: 'Shown without its scripts, styles or remote content. Download it to see it whole.' }));
    } else if (MARKDOWN.has(ext)) {
      parts.push(h('div', { class: 'md' }, markdown(c.text, this.threadId)));
    } else if (CSV.has(ext)) {
      parts.push(this.table(c.text, ext === 'tsv' ? '\t' : ','));
    } else {
      parts.push(h('pre', { class: 'text-preview', text: c.text }));
    }
    replace(this.previewBody, parts);
  }

  table(text, sep) {
    const rows = parseDelimited(text, sep);
    const cut = (r) => r.slice(0, CSV_COLS);
    const [first = [], ...rest] = rows;
    return h('div', { class: 'table-wrap' },
      h('table', { class: 'csv' },
        h('thead', {}, h('tr', {}, cut(first).map((c) => h('th', { text: c })))),
        h('tbody', {}, rest.map((r) => h('tr', {}, cut(r).map((c) => h('td', { text: c })))))),
      rows.length >= CSV_ROWS ? h('p', { class: 'muted small', text: `The first ${CSV_ROWS} rows.` }) : null);
  }

  // ---- editing ----

  edit() {
    const c = this.current;
    const area = h('textarea', { class: 'editor', value: c.text, 'aria-label': `Contents of ${baseName(c.path)}`, spellcheck: 'false' });
    const status = h('div', { class: 'edit-status', 'aria-live': 'polite' });
    const save = h('button', { type: 'button', class: 'primary', text: 'Save', onclick: () => this.save(area, status, save) });
    const cancel = h('button', { type: 'button', text: 'Cancel', onclick: () => this.render() });
    replace(this.previewHead,
      h('span', { class: 'filename', title: c.path, text: `Editing ${baseName(c.path)}` }),
      h('span', { class: 'spacer' }), cancel, save);
    replace(this.previewBody, status, area);
    area.addEventListener('keydown', (e) => {
      if (e.key === 's' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        save.click();
      }
    });
    area.focus();
  }

  /** PUT with the SHA-256 of the bytes this edit started from: a file
   *  changed since (412) is shown as a conflict and the edit is kept. */
  async save(area, status, button) {
    const c = this.current;
    button.disabled = true;
    try {
      const expected = await sha256Hex(c.bytes);
      const r = await api('PUT', artifactUrl(this.threadId, c.path), { content: area.value, expected_sha256: expected });
      c.bytes = new TextEncoder().encode(area.value);
      c.text = area.value;
      c.total = r?.size ?? c.bytes.length;
      toast(`Saved ${baseName(c.path)}`);
      this.render();
    } catch (e) {
      button.disabled = false;
      if (e instanceof ApiError && e.status === 412) this.conflict(status, area);
      else replace(status, h('p', { class: 'note error', role: 'alert', text: `Not saved: ${e.message}` }));
    }
  }

  conflict(status, area) {
    const c = this.current;
    replace(status, h('div', { class: 'note error conflict', role: 'alert' },
      h('strong', { text: 'Conflict: the file changed since you opened it.' }),
      h('p', { text: 'Your text is still below and was not saved. Load the current version (your edit is lost), or save yours over it.' }),
      h('div', { class: 'row' },
        h('button', {
          type: 'button', text: 'Load the current version',
          onclick: async () => {
            if (await confirmDialog('Discard your edit?', 'Your changes to this file will be lost.', 'Discard', 'danger')) this.open(c.path);
          },
        }),
        h('button', {
          type: 'button', class: 'danger', text: 'Save mine over it',
          onclick: async () => {
            try {
              const now = await this.fetch(c.path);
              if (!now.whole) throw new Error('the file is now too large to edit');
              c.bytes = now.bytes;
              await this.save(area, status, status.querySelector('.danger'));
            } catch (e) {
              replace(status, h('p', { class: 'note error', role: 'alert', text: `Not saved: ${e.message}` }));
            }
          },
        }))));
  }
}

/** A passing note in the chat's notes while something goes on. */
function toastless(chat, text) {
  const el = h('div', { class: 'note info', role: 'status', text });
  chat.notes.append(el);
  return el;
}
