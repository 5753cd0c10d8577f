// Talking to fawn's HTTP API (docs/http-api.md) from the page: JSON calls
// that carry the session cookie and echo the csrf_token cookie in
// X-CSRF-Token on every state-changing call, errors as ApiError, and the
// server-sent events of a run read from a fetch response (a run is started
// with POST, which EventSource cannot send).

/** An answer other than 2xx: its status, its detail text and, for
 *  authentication errors, the code a client acts on. */
export class ApiError extends Error {
  constructor(status, message, code = null, retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

let unauthorized = () => {};

/** Who to call when a call answers 401 (the session ended): the app shows
 *  the sign-in screen. */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

/** The value of cookie name, or ''. */
export function cookie(name) {
  for (const part of document.cookie.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return decodeURIComponent(part.slice(eq + 1).trim());
  }
  return '';
}

async function errorOf(res) {
  let detail = res.statusText || `HTTP ${res.status}`;
  let code = null;
  try {
    const body = await res.json();
    if (typeof body.detail === 'string') detail = body.detail;
    else if (body.detail && typeof body.detail.message === 'string') {
      detail = body.detail.message;
      code = typeof body.detail.code === 'string' ? body.detail.code : null;
    }
  } catch {
    // not JSON: the status text stands
  }
  return new ApiError(res.status, detail, code, res.headers.get('Retry-After'));
}

/**
 * One call: method, path (under this origin), body (an object sent as
 * JSON, a FormData, or undefined). Resolves the parsed JSON answer (null
 * for an empty one), or the Response itself when opts.raw is set. Rejects
 * with ApiError; a 401 outside the sign-in routes also calls the
 * unauthorized handler.
 */
export async function api(method, path, body, opts = {}) {
  const headers = { ...(opts.headers || {}) };
  let payload;
  if (body instanceof FormData) {
    payload = body;
  } else if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  if (method !== 'GET') {
    const token = cookie('csrf_token');
    if (token) headers['X-CSRF-Token'] = token;
  }
  const res = await fetch(path, {
    method, headers, body: payload, credentials: 'same-origin', cache: 'no-store', signal: opts.signal,
  });
  if (!res.ok && !(opts.accept || []).includes(res.status)) {
    const err = await errorOf(res);
    if (res.status === 401 && !path.startsWith('/api/v1/auth/login')) unauthorized(err);
    throw err;
  }
  if (opts.raw) return res;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/**
 * The events of a text/event-stream response, as {event, data, id}:
 * data parsed as JSON (null when it is not), id the event's id or null.
 * Comments (heartbeats) are skipped. Ends when the stream ends; throws
 * when the connection fails or signal aborts.
 */
export async function* events(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let carry = ''; // a CR that ends a chunk may be the first half of CRLF
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    let text = carry + value;
    carry = text.endsWith('\r') ? '\r' : '';
    if (carry) text = text.slice(0, -1);
    buf += text.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const ev = frame(block);
      if (ev) yield ev;
    }
  }
}

function frame(block) {
  let event = 'message';
  let id = null;
  const data = [];
  for (const line of block.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id') id = value;
  }
  if (!data.length && event === 'message') return null;
  let parsed = null;
  try {
    parsed = JSON.parse(data.join('\n'));
  } catch {
    // not JSON: null
  }
  return { event, data: parsed, id };
}

/** /api/threads/{id}: the path of a thread (ids are [A-Za-z0-9_-]). */
export const threadPath = (id) => `/api/threads/${encodeURIComponent(id)}`;

/** The artifact URL of a virtual path (/mnt/user-data/...), each segment
 *  percent-encoded once (the gateway decodes once). */
export function artifactUrl(threadId, vpath, download = false) {
  const rel = vpath.replace(/^\/+/, '').split('/').map(encodeURIComponent).join('/');
  return `${threadPath(threadId)}/artifacts/${rel}${download ? '?download=true' : ''}`;
}
