// The frame of every page: the header, the tabs of the node's role, the open tab and its
// refresh, and the node's live status (server-sent events).
import { stream } from './api.js';
import { errorBox, fill, h } from './dom.js';
import { t } from './i18n.js';

// status is the node's status (GET /v1/status, then its events); the tabs read it.
export let status = null;
let pages = {};
let tab = null;
let refresh = null;
let refreshing = false;

const TABS = {
  provider: ['overview', 'application', 'benchmarks', 'pricing', 'payments', 'performance', 'jobs'],
  renter: ['offers', 'run', 'jobs', 'wallet'],
  coordinator: ['applications', 'providers', 'payouts', 'market', 'disputes'],
};

// setFrame gives the frame the node's first status and the pages: tab name → function
// drawing the tab into main and answering its refresh (or null).
export function setFrame(st, byTab) {
  status = st;
  pages = byTab;
}

export function renderHeader() {
  if (!status) return;
  document.getElementById('role').textContent = t('role_' + status.role);
  const state = document.getElementById('state');
  fill(state,
    h('span', { class: 'dot online', 'aria-hidden': 'true' }),
    t('online_peers', { peers: status.peers }), ' · ',
    t('reach_' + (status.reachability || 'unknown')) + (status.relayed ? ' (' + t('relayed') + ')' : ''));
}

function renderTabs() {
  const nav = document.getElementById('tabs');
  const names = TABS[status.role] || [];
  nav.setAttribute('aria-label', t('sections'));
  fill(nav, h('ul', {}, names.map((name) => h('li', {},
    h('a', { href: '#' + name, id: 'tab-' + name, 'aria-current': name === tab ? 'page' : null, i18n: 'tab_' + name })))));
}

// show draws the tab the address names. A newer call wins over one still drawing: its
// generation is the only one whose refresh is kept. An address that names no tab (the
// skip link's #main) leaves the tab drawn as it is.
let generation = 0;
export async function show() {
  const names = TABS[status.role] || [];
  const want = location.hash.slice(1);
  if (tab && !names.includes(want) && want !== '') return;
  const mine = ++generation;
  tab = names.includes(want) ? want : names[0];
  renderTabs();
  const main = document.getElementById('main');
  fill(main, h('h1', { i18n: 'tab_' + tab }));
  refresh = null;
  let r = null;
  try {
    r = (await pages[tab](main)) || null;
  } catch (e) {
    console.error(e);
    main.append(errorBox(e));
  }
  if (mine !== generation) return;
  refresh = r;
  refreshing = false;
  if (refresh) await runRefresh();
}

// runRefresh brings the open tab's data up to date; an error shows on the page (and in
// the console, where the browser tests look).
let refreshBox = null;
export async function runRefresh() {
  if (!refresh || refreshing) return;
  const mine = generation;
  refreshing = true;
  try {
    await refresh();
    if (refreshBox) refreshBox.remove();
    refreshBox = null;
  } catch (e) {
    console.error(e);
    if (mine === generation) {
      if (refreshBox) refreshBox.remove();
      refreshBox = errorBox(e);
      document.getElementById('main').append(refreshBox);
    }
  } finally {
    if (mine === generation) refreshing = false;
  }
}

// listen follows the node's server-sent events (read with fetch, which carries the
// session key, unlike EventSource), and connects again after a loss.
export async function listen() {
  for (;;) {
    let buf = '';
    try {
      await stream('GET', '/v1/events', (text) => {
        buf += text;
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = ev.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
          if (ev.startsWith('event: status') && data) {
            status = JSON.parse(data);
            renderHeader();
            runRefresh();
          }
        }
      });
    } catch (e) {
      if (e.code === 401 || e.code === 403) {
        location.href = '/login';
        return;
      }
    }
    const state = document.getElementById('state');
    fill(state, h('span', { class: 'dot offline', 'aria-hidden': 'true' }), t('offline'));
    await new Promise((resolve) => setTimeout(resolve, 3000));
  }
}
