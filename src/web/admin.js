// The account page (change password, API tokens), the skills page (what
// the skills directory holds, for every signed-in user) and the
// administrators' pages (the sandboxes the gateway holds). Names and
// descriptions come from files the operator installed and are shown as
// text.
import { api, ApiError } from './api.js';
import { confirmDialog, fmtAgo, fmtDuration, fmtTime, h, replace, toast } from './dom.js';

// The gateway's bounds on a password (AUTH_PASSWORD_MIN/MAX) and a token
// name (STORE_TOKEN_NAME_MAX), checked here first to say so at once.
const PASSWORD_MIN = 8;
const PASSWORD_MAX = 1024;
const TOKEN_NAME_MAX = 128;

function field(label, input) {
  return h('label', { class: 'field' }, h('span', { text: label }), input);
}

function formError() {
  return h('p', { class: 'form-error', role: 'alert', hidden: true });
}

function showError(el, message) {
  el.textContent = message;
  el.hidden = !message;
}

export class AccountView {
  constructor(app) {
    this.app = app;
    this.tokens = h('tbody');
    this.created = h('div', { 'aria-live': 'polite' });
    this.el = h('section', { class: 'page', 'aria-label': 'Account' },
      h('h1', { text: 'Account' }),
      h('p', { class: 'muted' }, `Signed in as ${app.me.username} (${app.me.system_role}).`),
      this.passwordForm(),
      this.tokenSection());
  }

  passwordForm() {
    const current = h('input', { type: 'password', autocomplete: 'current-password', required: true });
    const next = h('input', { type: 'password', autocomplete: 'new-password', required: true, minlength: PASSWORD_MIN, maxlength: PASSWORD_MAX });
    const again = h('input', { type: 'password', autocomplete: 'new-password', required: true });
    const err = formError();
    const done = h('p', { class: 'form-ok', role: 'status', hidden: true, text: 'Password changed. Other sessions are signed out.' });
    const form = h('form', {
      class: 'card form', 'aria-label': 'Change password',
      onsubmit: async (e) => {
        e.preventDefault();
        showError(err, '');
        done.hidden = true;
        if (next.value !== again.value) return showError(err, 'The new passwords differ.');
        if (next.value.length < PASSWORD_MIN) return showError(err, `A password has at least ${PASSWORD_MIN} characters.`);
        try {
          await api('POST', '/api/v1/auth/change-password', { current_password: current.value, new_password: next.value });
          form.reset();
          done.hidden = false;
        } catch (e2) {
          showError(err, e2.code === 'invalid_credentials' ? 'The current password is wrong.' : e2.message);
        }
      },
    }, h('h2', { text: 'Change password' }),
    field('Current password', current), field('New password', next), field('New password again', again),
    err, done, h('button', { type: 'submit', class: 'primary', text: 'Change password' }));
    return form;
  }

  tokenSection() {
    const name = h('input', { type: 'text', required: true, maxlength: TOKEN_NAME_MAX, placeholder: 'e.g. laptop CLI' });
    const err = formError();
    const form = h('form', {
      class: 'row', 'aria-label': 'Create an API token',
      onsubmit: async (e) => {
        e.preventDefault();
        showError(err, '');
        try {
          const t = await api('POST', '/api/v1/auth/tokens', { name: name.value.trim() });
          name.value = '';
          this.showCreated(t);
          await this.loadTokens();
        } catch (e2) {
          showError(err, e2.message);
        }
      },
    }, field('Name', name), h('button', { type: 'submit', class: 'primary', text: 'Create token' }));
    return h('section', { class: 'card' },
      h('h2', { text: 'API tokens' }),
      h('p', { class: 'muted small', text: 'A token lets a program (fawn chat, scripts, the LangGraph SDK) act as you: send it as "Authorization: Bearer <token>". It is shown once, when it is made.' }),
      form, err, this.created,
      h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['Name', 'Created', 'Last used', ''].map((c) => h('th', { text: c })))),
        this.tokens));
  }

  showCreated(t) {
    const value = h('input', { type: 'text', readonly: true, value: t.token, class: 'mono', 'aria-label': 'The new token' });
    const copy = h('button', {
      type: 'button', text: 'Copy',
      onclick: async () => {
        value.select();
        try {
          await navigator.clipboard.writeText(t.token);
          copy.textContent = 'Copied';
        } catch {
          copy.textContent = 'Press Ctrl+C';
        }
      },
    });
    replace(this.created, h('div', { class: 'note ok created-token' },
      h('strong', { text: `Token “${t.name}” created. Copy it now: it is not shown again.` }),
      h('div', { class: 'row' }, value, copy,
        h('button', { type: 'button', text: 'Done', onclick: () => replace(this.created) }))));
    value.focus();
    value.select();
  }

  async load() {
    await this.loadTokens();
  }

  async loadTokens() {
    const r = await api('GET', '/api/v1/auth/tokens');
    const list = Array.isArray(r?.tokens) ? r.tokens : [];
    replace(this.tokens, list.length ? list.map((t) => h('tr', {},
      h('td', { text: String(t.name ?? '') }),
      h('td', { text: fmtTime(t.created_at) }),
      h('td', { text: t.last_used_at ? fmtAgo(t.last_used_at) : 'never' }),
      h('td', {}, h('button', {
        type: 'button', class: 'danger small', text: 'Revoke', 'aria-label': `Revoke ${t.name}`,
        onclick: () => this.revoke(t),
      }))))
      : h('tr', {}, h('td', { colspan: 4, class: 'muted', text: 'No tokens.' })));
  }

  async revoke(t) {
    if (!(await confirmDialog('Revoke token', `Revoke “${t.name}”? Programs using it stop working at once.`, 'Revoke', 'danger'))) return;
    try {
      await api('DELETE', `/api/v1/auth/tokens/${encodeURIComponent(t.id)}`);
      toast('Token revoked');
      await this.loadTokens();
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  destroy() {}
}

export class SandboxesView {
  constructor(app) {
    this.app = app;
    this.body = h('tbody');
    this.status = h('p', { class: 'muted small', 'aria-live': 'polite' });
    this.el = h('section', { class: 'page wide', 'aria-label': 'Sandboxes' },
      h('div', { class: 'row' }, h('h1', { text: 'Sandboxes' }), h('span', { class: 'spacer' }),
        h('button', { type: 'button', text: 'Refresh', onclick: () => this.load().catch((e) => toast(e.message, 'error')) })),
      h('p', { class: 'muted', text: 'Every sandbox the gateway holds: in use, starting, parked for reuse, or stopping.' }),
      this.status,
      h('div', { class: 'table-wrap' }, h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['Sandbox', 'User', 'Thread', 'State', 'Holders', 'Idle', 'Fenced', 'Teardown failures'].map((c) => h('th', { text: c })))),
        this.body)));
  }

  async load() {
    let r;
    try {
      r = await api('GET', '/api/sandboxes');
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) {
        replace(this.body);
        this.status.textContent = 'Only administrators can see the sandboxes.';
        return;
      }
      throw e;
    }
    const list = Array.isArray(r?.sandboxes) ? r.sandboxes : [];
    this.status.textContent = `${list.length} sandbox${list.length === 1 ? '' : 'es'}, as of ${new Date().toLocaleTimeString()}.`;
    replace(this.body, list.map((s) => h('tr', {},
      h('td', { class: 'mono', text: String(s.sandbox_id ?? '') }),
      h('td', { text: String(s.user_id ?? '') }),
      h('td', { class: 'mono', text: String(s.thread_id ?? '') }),
      h('td', {}, h('span', { class: `badge state-${String(s.state).replace(/[^a-z]/g, '')}`, text: String(s.state ?? '') })),
      h('td', { text: Object.entries(s.holders || {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(', ') || '—' }),
      h('td', { text: s.idle_ms ? fmtDuration(s.idle_ms) : '—' }),
      h('td', { text: s.fenced ? 'yes' : 'no' }),
      h('td', { text: s.teardown_failures ? `${s.teardown_failures} (retry in ${fmtDuration(s.teardown_backoff_ms)})` : '0' }))));
  }

  destroy() {}
}

export class SkillsView {
  constructor(app) {
    this.app = app;
    this.body = h('tbody');
    this.status = h('p', { class: 'muted small', 'aria-live': 'polite' });
    this.el = h('section', { class: 'page wide', 'aria-label': 'Skills' },
      h('h1', { text: 'Skills' }),
      h('p', { class: 'muted', text: 'The skills in this gateway\'s skills directory that you may use: read-only files the agent can read under /mnt/skills in its sandbox. Enabled says whether the agent is also given the skill itself.' }),
      this.status,
      h('div', { class: 'table-wrap' }, h('table', { class: 'grid' },
        h('thead', {}, h('tr', {}, ['Name', 'Category', 'Description', 'License', 'Enabled'].map((c) => h('th', { text: c })))),
        this.body)));
  }

  async load() {
    const r = await api('GET', '/api/skills');
    const list = Array.isArray(r?.skills) ? r.skills.filter((k) => k && typeof k === 'object') : [];
    this.status.textContent = `${list.length} skill${list.length === 1 ? '' : 's'}.`;
    replace(this.body, list.length ? list.map((k) => h('tr', {},
      h('td', { class: 'mono', text: String(k.name ?? '') }),
      h('td', { text: String(k.category ?? '') }),
      h('td', { text: String(k.description || '—') }),
      h('td', { text: String(k.license || '—') }),
      h('td', { text: k.enabled === true ? 'yes' : 'no' })))
      : h('tr', {}, h('td', { colspan: 5, class: 'muted', text: 'No skills are installed.' })));
  }

  destroy() {}
}
