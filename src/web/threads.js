// The thread list of the sidebar: the user's threads, most recently active
// first, with their titles and last activity; search over titles; rename
// and delete. Titles are the thread state's values.title (set by a run
// from the first message, or by a rename through POST /state); the list
// reads the title the search answer carries, values.title or the
// metadata.title the page mirrors there.
import { api, threadPath } from './api.js';
import { confirmDialog, fmtAgo, fmtTime, h, icon, promptDialog, replace, toast } from './dom.js';

// Threads asked for per page, and at most in all (the search route's cap).
const PAGE = 100;
const MAX_THREADS = 1000;

export function threadTitle(t) {
  const title = t?.values?.title || t?.metadata?.title;
  return typeof title === 'string' && title.trim() ? title : 'Untitled chat';
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
    const title = await promptDialog('Rename chat', 'Title', threadTitle(t) === 'Untitled chat' ? '' : threadTitle(t));
    if (title === null || !title.trim()) return;
    try {
      await renameThread(t.thread_id, title.trim());
      const fresh = await api('GET', threadPath(t.thread_id));
      this.update(withTitle(fresh, title.trim()));
      this.app.titleChanged(t.thread_id, title.trim());
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

/** A thread object with values.title set, as the list shows it. */
export function withTitle(thread, title) {
  return { ...thread, values: { ...(thread.values || {}), title } };
}

/** Sets a thread's title: in its state (values.title, what runs and other
 *  clients read) and mirrored in its metadata, which the list reads. */
export async function renameThread(id, title) {
  await api('POST', `${threadPath(id)}/state`, { values: { title } });
  await api('PATCH', threadPath(id), { metadata: { title } });
}
