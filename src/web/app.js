// fawn's web UI: signing in (or creating the first administrator), then
// the shell: the chats in a sidebar, the chat or page the URL's fragment
// names (#/t/<thread id>, #/account, #/skills, #/admin/sandboxes) in the
// main area.
// Everything shown comes from the API of the signed-in user (api.js).
import { AccountView, SandboxesView, SkillsView } from './admin.js';
import { api, ApiError, onUnauthorized } from './api.js';
import { ChatView } from './chat.js';
import { h, icon, replace, toast } from './dom.js';
import { ThreadList } from './threads.js';

const THREAD_ID = /^[A-Za-z0-9_-]{1,64}$/;
const root = document.getElementById('app');

function field(label, input) {
  return h('label', { class: 'field' }, h('span', { text: label }), input);
}

class App {
  constructor() {
    this.me = null;
    this.models = [];
    this.uploadLimits = null;
    this.view = null;
    onUnauthorized(() => {
      if (this.me) this.signedOut('Your session has ended. Sign in again.');
    });
    window.addEventListener('hashchange', () => this.route());
  }

  async start() {
    try {
      this.me = await api('GET', '/api/v1/auth/me');
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return this.authScreen();
      return this.fatal(e);
    }
    return this.shell();
  }

  fatal(e) {
    replace(root, h('div', { class: 'auth' }, h('div', { class: 'card' },
      h('h1', { text: 'fawn is not answering' }),
      h('p', { text: e.message }),
      h('button', { type: 'button', class: 'primary', text: 'Try again', onclick: () => location.reload() }))));
  }

  // ---- signing in ----

  async authScreen(message = '') {
    this.me = null;
    this.view?.destroy();
    this.view = null;
    root.className = 'auth';
    let status = { needs_setup: false, registration_enabled: false };
    try {
      status = await api('GET', '/api/v1/auth/setup-status');
    } catch (e) {
      return this.fatal(e);
    }
    const mode = status.needs_setup ? 'setup' : 'signin';
    replace(root, this.authForm(mode, status, message));
    root.querySelector('input')?.focus();
  }

  authForm(mode, status, message) {
    const user = h('input', { type: 'text', autocomplete: 'username', required: true, maxlength: 254, autocapitalize: 'none', spellcheck: 'false' });
    const pass = h('input', { type: 'password', autocomplete: mode === 'signin' ? 'current-password' : 'new-password', required: true, maxlength: 1024 });
    const again = mode === 'signin' ? null : h('input', { type: 'password', autocomplete: 'new-password', required: true });
    const err = h('p', { class: 'form-error', role: 'alert', hidden: !message, text: message });
    const titles = { setup: 'Create the administrator', signin: 'Sign in to fawn', register: 'Create an account' };
    const intro = {
      setup: 'No one has set up this fawn yet. The account you create now is its administrator.',
      signin: '',
      register: 'Create an account on this fawn.',
    };
    const submit = h('button', { type: 'submit', class: 'primary', text: mode === 'signin' ? 'Sign in' : 'Create account' });
    const form = h('form', {
      class: 'card form', 'aria-label': titles[mode],
      onsubmit: async (e) => {
        e.preventDefault();
        err.hidden = true;
        if (again && again.value !== pass.value) {
          err.textContent = 'The passwords differ.';
          err.hidden = false;
          return;
        }
        submit.disabled = true;
        try {
          await this.signIn(mode, user.value.trim(), pass.value);
        } catch (e2) {
          err.textContent = authMessage(e2);
          err.hidden = false;
          submit.disabled = false;
        }
      },
    },
    h('div', { class: 'brand' }, h('img', { src: '/assets/icon.svg', alt: '', width: 40, height: 40 }), h('span', { text: 'fawn' })),
    h('h1', { text: titles[mode] }),
    intro[mode] ? h('p', { class: 'muted', text: intro[mode] }) : null,
    field(mode === 'signin' ? 'Username' : 'Username (letters, digits, . _ @ + -)', user),
    field('Password', pass),
    again ? field('Password again', again) : null,
    err, submit,
    mode === 'signin' && status.registration_enabled
      ? h('button', { type: 'button', class: 'link', text: 'Create an account', onclick: () => replace(root, this.authForm('register', status, '')) }) : null,
    mode === 'register'
      ? h('button', { type: 'button', class: 'link', text: 'I have an account', onclick: () => replace(root, this.authForm('signin', status, '')) }) : null);
    return form;
  }

  async signIn(mode, username, password) {
    const path = { setup: '/api/v1/auth/initialize', signin: '/api/v1/auth/login/local', register: '/api/v1/auth/register' }[mode];
    await api('POST', path, { username, password });
    this.me = await api('GET', '/api/v1/auth/me');
    await this.shell();
  }

  async signOut() {
    try {
      await api('POST', '/api/v1/auth/logout');
      // With auth.disabled every request acts as the local admin: still signed in.
      if ((await api('GET', '/api/v1/auth/me', undefined, { raw: true, accept: [401] })).ok) {
        toast('Signing in is turned off on this gateway (auth.disabled): there is no session to end.');
        return;
      }
    } catch (e) {
      toast(e.message, 'error');
    }
    this.signedOut('Signed out.');
  }

  signedOut(message) {
    this.authScreen(message);
  }

  // ---- the shell ----

  async shell() {
    root.className = 'shell';
    try {
      const m = await api('GET', '/api/models');
      this.models = Array.isArray(m?.models) ? m.models : [];
    } catch {
      this.models = [];
    }
    this.threads = new ThreadList(this);
    this.main = h('main', { id: 'main', tabindex: '-1' });
    const menu = h('button', {
      type: 'button', class: 'icon menu', 'aria-label': 'Chats', 'aria-expanded': 'false',
      onclick: () => this.toggleSidebar(),
    }, icon('menu'));
    this.sidebar = h('aside', { class: 'sidebar', 'aria-label': 'Chats' }, this.threads.el);
    this.sidebar.addEventListener('click', (e) => {
      if (e.target.closest('a')) this.toggleSidebar(false);
    });
    const admin = this.me.system_role === 'admin';
    replace(root,
      h('a', { class: 'skip', href: '#main', text: 'Skip to the chat', onclick: (e) => { e.preventDefault(); this.main.focus(); } }),
      h('header', { class: 'topbar' }, menu,
        h('a', { class: 'brand', href: '#/' }, h('img', { src: '/assets/icon.svg', alt: '', width: 24, height: 24 }), h('span', { text: 'fawn' })),
        h('span', { class: 'spacer' }),
        h('nav', { class: 'top-nav', 'aria-label': 'Account' },
          h('a', { href: '#/skills', text: 'Skills' }),
          admin ? h('a', { href: '#/admin/sandboxes', text: 'Sandboxes' }) : null,
          h('a', { href: '#/account', class: 'who', text: this.me.username, title: 'Account: password and API tokens' }),
          h('button', { type: 'button', class: 'link', text: 'Sign out', onclick: () => this.signOut() }))),
      this.sidebar, this.main);
    this.menu = menu;
    this.threads.refresh().catch((e) => toast(`Could not list the chats: ${e.message}`, 'error'));
    await this.route();
  }

  toggleSidebar(open = !this.sidebar.classList.contains('open')) {
    this.sidebar.classList.toggle('open', open);
    this.menu.setAttribute('aria-expanded', String(open));
  }

  async route() {
    if (!this.me) return;
    const hash = location.hash.replace(/^#/, '') || '/';
    const thread = /^\/t\/(.+)$/.exec(hash);
    if (thread && this.view instanceof ChatView && this.view.threadId === thread[1]) return;
    this.view?.destroy();
    let view;
    if (hash === '/') view = new ChatView(this, null);
    else if (thread && THREAD_ID.test(thread[1])) view = new ChatView(this, thread[1]);
    else if (hash === '/account') view = new AccountView(this);
    else if (hash === '/skills') view = new SkillsView(this);
    else if (hash === '/admin/sandboxes') view = new SandboxesView(this);
    else view = { el: h('section', { class: 'page' }, h('h1', { text: 'Not found' }), h('p', {}, h('a', { href: '#/', text: 'Start a new chat' }))), destroy() {}, load() {} };
    this.view = view;
    this.threads.setActive(view instanceof ChatView && view.exists ? view.threadId : null);
    if (!(view instanceof ChatView)) document.title = 'fawn';
    replace(this.main, view.el);
    view.focus?.();
    try {
      await view.load();
    } catch (e) {
      if (this.view === view && !(e instanceof DOMException && e.name === 'AbortError')) toast(e.message, 'error');
    }
  }

  /** A new chat made its thread: its URL and the list follow, the view stays. */
  threadCreated(chat) {
    this.threads.update(chat.thread);
    this.threads.setActive(chat.threadId);
    history.replaceState(null, '', `#/t/${chat.threadId}`);
  }

  titleChanged(threadId, title) {
    if (this.view instanceof ChatView && this.view.threadId === threadId) this.view.titleChanged(title);
  }
}

function authMessage(e) {
  if (!(e instanceof ApiError)) return e.message;
  if (e.code === 'invalid_credentials') return 'Wrong username or password.';
  if (e.status === 429) return `Too many failed sign-ins from here; try again in ${Math.ceil(Number(e.retryAfter || 300) / 60)} min.`;
  if (e.code === 'system_already_initialized') return 'An administrator already exists: sign in instead.';
  return e.message;
}

// The libraries from Debian load as classic scripts (defer), before this
// module runs; a page without them cannot render Markdown safely.
if (!window.marked?.parse || !window.DOMPurify?.sanitize) {
  root.textContent = 'fawn\'s web UI could not load its Markdown renderer or sanitizer.';
} else {
  new App().start();
}
