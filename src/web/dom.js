// Building the page safely. Every string that comes from a model, a tool,
// a file or another user reaches the DOM in one of two ways only: as text
// (h() sets textContent, never innerHTML), or as Markdown rendered by
// marked and then sanitized by DOMPurify with an allow-list of tags and
// attributes (markdown()). Links keep only http, https, mailto and
// same-origin targets and open with rel=noopener; images load only from
// this origin, so nothing a model writes can run a script or send a
// request elsewhere.

/** An element: props set attributes (class, text, on<event> handlers,
 *  dataset, boolean properties); children are nodes or strings (text). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (['value', 'checked', 'disabled', 'hidden', 'open', 'selected'].includes(k)) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, ...children);
  return el;
}

// Icons as SVG paths drawn with the text colour (24 x 24, stroked): the
// page's fonts may have no emoji, and an <svg> element needs no request.
const ICONS = {
  attach: 'M21 11.5l-8.6 8.6a5 5 0 0 1-7.1-7.1l8.6-8.6a3.3 3.3 0 0 1 4.7 4.7l-8.6 8.6a1.7 1.7 0 0 1-2.4-2.4l7.9-7.9',
  trash: 'M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13M10 11v6M14 11v6',
  pencil: 'M4 20h4L19 9l-4-4L4 16v4zM14 6l4 4',
  menu: 'M4 6h16M4 12h16M4 18h16',
  close: 'M6 6l12 12M18 6L6 18',
  back: 'M15 5l-7 7 7 7',
  download: 'M12 4v11M7 10l5 5 5-5M5 20h14',
  file: 'M7 3h7l5 5v13H7zM14 3v5h5',
};

/** An icon (aria-hidden: the button that holds it carries the label). */
export function icon(name) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('class', 'svg-icon');
  svg.setAttribute('aria-hidden', 'true');
  const path = document.createElementNS(ns, 'path');
  path.setAttribute('d', ICONS[name]);
  svg.append(path);
  return svg;
}

/** Appends children (nodes, strings as text, arrays; null skipped). */
export function append(el, ...children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replaces el's children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, ...children);
}

// ---- Markdown ----

// What sanitized Markdown may hold: structure and emphasis, links, images,
// tables. No forms, frames, media, style or class, no event handlers.
const MD_TAGS = ['p', 'br', 'hr', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'strong', 'em', 'del', 's', 'b', 'i',
  'code', 'pre', 'blockquote', 'ul', 'ol', 'li', 'a', 'img', 'table', 'thead', 'tbody', 'tr', 'th', 'td',
  'sup', 'sub', 'kbd'];
const MD_ATTRS = ['href', 'title', 'alt', 'src', 'align', 'start'];
const LINK_PROTOCOLS = ['http:', 'https:', 'mailto:'];
const USER_DATA = '/mnt/user-data/';

let mdThread = null; // the thread whose virtual paths links may name, during one render
let purifyReady = false;

function resolve(url) {
  try {
    return new URL(url, location.href);
  } catch {
    return null;
  }
}

/** A virtual path a model wrote (/mnt/user-data/...) as this thread's
 *  artifact URL; other values unchanged. */
function virtualToArtifact(value) {
  if (!mdThread || !value.startsWith(USER_DATA)) return value;
  const rel = value.slice(1).split('/').map((s) => encodeURIComponent(decodeURIComponentSafe(s))).join('/');
  return `/api/threads/${encodeURIComponent(mdThread)}/artifacts/${rel}`;
}

function decodeURIComponentSafe(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function checkLink(node) {
  const href = node.getAttribute('href');
  if (href === null) return;
  const url = resolve(virtualToArtifact(href));
  if (!url || !LINK_PROTOCOLS.includes(url.protocol)) {
    node.removeAttribute('href');
    return;
  }
  node.setAttribute('href', url.origin === location.origin ? url.pathname + url.search + url.hash : url.href);
  node.setAttribute('rel', 'noopener noreferrer');
  node.setAttribute('target', '_blank');
}

function checkImage(node) {
  const url = resolve(virtualToArtifact(node.getAttribute('src') || ''));
  if (url && url.origin === location.origin && url.protocol === location.protocol) {
    node.setAttribute('src', url.pathname + url.search);
    node.setAttribute('loading', 'lazy');
    return;
  }
  node.removeAttribute('src');
  node.setAttribute('alt', `[image not loaded: ${node.getAttribute('alt') || 'from another site'}]`);
}

function purifySetUp() {
  if (purifyReady) return;
  window.DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.nodeName === 'A') checkLink(node);
    else if (node.nodeName === 'IMG') checkImage(node);
  });
  purifyReady = true;
}

/** Markdown text as a sanitized DocumentFragment. threadId lets links and
 *  images that name /mnt/user-data/... paths reach that thread's files. */
export function markdown(text, threadId = null) {
  purifySetUp();
  const html = window.marked.parse(String(text ?? ''), { gfm: true, headerIds: false, mangle: false });
  mdThread = threadId;
  try {
    return window.DOMPurify.sanitize(html, {
      ALLOWED_TAGS: MD_TAGS,
      ALLOWED_ATTR: MD_ATTRS,
      ALLOW_DATA_ATTR: false,
      ALLOW_ARIA_ATTR: false,
      RETURN_DOM_FRAGMENT: true,
    });
  } finally {
    mdThread = null;
  }
}

// ---- formatting ----

export function fmtBytes(n) {
  if (!Number.isFinite(n)) return '';
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} ${n === 1 ? 'byte' : 'bytes'}` : `${n < 10 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

export function fmtDuration(ms) {
  if (!Number.isFinite(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** "just now", "5 min ago", "3 h ago", "yesterday", or the date. */
export function fmtAgo(iso, now = Date.now()) {
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return '';
  const s = Math.max(0, (now - t) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  if (s < 172800) return 'yesterday';
  return new Date(t).toLocaleDateString();
}

export function fmtTime(iso) {
  const t = Date.parse(iso);
  return Number.isFinite(t) ? new Date(t).toLocaleString() : '';
}

// ---- ids and hashes ----

/** A random UUID (v4); crypto.randomUUID needs a secure context, this does not. */
export function randomId() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/** The SHA-256 of bytes (a Uint8Array) as 64 lowercase hex digits. */
export async function sha256Hex(bytes) {
  if (globalThis.crypto?.subtle) {
    const d = await crypto.subtle.digest('SHA-256', bytes);
    return [...new Uint8Array(d)].map((v) => v.toString(16).padStart(2, '0')).join('');
  }
  return sha256Plain(bytes);
}

// SHA-256 (FIPS 180-4) for pages served over plain HTTP to another host,
// where crypto.subtle does not exist. Its constants are the fractional
// parts of the square and cube roots of the first primes.
const PRIMES = [];
for (let n = 2; PRIMES.length < 64; n++) if (PRIMES.every((p) => n % p)) PRIMES.push(n);
const frac32 = (x) => ((x - Math.floor(x)) * 2 ** 32) >>> 0;
const K = PRIMES.map((p) => frac32(Math.cbrt(p)));
const H0 = PRIMES.slice(0, 8).map((p) => frac32(Math.sqrt(p)));
const rotr = (x, n) => (x >>> n) | (x << (32 - n));

/** SHA-256 in plain JavaScript (exported for the tests to compare). */
export function sha256Plain(bytes) {
  const len = bytes.length;
  const padded = new Uint8Array((((len + 8) >> 6) + 1) << 6);
  padded.set(bytes);
  padded[len] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(len / 2 ** 29));
  view.setUint32(padded.length - 4, (len * 8) >>> 0);
  const hs = H0.slice();
  const w = new Uint32Array(64);
  for (let off = 0; off < padded.length; off += 64) {
    for (let t = 0; t < 16; t++) w[t] = view.getUint32(off + 4 * t);
    for (let t = 16; t < 64; t++) {
      const s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >>> 3);
      const s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) | 0;
    }
    let [a, b, c, d, e, f, g, hh] = hs;
    for (let t = 0; t < 64; t++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      [hh, g, f, e, d, c, b, a] = [g, f, e, (d + t1) | 0, c, b, a, (t1 + t2) | 0];
    }
    [a, b, c, d, e, f, g, hh].forEach((v, i) => (hs[i] = (hs[i] + v) >>> 0));
  }
  return hs.map((v) => v.toString(16).padStart(8, '0')).join('');
}

// ---- dialogs and notices ----

/**
 * A modal dialog: title, body nodes, actions [{label, value, kind}].
 * Resolves the value of the action chosen, or null when dismissed
 * (Escape). The first field in the body, else the last action, gets focus;
 * Enter in a text field chooses the last action.
 */
export function modal({ title, body = [], actions }) {
  return new Promise((resolve) => {
    let result = null;
    const buttons = actions.map((a) => h('button', {
      type: 'button', class: a.kind || '', text: a.label,
      onclick: () => {
        result = a.value;
        dlg.close();
      },
    }));
    const dlg = h('dialog', { class: 'modal', 'aria-label': title },
      h('h2', { text: title }), h('div', { class: 'modal-body' }, body), h('div', { class: 'modal-actions' }, buttons));
    dlg.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && e.target instanceof HTMLInputElement) {
        e.preventDefault();
        buttons.at(-1).click();
      }
    });
    dlg.addEventListener('close', () => {
      dlg.remove();
      resolve(result);
    });
    document.body.append(dlg);
    dlg.showModal();
    (dlg.querySelector('input, textarea') || buttons.at(-1)).focus();
  });
}

export async function confirmDialog(title, message, confirmLabel = 'OK', kind = 'primary') {
  const v = await modal({
    title, body: [h('p', { text: message })],
    actions: [{ label: 'Cancel', value: false }, { label: confirmLabel, value: true, kind }],
  });
  return v === true;
}

/** Asks for one line of text; resolves it, or null when cancelled. */
export async function promptDialog(title, label, value = '', confirmLabel = 'Save') {
  const input = h('input', { type: 'text', value, 'aria-label': label, maxlength: 500 });
  const v = await modal({
    title, body: [h('label', { class: 'field' }, h('span', { text: label }), input)],
    actions: [{ label: 'Cancel', value: false }, { label: confirmLabel, value: true, kind: 'primary' }],
  });
  return v === true ? input.value : null;
}

let toasts = null;

/** A short notice at the bottom of the screen; errors are announced at once. */
export function toast(message, kind = 'info') {
  if (!toasts) {
    toasts = h('div', { class: 'toasts' });
    document.body.append(toasts);
  }
  const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status', text: message });
  const close = h('button', { type: 'button', class: 'icon', 'aria-label': 'Dismiss', onclick: () => t.remove() }, icon('close'));
  t.append(close);
  toasts.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 12000 : 5000);
}
