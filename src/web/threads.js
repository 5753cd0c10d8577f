// The thread list of the sidebar: the user's threads, most recently active
// first, with their titles and last activity; search over titles; rename
// and delete. A title is the thread state's values.title, set by a run
// from its first message or by a rename (POST /state, from this page or
// any other client); thread objects carry it, in searches and in
// GET /threads/{id}, and valuesTitle is the one place that reads it.
import { api, threadPath } from './api.js';
import { confirmDialog, fmtAgo, fmtTime, h, icon, promptDialog, replace, toast } from './dom.js';

// Threads asked for per page, and at most in all (the search route's cap).
const PAGE = 100;
const MAX_THREADS = 1000;

const UNTITLED = 'Untitled chat';

/** The title held in a thread's values (a thread object's, or its
 *  state's), or null. */
export function valuesTitle(values) {
  const title = values?.title;
  return typeof title === 'string' && title.trim() ? title : null;
}

/** What a thread is called in the list. */
export function threadTitle(t) {
  return valuesTitle(t?.values) ?? UNTITLED;
}

export class ThreadList {
  constructor(app) {
    this.app = app;
    this.threads = [];
    this.complete = false;
    this.active = null;
    this.query = '';
    this.search = h('input', {
      type: 'search', placeholder: 'Search chats', 'aria-label': 'Search chats', class: 'search',
      oninput: () => this.onSearch(),
    });
    this.list = h('ul', { class: 'threads', 'aria-label': 'Chats' });
    this.more = h('button', { type: 'button', class: 'link', text: 'Show older chats', hidden: true, onclick: () => this.loadMore() });
    this.empty = h('p', { class: 'muted small', hidden: true });
    this.el = h('nav', { class: 'thread-nav', 'aria-label': 'Chats' },
      h('a', { class: 'button primary new-chat', href: '#/', text: '+ New chat' }),
      this.search, this.empty, this.list, this.more);
  }

  async refresh() {
    const first = await api('POST', '/api/threads/search', { limit: PAGE, offset: 0 });
    this.threads = first;
    this.complete = first.length < PAGE;
    if (this.query) await this.loadAll();
    this.render();
  }

  async loadMore() {
    if (this.complete) return;
    const next = await api('POST', '/api/threads/search', { limit: PAGE, offset: this.threads.length });
    const known = new Set(this.threads.map((t) => t.thread_id));
    this.threads.push(...next.filter((t) => !known.has(t.thread_id)));
    this.complete = next.length < PAGE || this.threads.length >= MAX_THREADS;
    this.render();
  }

  async loadAll() {
    while (!this.complete) await this.loadMore();
  }

  async onSearch() {
    this.query = this.search.value.trim().toLowerCase();
    if (this.query && !this.complete) await this.loadAll().catch((e) => toast(e.message, 'error'));
    this.render();
  }

  setActive(id) {
    this.active = id;
    for (const li of this.list.children) li.classList.toggle('active', li.dataset.id === id);
  }

  /** A thread's title changed or it was made: shown without a reload. */
  update(thread) {
    const i = this.threads.findIndex((t) => t.thread_id === thread.thread_id);
    if (i >= 0) this.threads.splice(i, 1);
    this.threads.unshift(thread);
    this.render();
  }

  render() {
    const shown = this.threads.filter((t) => !this.query || threadTitle(t).toLowerCase().includes(this.query));
    replace(this.list, shown.map((t) => this.item(t)));
    this.empty.hidden = shown.length > 0;
    this.empty.textContent = this.query ? 'No chat title matches.' : 'No chats yet.';
    this.more.hidden = this.complete || !!this.query;
  }

  item(t) {
    const title = threadTitle(t);
    return h('li', { dataset: { id: t.thread_id }, class: t.thread_id === this.active ? 'active' : '' },
      h('a', { href: `#/t/${t.thread_id}`, class: 'thread-link', title: `${title}\nlast active ${fmtTime(t.updated_at)}` },
        h('span', { class: 'thread-title', text: title }),
        h('span', { class: 'thread-ago', text: `${t.status === 'busy' ? 'running · ' : ''}${fmtAgo(t.updated_at)}` })),
      h('span', { class: 'thread-actions' },
        h('button', { type: 'button', class: 'icon', 'aria-label': `Rename ${title}`, title: 'Rename', onclick: () => this.rename(t) }, icon('pencil')),
        h('button', { type: 'button', class: 'icon', 'aria-label': `Delete ${title}`, title: 'Delete', onclick: () => this.remove(t) }, icon('trash'))));
  }

  async rename(t) {
    const title = await promptDialog('Rename chat', 'Title', valuesTitle(t.values) ?? '');
    if (title === null || !title.trim()) return;
    try {
      await api('POST', `${threadPath(t.thread_id)}/state`, { values: { title: title.trim() } });
      const fresh = await api('GET', threadPath(t.thread_id));
      this.update(fresh);
      this.app.titleChanged(t.thread_id, threadTitle(fresh));
    } catch (e) {
      toast(`Could not rename: ${e.message}`, 'error');
    }
  }

  async remove(t) {
    const ok = await confirmDialog('Delete chat', `Delete “${threadTitle(t)}” with its files? This cannot be undone.`, 'Delete', 'danger');
    if (!ok) return;
    try {
      await api('DELETE', threadPath(t.thread_id));
      this.threads = this.threads.filter((x) => x.thread_id !== t.thread_id);
      this.render();
      if (this.active === t.thread_id) location.hash = '#/';
      toast('Chat deleted');
    } catch (e) {
      toast(`Could not delete: ${e.message}`, 'error');
    }
  }
}
