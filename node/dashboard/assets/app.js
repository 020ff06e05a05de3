// The gpunex dashboard: one page per role, drawn from the node's JSON API (docs/api.md).
// This entry module starts the page; the frame (header, tabs, live status) is frame.js,
// each tab a module of tabs/, and the shared pieces api.js (API calls), i18n.js (messages
// and formats), dom.js (building the page) and charts.js.
import { api, sessionKey } from './api.js';
import { errorBox } from './dom.js';
import { listen, renderHeader, setFrame, show } from './frame.js';
import { lang, loadMessages, setLanguage, t } from './i18n.js';
import { applications } from './tabs/applications.js';
import { application } from './tabs/application.js';
import { benchmarks } from './tabs/benchmarks.js';
import { disputes } from './tabs/disputes.js';
import { jobs } from './tabs/jobs.js';
import { market } from './tabs/market.js';
import { offers } from './tabs/offers.js';
import { overview } from './tabs/overview.js';
import { payments } from './tabs/payments.js';
import { payouts } from './tabs/payouts.js';
import { performance as performanceTab } from './tabs/performance.js';
import { pricing } from './tabs/pricing.js';
import { providers } from './tabs/providers.js';
import { run } from './tabs/run.js';
import { wallet } from './tabs/wallet.js';

// The pages by tab: each draws its tab into main and answers the function that refreshes
// its data (or null).
const PAGES = {
  overview, application, benchmarks, pricing, payments, performance: performanceTab, jobs,
  offers, run, wallet,
  applications, providers, payouts, market, disputes,
};

function translateStatic() {
  document.documentElement.lang = lang;
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
}

async function start() {
  // The messages and the node's status at once: the first page is drawn from both.
  const [, st] = await Promise.all([loadMessages(), api('GET', '/v1/status')]);
  setFrame(st, PAGES);
  const sel = document.getElementById('lang');
  sel.value = lang;
  sel.addEventListener('change', () => {
    setLanguage(sel.value);
    translateStatic();
    renderHeader();
    show();
  });
  document.getElementById('logout').addEventListener('click', async () => {
    await fetch('/logout', { method: 'POST', headers: { 'X-Session-Key': sessionKey() }, credentials: 'same-origin' });
    localStorage.removeItem('gpunex-session-key');
    location.href = '/login';
  });
  translateStatic();
  renderHeader();
  window.addEventListener('hashchange', show);
  await show();
  listen();
  // The time from the navigation to the first tab drawn with its data (the dashboard
  // benchmark reads it).
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = 'true';
}

start().catch((e) => document.getElementById('main').replaceChildren(errorBox(e)));
