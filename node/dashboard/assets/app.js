// The gpunex dashboard: one page per role, drawn from the node's JSON API (docs/api.md).
// Everything a peer publishes is written as text (textContent), never as markup.
'use strict';

(function () {
  // The session's key: it comes once in the fragment of the login redirect (never sent to a
  // server) and stays in this origin's storage, which no other port or site can read. Every
  // API request carries it; the session cookie alone opens nothing.
  const fromLink = location.hash.match(/^#key=([0-9a-f]{64})$/);
  if (fromLink) {
    localStorage.setItem('gpunex-session-key', fromLink[1]);
    history.replaceState(null, '', location.pathname);
  }
  // The key is read at each request: a link opened in another tab replaces it.
  const sessionKey = () => localStorage.getItem('gpunex-session-key') || '';
  let M = { en: {} };
  let lang = 'en';
  let status = null;
  let tab = null;
  let refresh = null;
  let refreshing = false;

  const TABS = {
    provider: ['overview', 'application', 'benchmarks', 'pricing', 'payments', 'performance', 'jobs'],
    renter: ['offers', 'run', 'jobs', 'wallet'],
    coordinator: ['applications', 'providers', 'payouts', 'market', 'disputes'],
  };

  // ---- messages and formats ----

  function t(key, vars) {
    let s = (M[lang] && M[lang][key]) || M.en[key] || key;
    for (const [k, v] of Object.entries(vars || {})) s = s.split('{' + k + '}').join(String(v));
    return s;
  }

  function pickLanguage() {
    const saved = localStorage.getItem('gpunex-lang');
    if (saved && M[saved]) return saved;
    for (const l of navigator.languages || [navigator.language || 'en']) {
      const base = l.toLowerCase().split('-')[0];
      if (M[base]) return base;
    }
    return 'en';
  }

  // usdc formats a decimal USDC string ("12.5", as the API writes amounts) for the locale,
  // without going through a float.
  function usdc(s) {
    if (s === undefined || s === null || s === '') return '–';
    s = String(s);
    const neg = s.startsWith('-');
    if (neg) s = s.slice(1);
    let [whole, frac = ''] = s.split('.');
    const nf = new Intl.NumberFormat(lang);
    const dec = nf.formatToParts(1.5).find((p) => p.type === 'decimal').value;
    frac = frac.replace(/0+$/, '');
    if (frac.length < 2) frac = frac.padEnd(2, '0');
    return (neg ? '-' : '') + nf.format(BigInt(whole || '0')) + dec + frac + '\u00a0USDC';
  }

  // micro turns integer micro-USDC into the API's decimal string.
  function micro(n) {
    const neg = n < 0;
    const s = String(Math.abs(n)).padStart(7, '0');
    return (neg ? '-' : '') + s.slice(0, -6) + '.' + s.slice(-6);
  }

  function num(x, digits) {
    if (x === undefined || x === null) return '–';
    return new Intl.NumberFormat(lang, { maximumFractionDigits: digits === undefined ? 1 : digits }).format(x);
  }

  function pct(x) {
    return new Intl.NumberFormat(lang, { style: 'percent', maximumFractionDigits: 1 }).format(x || 0);
  }

  function when(s) {
    if (!s || s.startsWith('0001-')) return '–';
    return new Intl.DateTimeFormat(lang, { dateStyle: 'medium', timeStyle: 'short' }).format(new Date(s));
  }

  function day(d) {
    return new Intl.DateTimeFormat(lang, { dateStyle: 'short' }).format(d);
  }

  // link makes a link to a page outside the node (a payout's explorer page) only for an
  // http(s) address; anything else is shown as text.
  function link(href, text, cls) {
    let ok = false;
    try {
      ok = ['https:', 'http:'].includes(new URL(href).protocol);
    } catch (e) {
      ok = false;
    }
    return ok ? h('a', { href, rel: 'noopener noreferrer', target: '_blank', class: cls }, text) : h('code', { class: cls }, text);
  }

  function short(id) {
    return id && id.length > 16 ? id.slice(0, 6) + '…' + id.slice(-6) : id || '–';
  }

  // nodeText writes a text the node wrote in the page's language when it has a known form
  // (a score's "why" events, protocol.Why*); other texts stay as the node wrote them.
  const NODE_TEXTS = [
    [/^missed probe (Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\d\d:\d\d) UTC$/, 'why_missed_probe',
      (m) => ({ day: weekday(m[1]), time: m[2] })],
    [/^GPU (\S+) at (\d+)% of its first benchmark$/, 'why_slower_gpu', (m) => ({ gpu: m[1], percent: m[2] })],
    [/^job ([0-9a-f]{16}) abandoned: no receipt by its hold's expiry; its renter's countersigned usage shows (\d+) s run$/, 'why_abandoned',
      (m) => ({ job: m[1], seconds: m[2] })],
    [/^job ([0-9a-f]{16}) interrupted: (.*)$/, 'why_interrupted', (m) => ({ job: m[1], reason: m[2] })],
  ];

  function nodeText(s) {
    for (const [re, key, vars] of NODE_TEXTS) {
      const m = re.exec(s);
      if (m) return t(key, vars(m));
    }
    return s;
  }

  // weekday names an English day abbreviation in the page's language.
  function weekday(abbr) {
    const i = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'].indexOf(abbr);
    return new Intl.DateTimeFormat(lang, { weekday: 'short', timeZone: 'UTC' }).format(new Date(Date.UTC(2024, 0, 1 + i)));
  }

  // ---- the API ----

  class APIError extends Error {
    constructor(code, message) {
      super(message);
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const opts = { method, headers: { 'X-Session-Key': sessionKey() }, credentials: 'same-origin' };
    if (body !== undefined) {
      opts.headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    const r = await fetch(path, opts);
    if (r.status === 401 || r.status === 403 && !sessionKey()) {
      location.href = '/login';
      throw new APIError(r.status, t('session_ended'));
    }
    const text = await r.text();
    let v = null;
    try {
      v = text ? JSON.parse(text) : null;
    } catch (e) {
      v = null;
    }
    if (!r.ok) throw new APIError(r.status, (v && v.error) || text || r.statusText);
    return v;
  }

  // maybe answers null for a 404 (nothing yet) and throws any other error.
  async function maybe(path) {
    try {
      return await api('GET', path);
    } catch (e) {
      if (e.code === 404) return null;
      throw e;
    }
  }

  // stream reads a streamed answer (logs, benchmark progress) chunk by chunk.
  async function stream(method, path, onText, signal) {
    const opts = { method, headers: { 'X-Session-Key': sessionKey() }, credentials: 'same-origin', signal };
    const r = await fetch(path, opts);
    if (!r.ok) {
      const text = await r.text();
      let msg = text;
      try {
        msg = JSON.parse(text).error || text;
      } catch (e) { /* not JSON */ }
      throw new APIError(r.status, msg);
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      onText(dec.decode(value, { stream: true }));
    }
  }

  // ---- DOM ----

  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k === 'i18n') {
        e.dataset.i18n = v;
        e.textContent = t(v);
      } else e.setAttribute(k, v === true ? '' : v);
    }
    for (const k of kids.flat()) {
      if (k === undefined || k === null || k === false) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }

  // label pairs a translated label with its input.
  function field(key, input, hint) {
    if (!input.id) input.id = 'f-' + key + '-' + Math.random().toString(36).slice(2, 7);
    return h('div', { class: 'field' }, h('label', { for: input.id, i18n: key }), input,
      hint ? h('small', { i18n: hint }) : null);
  }

  function table(heads, rows, empty) {
    if (!rows.length) return h('p', { class: 'empty', i18n: empty || 'none' });
    return h('div', { class: 'scroll' }, h('table', {},
      h('thead', {}, h('tr', {}, heads.map((k) => h('th', { scope: 'col', i18n: k || null })))),
      h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
  }

  function card(titleKey, ...kids) {
    return h('section', { class: 'card' }, h('h2', { i18n: titleKey }), ...kids);
  }

  function facts(pairs) {
    return h('dl', { class: 'facts' }, pairs.flatMap(([k, v]) => [h('dt', { i18n: k }), h('dd', {}, v)]));
  }

  function errorBox(err) {
    return h('p', { class: 'error', role: 'alert' }, String(err && err.message ? err.message : err));
  }

  function okBox(key, vars) {
    return h('p', { class: 'ok', role: 'status' }, t(key, vars));
  }

  function say(box, node) {
    fill(box, node);
  }

  // fill replaces an element's children, leaving out the parts a condition left null.
  function fill(e, ...kids) {
    e.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
  }

  function button(key, onclick, cls) {
    return h('button', { type: 'button', class: cls, i18n: key, onclick });
  }

  // busy runs an action with its button disabled and shows the outcome in box.
  async function busy(btn, box, action) {
    btn.disabled = true;
    fill(box, );
    try {
      await action();
    } catch (e) {
      say(box, errorBox(e));
    } finally {
      btn.disabled = false;
    }
  }

  // saveFile hands a blob to the browser as a download.
  function saveFile(blob, name) {
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // ---- charts (SVG drawn from the node's own data) ----

  function barChart(points, fmt, labelKey) {
    const NS = 'http://www.w3.org/2000/svg';
    const W = 640;
    const H = 180;
    const pad = 24;
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('viewBox', `0 0 ${W} ${H + pad}`);
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', t(labelKey));
    svg.classList.add('chart');
    const max = Math.max(1, ...points.map((p) => p.value));
    const bw = points.length ? (W - pad) / points.length : W;
    points.forEach((p, i) => {
      const bh = Math.round((p.value / max) * (H - pad));
      const r = document.createElementNS(NS, 'rect');
      r.setAttribute('x', String(pad + i * bw + 2));
      r.setAttribute('y', String(H - bh));
      r.setAttribute('width', String(Math.max(1, bw - 4)));
      r.setAttribute('height', String(bh));
      const title = document.createElementNS(NS, 'title');
      title.textContent = p.label + ': ' + fmt(p.value);
      r.append(title);
      svg.append(r);
      if (points.length <= 16 || i % Math.ceil(points.length / 8) === 0) {
        const tx = document.createElementNS(NS, 'text');
        tx.setAttribute('x', String(pad + i * bw + bw / 2));
        tx.setAttribute('y', String(H + 16));
        tx.setAttribute('text-anchor', 'middle');
        tx.textContent = p.label;
        svg.append(tx);
      }
    });
    return svg;
  }

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // lineChart draws series of points ({at: Date, value}) over time on a scale from 0 to
  // top, one line each, with a legend when there are several.
  function lineChart(series, top, fmt, labelKey) {
    const all = series.flatMap((s) => s.points);
    if (!all.length) return h('p', { class: 'empty', i18n: 'no_history' });
    const W = 640;
    const H = 180;
    const pad = 44;
    const svg = svgEl('svg', { viewBox: `0 0 ${W} ${H + 40}`, role: 'img', 'aria-label': t(labelKey), class: 'chart' });
    let t0 = Math.min(...all.map((p) => p.at.getTime()));
    let t1 = Math.max(...all.map((p) => p.at.getTime()));
    if (t1 === t0) {
      t0 -= 3600000;
      t1 += 3600000;
    }
    const x = (ms) => pad + ((ms - t0) / (t1 - t0)) * (W - pad - 8);
    const y = (v) => 8 + (1 - Math.min(Math.max(v, 0), top) / top) * (H - 16);
    for (const v of [0, top / 2, top]) {
      svg.append(svgEl('line', { x1: pad, x2: W - 8, y1: y(v), y2: y(v), class: 'grid' }));
      svg.append(svgEl('text', { x: pad - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmt(v)));
    }
    svg.append(svgEl('text', { x: pad, y: H + 12 }, day(new Date(t0))));
    svg.append(svgEl('text', { x: W - 8, y: H + 12, 'text-anchor': 'end' }, day(new Date(t1))));
    series.forEach((s, i) => {
      const cls = 'series' + (i % 4);
      const pts = s.points.map((p) => `${x(p.at.getTime()).toFixed(1)},${y(p.value).toFixed(1)}`).join(' ');
      svg.append(svgEl('polyline', { points: pts, class: cls }));
      for (const p of s.points) {
        const c = svgEl('circle', { cx: x(p.at.getTime()).toFixed(1), cy: y(p.value).toFixed(1), r: 3, class: cls });
        c.append(svgEl('title', {}, `${s.label} · ${when(p.at.toISOString())}: ${fmt(p.value)}`));
        svg.append(c);
      }
      if (series.length > 1) svg.append(svgEl('text', { x: pad + i * 150, y: H + 32, class: cls }, '● ' + s.label));
    });
    return svg;
  }

  // weekGrid draws 7 days of 24 hours in the provider's time zone: each hour declared
  // available and answered, declared and missed, or not declared.
  function weekGrid(week) {
    let tz = week.timezone;
    try {
      new Intl.DateTimeFormat(lang, { timeZone: tz });
    } catch (e) {
      tz = undefined;
    }
    const dayOf = new Intl.DateTimeFormat(lang, { timeZone: tz, weekday: 'short', day: 'numeric' });
    const hourOf = new Intl.DateTimeFormat('en-GB', { timeZone: tz, hour: '2-digit', hourCycle: 'h23' });
    const whenThere = new Intl.DateTimeFormat(lang, { timeZone: tz, dateStyle: 'medium', timeStyle: 'short' });
    const rows = [];
    const byDay = new Map();
    for (const hr of week.hours) {
      const at = new Date(hr.start);
      const d = dayOf.format(at);
      if (!byDay.has(d)) {
        byDay.set(d, []);
        rows.push(d);
      }
      // The night clocks go back repeats an hour: its second one shares the first's cell.
      const hour = Number(hourOf.format(at));
      const cells = byDay.get(d);
      const same = cells.find((c) => c.hour === hour);
      if (same) same.hr = { ...same.hr, probes: same.hr.probes + hr.probes, declared: same.hr.declared || hr.declared };
      else cells.push({ hour, hr, at });
    }
    const now = Date.now();
    const cell = 14;
    const left = 70;
    const svg = svgEl('svg', { viewBox: `0 0 ${left + 24 * cell + 4} ${rows.length * cell + 24}`, role: 'img', class: 'chart week',
      'aria-label': t('uptime_week_summary', { answered: week.answered_hours, declared: week.declared_hours }) });
    for (const hh of [0, 6, 12, 18]) svg.append(svgEl('text', { x: left + hh * cell, y: 10 }, String(hh).padStart(2, '0') + ':00'));
    rows.forEach((d, r) => {
      svg.append(svgEl('text', { x: left - 6, y: 14 + r * cell + cell - 4, 'text-anchor': 'end' }, d));
      for (const { hour, hr, at } of byDay.get(d)) {
        const past = at.getTime() + 3600000 <= now;
        const before = !week.since || at.getTime() + 3600000 <= new Date(week.since).getTime();
        const state = hr.probes > 0 ? 'answered' : before ? 'before' : hr.declared ? (past ? 'missed' : 'open') : 'off';
        const rect = svgEl('rect', { x: left + hour * cell, y: 14 + r * cell, width: cell - 2, height: cell - 2, class: 'hour ' + state });
        rect.append(svgEl('title', {}, `${whenThere.format(at)}: ${t('hour_' + state)}${hr.probes ? ' (' + t('probes_answered', { n: hr.probes }) + ')' : ''}`));
        svg.append(rect);
      }
    });
    const legend = h('p', { class: 'legend' }, ['answered', 'missed', 'off', 'before'].map((s) => h('span', { class: 'key ' + s }, t('hour_' + s))));
    return h('div', {}, svg, legend);
  }

  // ---- the frame: header, tabs, live updates ----

  function renderHeader() {
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
  async function show() {
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
      r = (await PAGES[tab](main)) || null;
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
  async function runRefresh() {
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
  async function listen() {
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

  // ---- provider pages ----

  const PAGES = {};

  PAGES.overview = async (main) => {
    const node = h('div');
    const gpus = h('div');
    const offer = h('div');
    const cert = h('div');
    const notes = h('div');
    main.append(h('div', { class: 'grid' }, card('node', node), card('certificate', cert)),
      card('gpus', gpus), card('offer_as_seen', offer), card('notifications', notes));
    return async () => {
      fill(node, facts([
        ['peer_id', h('code', {}, status.peer_id)],
        ['version', status.version],
        ['peers', String(status.peers)],
        ['reachability', t('reach_' + (status.reachability || 'unknown'))],
        ['started', when(status.started_at)],
      ]));
      const [gs, own, app, ns] = await Promise.all([
        maybe('/v1/provider/gpus'), maybe('/v1/provider/offer'), maybe('/v1/apply'), maybe('/v1/notifications')]);
      fill(gpus, table(['gpu', 'model', 'uuid', 'temperature', 'throttling', 'gpu_state'],
        (gs || []).map((g) => [String(g.index), g.model, h('code', {}, g.uuid),
          g.error ? '–' : num(g.temperature_c, 0) + ' °C',
          (g.throttle || []).join(', ') || t('no'),
          h('span', { class: 'badge ' + g.state }, t('gpu_' + g.state) + (g.delisted_why ? ': ' + g.delisted_why : ''))]), 'no_gpus'));
      if (own && own.offer) {
        const o = own.offer;
        fill(offer, facts([
          ['region', o.region], ['availability', o.availability || '24/7'],
          ['egress', o.egress ? t('egress_' + o.egress) : t('no')],
          ['expires', when(o.expires_at)],
        ]), table(['model', 'gpus', 'price'], o.gpus.map((g) => [g.model, String(g.count), usdc(micro(g.price_micro_usdc_per_gpu_hour))])));
        if (o.withdrawn) offer.prepend(h('p', { class: 'warn' }, t('withdrawn') + ': ' + o.withdrawn));
      } else fill(offer, h('p', { class: 'empty', i18n: 'no_offer' }));
      if (app && app.certificate) {
        const c = app.certificate;
        fill(cert, facts([['tier', t('tier_' + c.tier)], ['expires', when(c.expires_at)], ['coordinator', h('code', {}, short(c.coordinator))]]));
      } else fill(cert, h('p', { class: 'empty', i18n: 'no_certificate' }));
      fill(notes, table(['received', 'from', 'subject'],
        (ns || []).slice(-20).reverse().map((n) => [when(n.received_at), short(n.from), n.subject + (n.body ? ': ' + n.body : '')])));
    };
  };

  PAGES.application = async (main) => {
    const box = h('div');
    const out = h('div');
    main.append(box, out);
    const app = await maybe('/v1/apply');
    if (!app) {
      applicationForm(box, out);
      return null;
    }
    let answer = null;
    return async () => {
      const a = (await maybe('/v1/apply')) || app;
      const rows = [['status', h('span', { class: 'badge ' + a.status }, t('status_' + a.status))],
        ['submitted', when(a.submitted_at)], ['updated', when(a.updated_at)], ['coordinator', h('code', {}, short(a.coordinator))]];
      if (a.tier) rows.push(['tier', t('tier_' + a.tier)]);
      if (a.decision_due && !a.decision_due.startsWith('0001')) rows.push(['decision_due', when(a.decision_due)]);
      if (a.message) rows.push(['message', a.message]);
      if (a.last_error) rows.push(['last_error', a.last_error]);
      const parts = [card('your_application', facts(rows))];
      if (a.status === 'info-requested') {
        // One answer box for the page's life: what is typed stays through refreshes.
        if (!answer) {
          const text = h('textarea', { rows: 4, required: true });
          const send = button('send_answer', () => busy(send, out, async () => {
            await api('POST', '/v1/apply/answer', { message: text.value });
            say(out, okBox('answer_sent'));
          }));
          answer = card('answer_question', field('your_answer', text), send);
        }
        parts.push(answer);
      }
      fill(box, ...parts);
    };
  };

  // applicationForm is the seed's application form: the fields and checks of `gpunex apply`
  // (protocol.Application); the node signs it and the coordinator checks it again.
  function applicationForm(box, out) {
    const f = {
      name: h('input', { autocomplete: 'name', required: true }),
      email: h('input', { type: 'email', autocomplete: 'email', required: true }),
      company: h('input', { autocomplete: 'organization' }),
      model: h('input', { required: true, placeholder: 'RTX-4090-24GB', autocomplete: 'off' }),
      count: h('input', { type: 'number', min: 1, value: 1, required: true }),
      ram: h('input', { type: 'number', min: 1, value: 64, required: true }),
      up: h('input', { type: 'number', min: 0, step: 'any', value: 1, required: true }),
      down: h('input', { type: 'number', min: 0, step: 'any', value: 1, required: true }),
      availability: h('input', { value: '24/7', required: true }),
      city: h('input', { required: true }),
      country: h('input', { required: true, maxlength: 2, placeholder: 'FR', pattern: '[A-Za-z]{2}' }),
      region: h('input', { required: true, placeholder: 'eu-west' }),
      ups: h('input', { type: 'checkbox' }),
      months: h('input', { type: 'number', min: 1, max: 60, value: 1, required: true }),
      notes: h('textarea', { rows: 2 }),
    };
    const submit = h('button', { type: 'submit', i18n: 'submit_application' });
    const form = h('form', {
      onsubmit: (ev) => {
        ev.preventDefault();
        busy(submit, out, async () => {
          const body = {
            name: f.name.value, email: f.email.value, company: f.company.value,
            gpus: [{
              model: f.model.value, count: Number(f.count.value), host_ram_gb: Number(f.ram.value),
              internet_up_gbps: Number(f.up.value), internet_down_gbps: Number(f.down.value), availability: f.availability.value,
              location: { city: f.city.value, country: f.country.value.toUpperCase(), region: f.region.value },
            }],
            ups: f.ups.checked, commitment_months: Number(f.months.value), maintenance_notes: f.notes.value,
          };
          await api('POST', '/v1/apply', body);
          say(out, okBox('application_sent'));
          show();
        });
      },
    }, h('p', { i18n: 'apply_intro' }),
    field('contact_name', f.name), field('contact_email', f.email), field('company', f.company),
    field('gpu_model', f.model, 'gpu_model_hint'), field('gpu_count', f.count), field('ram_gb', f.ram),
    field('up_gbps', f.up), field('down_gbps', f.down), field('availability', f.availability, 'availability_hint'),
    field('city', f.city), field('country', f.country), field('region', f.region), field('ups', f.ups),
    field('commitment_months', f.months), field('maintenance_notes', f.notes), submit);
    fill(box, card('apply', form));
  }

  PAGES.benchmarks = async (main) => {
    const out = h('div');
    const progress = h('pre', { class: 'log', 'aria-live': 'polite', hidden: true });
    const figures = h('div');
    const run = button('run_now', () => busy(run, out, async () => {
      progress.hidden = false;
      progress.textContent = '';
      await stream('POST', '/v1/bench/run', (s) => { progress.textContent += s; });
      say(out, okBox('bench_done'));
      historyAt = 0;
      await runRefresh();
    }));
    main.append(h('p', {}, run), out, progress, figures);
    return async () => {
      const [b, models] = await Promise.all([maybe('/v1/bench'), maybe('/v1/models')]);
      if (!b) {
        fill(figures, h('p', { class: 'empty', i18n: 'no_bench' }));
        return;
      }
      const a = b.attestation;
      const ref = {};
      for (const m of (models && models.models) || []) ref[m.model] = m;
      const parts = [facts([['measured', when(a.issued_at)], ['driver', a.driver_version || '–'], ['cuda', a.cuda_version || '–']])];
      parts.push(table(['model', 'uuid', 'fp32', 'fp16', 'tensor', 'mem_bw', 'perf_score', 'datasheet', 'verdict'],
        a.gpus.map((g) => {
          const d = ref[g.model];
          return [g.model, h('code', {}, short(g.uuid)), num(g.fp32_tflops), num(g.fp16_tflops), num(g.tensor_tflops),
            num(g.mem_bandwidth_gbps, 0), String(g.perf_score),
            d ? `${num(d.fp32_tflops)} / ${num(d.fp16_tflops)} / ${num(d.tensor_tflops)} / ${num(d.mem_bandwidth_gbps, 0)}` : '–',
            g.below ? h('span', { class: 'badge bad' }, t('below') + ': ' + g.below) : h('span', { class: 'badge good', i18n: 'passes' })];
        })));
      if (a.host_below) parts.push(h('p', { class: 'warn' }, t('delisted_why') + ': ' + a.host_below));
      // Each GPU's performance score run after run, and the host's figures.
      const hist = await providerHistory();
      const perGPU = new Map();
      for (const it of hist.bench || []) {
        for (const g of it.value.gpus || []) {
          const k = g.model + ' ' + short(g.uuid);
          if (!perGPU.has(k)) perGPU.set(k, []);
          perGPU.get(k).push({ at: new Date(it.at), value: g.perf_score });
        }
      }
      parts.push(card('bench_history', h('div', { id: 'bench-history' }, lineChart([...perGPU].map(([label, pts]) => ({ label, points: pts })), 100, (v) => num(v, 0), 'bench_history')),
        table(['measured', 'passing', 'storage_write', 'network_up', 'network_down'], (hist.bench || []).slice(-10).reverse().map((it) => {
          const v = it.value;
          const ok = (v.gpus || []).filter((g) => !g.below).length;
          return [when(it.at), `${ok} / ${(v.gpus || []).length}` + (v.host_below ? ' · ' + v.host_below : ''), num(v.storage_write_mbps, 0) + ' MB/s',
            num(v.up_mbps, 0) + ' Mbit/s', num(v.down_mbps, 0) + ' Mbit/s'];
        }))));

      if (a.gpus.some((g) => g.below)) parts.push(h('p', { i18n: 'delisted_check' }));
      if (b.enterprise_below) parts.push(h('p', { class: 'warn' }, t('enterprise_below') + ': ' + b.enterprise_below));
      // The link as the coordinator measured it is what counts; the provider's own
      // figures when there is no such receipt.
      const net = b.network_receipt || a.network || {};
      parts.push(card('storage_network', facts([
        ['storage_read', num(a.storage && a.storage.seq_read_mbps, 0) + ' MB/s'],
        ['storage_write', num(a.storage && a.storage.seq_write_mbps, 0) + ' MB/s'],
        ['network_up', num(net.up_mbps, 0) + ' Mbit/s'],
        ['network_down', num(net.down_mbps, 0) + ' Mbit/s'],
        ['measured_by', t(b.network_receipt ? 'by_coordinator' : 'by_provider')],
      ])));
      fill(figures, ...parts);
    };
  };

  PAGES.pricing = async (main) => {
    const out = h('div');
    const prices = h('div');
    const avail = h('div');
    const maint = h('div');
    main.append(out, card('prices', prices), card('availability', avail), card('maintenance', maint));
    let drawn = false;
    const draw = async () => {
      const own = await maybe('/v1/provider/offer');
      if (!own) {
        fill(prices, h('p', { class: 'empty', i18n: 'no_offer' }));
        return;
      }
      const rows = [];
      for (const g of own.offer.gpus) {
        const advice = await maybe('/v1/market?model=' + encodeURIComponent(g.model) + '&region=' + encodeURIComponent(own.offer.region));
        const rec = advice && advice.length ? advice[0].recommended_usdc : '';
        const input = h('input', { type: 'text', inputmode: 'decimal', size: 8, value: micro(g.price_micro_usdc_per_gpu_hour).replace(/0+$/, '').replace(/\.$/, ''), 'aria-label': t('new_price_for', { model: g.model }), 'data-model': g.model });
        const apply = button('apply_price', () => busy(apply, out, async () => {
          await api('POST', '/v1/provider/price', { model: g.model, usdc: input.value.replace(',', '.') });
          say(out, okBox('price_set', { model: g.model }));
          draw();
        }));
        rows.push([g.model, String(g.count), usdc(micro(g.price_micro_usdc_per_gpu_hour)), rec ? usdc(rec) : '–', h('span', { class: 'inline' }, input, apply)]);
      }
      fill(prices, table(['model', 'gpus', 'price', 'recommended', 'new_price'], rows), h('small', { i18n: 'price_unit' }));
    };
    const drawAvailability = async () => {
      const a = await maybe('/v1/provider/availability');
      const tz = h('input', { value: (a && a.timezone) || Intl.DateTimeFormat().resolvedOptions().timeZone });
      const windows = h('textarea', { rows: 4, placeholder: 'mon-fri 08:00-20:00' }, ((a && a.windows) || []).join('\n'));
      const save = button('save', () => busy(save, out, async () => {
        await api('PUT', '/v1/provider/availability', { timezone: tz.value, windows: windows.value.split('\n').map((s) => s.trim()).filter(Boolean) });
        say(out, okBox('availability_set'));
        drawAvailability();
      }));
      fill(avail, facts([['in_force', (a && a.text) || '24/7'], ['open_now', a && a.open_now ? t('yes') : t('no')],
        ['next_change', when(a && a.next_change)]]),
      field('timezone', tz), field('weekly_windows', windows, 'windows_hint'), save);
    };
    // Maintenance: a window (from, to) or a recurring rule, announced in the offer; the
    // form stays as typed while the list refreshes.
    const mList = h('div', { id: 'maintenance-list' });
    const mFrom = h('input', { type: 'datetime-local' });
    const mTo = h('input', { type: 'datetime-local' });
    const mRule = h('input', { placeholder: 'first sunday 02:00 2h Europe/Paris', autocomplete: 'off' });
    const mNote = h('input', { id: 'maintenance-note', autocomplete: 'off' });
    const mAdd = button('plan_maintenance', () => busy(mAdd, out, async () => {
      const body = { note: mNote.value };
      if (mRule.value.trim()) body.rule = mRule.value.trim();
      else {
        body.from = new Date(mFrom.value).toISOString();
        body.to = new Date(mTo.value).toISOString();
      }
      await api('POST', '/v1/provider/maintenance', body);
      say(out, okBox('maintenance_planned'));
      drawMaintenance();
    }));
    fill(maint, mList, h('div', { class: 'filters' }, field('from', mFrom), field('to', mTo), field('or_rule', mRule, 'rule_hint'), field('note', mNote), mAdd));
    const drawMaintenance = async () => {
      const m = await maybe('/v1/provider/maintenance');
      const planned = ((m && m.planned) || []).map((w) => {
        const remove = button('remove', () => busy(remove, out, async () => {
          await api('DELETE', '/v1/provider/maintenance/' + encodeURIComponent(w.id));
          drawMaintenance();
        }), 'danger');
        return [w.rule || `${when(w.from)} → ${when(w.to)}`, w.note || '', remove];
      });
      fill(mList, h('h3', { i18n: 'planned' }), table(['when', 'note', ''], planned),
        h('h3', { i18n: 'announced' }), table(['from', 'to', 'note'], ((m && m.announced) || []).map((w) => [when(w.from), when(w.to), w.note || ''])));
    };
    return async () => {
      if (!drawn) {
        drawn = true;
        await Promise.all([draw(), drawAvailability()]);
      }
      await drawMaintenance();
    };
  };

  PAGES.payments = async (main) => {
    const period = h('select', {}, ['week', 'month'].map((p) => h('option', { value: p, i18n: 'period_' + p })));
    period.value = 'month';
    const by = h('select', {}, ['model', 'gpu'].map((p) => h('option', { value: p, i18n: 'by_' + p })));
    const body = h('div');
    let last = null;
    const csv = button('export_csv', () => {
      if (!last) return;
      const lines = [['job', 'ended_at', 'model', 'gpus', 'seconds', 'charge_usdc', 'commission_usdc', 'net_usdc', 'paid', 'batch'].join(',')];
      for (const r of last.history || []) {
        lines.push([r.job, r.ended_at, r.model, r.gpus, r.seconds, r.charge_usdc, r.commission_usdc, r.net_usdc, r.paid, r.batch || ''].join(','));
      }
      saveFile(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' }), 'gpunex-earnings.csv');
    });
    const form = h('div', { class: 'inline' }, field('period', period), field('group_by', by), csv);
    // How the provider is paid: the form is drawn once (and after a save), so that what is
    // typed stays; where the coordinators stand is redrawn with the rest.
    const payout = h('div', { id: 'payout-settings' });
    const payoutOut = h('div');
    const deliveries = h('div', { id: 'payout-deliveries' });
    main.append(form, body, card('payout_settings', payout, payoutOut, h('h3', { i18n: 'payout_deliveries' }), deliveries));
    const drawDeliveries = (v) => fill(deliveries, table(['coordinator', 'state', 'error'], (v.deliveries || []).map((d) => [
      h('code', { title: d.coordinator }, short(d.coordinator)),
      d.delivered_at ? t('delivered_at', { when: when(d.delivered_at) }) : t('not_delivered'), d.error || '']), 'no_payout_settings'));
    const drawPayout = async () => {
      const v = await api('GET', '/v1/provider/payout');
      const s = v.settings || {};
      const method = h('select', { id: 'payout-method' }, ['usdc', 'bank'].map((m) => h('option', { value: m, i18n: 'method_' + m })));
      method.value = s.method || 'usdc';
      const schedule = h('select', {}, ['weekly', 'monthly'].map((m) => h('option', { value: m, i18n: 'schedule_' + m })));
      schedule.value = s.schedule || 'weekly';
      const addr = h('input', { id: 'payout-address', value: s.solana_address || '', size: 44, autocomplete: 'off', spellcheck: 'false' });
      const holder = h('input', { id: 'payout-holder', value: s.account_name || '', autocomplete: 'name' });
      const iban = h('input', { id: 'payout-iban', value: s.iban || '', size: 34, autocomplete: 'off', spellcheck: 'false' });
      const bic = h('input', { id: 'payout-bic', value: s.bic || '', size: 11, autocomplete: 'off', spellcheck: 'false' });
      const usdcFields = h('div', {}, field('solana_address', addr));
      const bankFields = h('div', {}, field('account_name', holder), field('iban', iban, 'iban_hint'), field('bic', bic));
      const sync = () => {
        usdcFields.hidden = method.value !== 'usdc';
        bankFields.hidden = method.value !== 'bank';
      };
      method.addEventListener('change', sync);
      sync();
      const save = button('save_payout', () => busy(save, payoutOut, async () => {
        const req = { method: method.value, schedule: schedule.value };
        if (method.value === 'bank') Object.assign(req, { account_name: holder.value, iban: iban.value, bic: bic.value });
        else req.solana_address = addr.value;
        const nv = await api('PUT', '/v1/provider/payout', req);
        say(payoutOut, okBox('payout_saved'));
        drawDeliveries(nv);
        await drawPayout();
      }));
      const reset = v.from_config ? null : button('payout_from_config', () => busy(reset, payoutOut, async () => {
        const nv = await api('DELETE', '/v1/provider/payout');
        say(payoutOut, okBox('payout_reset'));
        drawDeliveries(nv);
        await drawPayout();
      }), 'danger');
      const now = v.settings ? `${t('method_' + s.method)}, ${t('schedule_' + s.schedule)}: ${s.method === 'bank' ? s.account_name + ' · ' + s.iban : s.solana_address}` : t('no_payout_settings');
      fill(payout, facts([['paid_to', h('span', { id: 'payout-now' }, now)], ['set_in', t(v.from_config ? 'set_in_config' : 'set_in_dashboard')]]),
        h('div', { class: 'filters' }, field('method', method), field('schedule', schedule)), usdcFields, bankFields, h('p', { class: 'inline' }, save, reset));
      drawDeliveries(v);
    };
    drawPayout().catch((e) => say(payoutOut, errorBox(e)));
    const draw = async () => {
      const e = await api('GET', `/v1/earnings?period=${period.value}&by=${by.value}`);
      last = e;
      const days = new Map();
      for (let d = new Date(e.from); d < new Date(e.to); d = new Date(d.getTime() + 86400000)) days.set(day(d), 0);
      for (const r of e.history || []) {
        const k = day(new Date(r.ended_at));
        days.set(k, (days.get(k) || 0) + r.net_micro_usdc);
      }
      fill(body, 
        h('div', { class: 'grid' },
          card('earned_period', h('p', { class: 'big', id: 'earned-total' }, usdc(e.total_usdc))),
          card('pending', h('p', { class: 'big', id: 'earned-pending' }, usdc(e.pending_usdc))),
          card('paid_all_time', h('p', { class: 'big' }, usdc(e.paid_usdc)))),
        card('earnings_by_day', barChart([...days].map(([label, value]) => ({ label, value })), (v) => usdc(micro(v)), 'earnings_by_day')),
        card('by_' + by.value, table(['key', 'jobs', 'gpu_hours', 'net'], (e.groups || []).map((g) => [g.key, String(g.jobs), num(g.gpu_seconds / 3600, 2), usdc(g.net_usdc)]))),
        card('jobs_paid_for', table(['job', 'ended', 'model', 'gpus', 'charge', 'commission', 'net', 'payout'],
          (e.history || []).map((r) => [h('code', {}, r.job), when(r.ended_at), r.model, String(r.gpus), usdc(r.charge_usdc), usdc(r.commission_usdc), usdc(r.net_usdc),
            r.paid ? t('paid') : t('pending')]))),
        card('payouts', table(['batch', 'date', 'amount', 'method', 'state', 'transaction'],
          (e.payouts || []).map((p) => [h('code', {}, short(p.batch)), when(p.issued_at), usdc(p.amount_usdc), p.method, p.paid ? t('paid') : p.state,
            p.transaction ? link(p.explorer, short(p.transaction), 'tx') : '–']))),
        (e.unreachable || []).length ? h('p', { class: 'warn' }, t('coordinators_unreachable') + ': ' + e.unreachable.join(', ')) : null);
    };
    period.addEventListener('change', draw);
    by.addEventListener('change', draw);
    // Earnings come from every coordinator the provider trusts: asked at most every 10 s.
    let drawnAt = 0;
    return async () => {
      if (Date.now() - drawnAt < 10000) return;
      drawnAt = Date.now();
      await Promise.all([draw(), api('GET', '/v1/provider/payout').then(drawDeliveries)]);
    };
  };

  // history reads the provider's own history (scores, benchmark runs, the week's probes)
  // at most every 10 s: the Benchmarks and Performance tabs share it.
  let historyAt = 0;
  let historyLast = null;
  async function providerHistory() {
    if (!historyLast || Date.now() - historyAt > 10000) {
      historyLast = await api('GET', '/v1/provider/history?days=30');
      historyAt = Date.now();
    }
    return historyLast;
  }
  const points = (items, f) => items.map((it) => ({ at: new Date(it.at), value: f(it.value) }));

  PAGES.performance = async (main) => {
    const body = h('div');
    main.append(body);
    return async () => {
      const [scores, jobs, hist] = await Promise.all([maybe('/v1/scores?provider=' + encodeURIComponent(status.peer_id)), maybe('/v1/jobs'), providerHistory()]);
      const parts = [];
      for (const s of scores || []) {
        parts.push(card('score', h('p', { class: 'big' }, String(s.score), h('small', {}, ' ' + (s.trend > 0 ? '▲ +' : s.trend < 0 ? '▼ ' : '') + (s.trend || ''))),
          facts([['uptime', pct(s.uptime)], ['completion', pct(s.completion)], ['consistency', pct(s.benchmark_consistency)],
            ['coordinator', h('code', {}, short(s.coordinator))], ['issued', when(s.issued_at)]]),
          barChart([{ label: t('uptime'), value: s.uptime * 100 }, { label: t('completion'), value: s.completion * 100 }, { label: t('consistency'), value: s.benchmark_consistency * 100 }],
            (v) => num(v, 1) + ' %', 'score_components'),
          (s.why || []).length ? h('div', {}, h('h3', { i18n: 'why' }), h('ul', { id: 'score-why' }, s.why.map((w) => h('li', {}, nodeText(w))))) : null));
      }
      if (!parts.length) parts.push(h('p', { class: 'empty', i18n: 'no_score' }));
      // The trend: the score and its uptime over 30 days, one pair of lines per coordinator.
      const byCoord = new Map();
      for (const it of hist.scores || []) {
        if (!byCoord.has(it.value.coordinator)) byCoord.set(it.value.coordinator, []);
        byCoord.get(it.value.coordinator).push(it);
      }
      const series = [];
      for (const [c, items] of byCoord) {
        const who = byCoord.size > 1 ? ' ' + short(c) : '';
        series.push({ label: t('score') + who, points: points(items, (v) => v.score) });
        series.push({ label: t('uptime') + ' %' + who, points: points(items, (v) => v.uptime * 100) });
      }
      parts.push(card('score_history', h('div', { id: 'score-history' }, lineChart(series, 100, (v) => num(v, 0), 'score_history'))));
      const w = hist.week;
      parts.push(card('uptime_week', h('p', { id: 'uptime-week' }, t('uptime_week_summary', { answered: w.answered_hours, declared: w.declared_hours }),
        w.declared_hours ? ' (' + pct(w.answered_hours / w.declared_hours) + ')' : ''),
      weekGrid(w), h('small', {}, t('uptime_week_hint', { tz: w.timezone }))));
      const mine = (jobs || []).filter((j) => j.side === 'provider' && j.state === 'ended');
      const done = mine.filter((j) => j.exit_code === 0).length;
      parts.push(card('jobs_done', facts([['completed', String(done)], ['failed', String(mine.length - done)]])));
      fill(body, ...parts);
    };
  };

  // ---- jobs (every role) ----

  let openJob = null;
  // placements keeps how each job placed by model from this page found its provider (the
  // answer of POST /v1/jobs; the node does not keep it).
  const placements = {};

  PAGES.jobs = async (main) => {
    const list = h('div');
    const detail = h('div');
    main.append(list, detail);
    if (openJob) jobDetail(detail, openJob);
    return async () => {
      const js = (await api('GET', '/v1/jobs')) || [];
      fill(list, table(['job', 'side', 'state', 'gpus', 'model', 'seconds', 'cost', 'exit', 'peer'],
        js.map((j) => [h('a', { href: '#jobs', onclick: (ev) => { ev.preventDefault(); openJob = j.id; jobDetail(detail, j.id); } }, j.id),
          t('side_' + j.side), h('span', { class: 'badge ' + j.state }, t('state_' + j.state)), String(j.gpus), j.model, String(j.seconds), usdc(j.cost_usdc),
          j.state === 'ended' ? `${j.exit_code} ${j.exit_reason || ''}` : '–', h('code', {}, short(j.peer))]), 'no_jobs'));
      if (openJob) refreshJob();
    };
  };

  let jobAbort = null;
  let refreshJob = () => {};

  function jobDetail(box, id) {
    if (jobAbort) jobAbort.abort();
    jobAbort = new AbortController();
    const signal = jobAbort.signal;
    const head = h('div');
    const out = h('div');
    const log = h('pre', { class: 'log', id: 'job-log', 'aria-live': 'polite', tabindex: 0 });
    fill(box, card('job', head, out, h('h3', { i18n: 'output' }), log));
    refreshJob = async () => {
      const j = await api('GET', '/v1/jobs/' + id);
      const rows = [['job', h('code', {}, j.id)], ['state', h('span', { class: 'badge ' + j.state, id: 'job-state' }, t('state_' + j.state))],
        ['provider', h('code', {}, short(j.peer))], ['gpus', `${j.gpus} × ${j.model}`], ['price', usdc(j.price_usdc_per_gpu_hour)],
        ['started', when(j.started_at)], ['ends', when(j.ends_at)]];
      const pl = placements[id];
      if (pl) {
        rows.push(['placement', h('span', { id: 'job-placement' }, pl.chosen)]);
        const passed = (pl.attempts || []).filter((a) => a.outcome !== 'accepted');
        if (passed.length) rows.push(['passed_over', passed.map((a) => `${a.offer} (${t('outcome_' + a.outcome)}: ${a.error || ''})`).join('; ')]);
      }
      if (j.metered_seconds) rows.push(['metered', t('metered_seconds', { seconds: j.metered_seconds })]);
      if (j.state === 'ended') {
        rows.push(['exit', h('span', { id: 'job-exit' }, `${j.exit_code} ${j.exit_reason || ''}`)], ['seconds', String(j.seconds)],
          ['cost', h('span', { id: 'job-cost' }, usdc(j.cost_usdc))],
          ['receipt', t(j.receipt_countersigned ? 'receipt_both' : j.receipt ? 'receipt_provider' : 'receipt_none')]);
        if (j.disputed) rows.push(['disputed', j.error || t('yes')]);
      }
      if (j.error && !j.disputed) rows.push(['error', j.error]);
      const acts = [];
      if (j.side === 'renter' && (j.state === 'running' || j.state === 'leased')) {
        const cancel = button('cancel', () => busy(cancel, out, async () => {
          await api('POST', `/v1/jobs/${id}/cancel`);
          refreshJob();
        }), 'danger');
        acts.push(cancel);
      }
      if (j.side === 'renter' && j.state === 'ended') {
        // Through a one-time ticket: the browser saves the output to disk as it arrives,
        // however large, instead of this page holding it.
        const get = button('fetch_output', () => busy(get, out, async () => {
          const tk = await api('POST', '/v1/dashboard/download', { path: `/v1/jobs/${encodeURIComponent(id)}/output` });
          const a = h('a', { href: tk.url, download: `${id}-output.tar` });
          document.body.append(a);
          a.click();
          a.remove();
        }));
        acts.push(get);
      }
      fill(head, facts(rows), h('p', { class: 'inline' }, acts));
      return j;
    };
    refreshJob().then(() => {
      return stream('GET', `/v1/jobs/${id}/logs?follow=1`, (s) => {
        log.textContent += s;
        log.scrollTop = log.scrollHeight;
      }, signal).then(() => refreshJob());
    }).catch((e) => {
      if (!signal.aborted) say(out, errorBox(e));
    });
  }

  // ---- renter pages ----

  let chosenOffer = '';

  PAGES.offers = async (main) => {
    const f = {
      model: h('input', { placeholder: 'H100-80GB', autocomplete: 'off' }),
      region: h('input', { placeholder: 'eu-west', autocomplete: 'off' }),
      tier: h('select', {}, h('option', { value: '', i18n: 'any' }), h('option', { value: 'community', i18n: 'tier_community' }), h('option', { value: 'enterprise', i18n: 'tier_enterprise' })),
      max: h('input', { inputmode: 'decimal', size: 6 }),
      egress: h('input', { type: 'checkbox' }),
      sort: h('select', {}, ['merit', 'price', 'score', 'perf'].map((s) => h('option', { value: s, i18n: 'sort_' + s }))),
    };
    const results = h('div', { id: 'offer-results' });
    const out = h('div');
    const search = h('button', { type: 'submit', i18n: 'search' });
    const query = () => {
      const q = new URLSearchParams();
      if (f.model.value) q.set('model', f.model.value);
      if (f.region.value) q.set('region', f.region.value);
      if (f.tier.value) q.set('tier', f.tier.value);
      if (f.max.value) q.set('max_price', f.max.value.replace(',', '.'));
      if (f.egress.checked) q.set('egress', 'true');
      q.set('sort', f.sort.value);
      return q.toString();
    };
    const draw = async () => {
      const rows = await api('GET', '/v1/offers?' + query());
      fill(results, table(['provider', 'model', 'gpus', 'price', 'region', 'tier', 'score', 'perf', 'vs_market', 'merit', ''],
        rows.map((r) => [h('code', { title: r.provider }, short(r.provider)), r.model, String(r.gpus),
          h('span', { class: 'price', 'data-offer': r.id }, usdc(r.price_usdc_per_gpu_hour)), r.region,
          r.tier ? t('tier_' + r.tier) : '–', r.score === undefined || r.score === null ? '–' : String(r.score),
          num(r.rank && r.rank.perf, 2), num(r.rank && r.rank.price_vs_market, 2), num(r.rank && r.rank.merit, 3),
          button('rent', () => { chosenOffer = r.id; location.hash = '#run'; })]), 'no_offers'));
    };
    main.append(h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); busy(search, out, draw); } },
      field('model', f.model), field('region', f.region), field('tier', f.tier), field('max_price', f.max), field('egress_only', f.egress),
      field('sort_by', f.sort), search), out, results);
    // Searched once now and on each submit: a search asks the network, not just the node.
    await draw();
    return null;
  };

  PAGES.run = async (main) => {
    const f = {
      offer: h('input', { value: chosenOffer, placeholder: t('offer_placeholder'), autocomplete: 'off' }),
      model: h('input', { placeholder: 'H100-80GB', autocomplete: 'off' }),
      region: h('input', { autocomplete: 'off' }),
      tier: h('select', {}, h('option', { value: '', i18n: 'any' }), h('option', { value: 'community', i18n: 'tier_community' }), h('option', { value: 'enterprise', i18n: 'tier_enterprise' })),
      image: h('input', { placeholder: 'docker.io/library/python:3.12', autocomplete: 'off' }),
      archive: h('input', { placeholder: '/path/to/image.tar', autocomplete: 'off' }),
      command: h('input', { placeholder: 'python train.py', autocomplete: 'off' }),
      env: h('textarea', { rows: 2, placeholder: 'KEY=value' }),
      gpus: h('input', { type: 'number', min: 1, value: 1 }),
      hours: h('input', { type: 'number', min: 0.01, step: 'any', value: 1 }),
      max: h('input', { inputmode: 'decimal', size: 6 }),
      egress: h('input', { type: 'checkbox' }),
    };
    const out = h('div', { id: 'run-result' });
    const go = h('button', { type: 'submit', i18n: 'start_job' });
    main.append(h('form', {
      onsubmit: (ev) => {
        ev.preventDefault();
        busy(go, out, async () => {
          say(out, h('p', { i18n: 'negotiating' }));
          const req = {
            offer: f.offer.value.trim() || undefined, model: f.offer.value.trim() ? undefined : f.model.value.trim() || undefined,
            region: f.offer.value.trim() ? undefined : f.region.value.trim() || undefined,
            tier: f.offer.value.trim() ? undefined : f.tier.value || undefined,
            image: f.image.value.trim() || undefined, image_archive: f.archive.value.trim() || undefined,
            args: splitArgs(f.command.value), env: f.env.value.split('\n').map((s) => s.trim()).filter(Boolean),
            gpus: Number(f.gpus.value), max_seconds: Math.ceil(Number(f.hours.value) * 3600),
            max_price_usdc: f.max.value.replace(',', '.') || undefined, egress: f.egress.checked,
          };
          const j = await api('POST', '/v1/jobs', req);
          if (j.placement) placements[j.id] = j.placement;
          openJob = j.id;
          location.hash = '#jobs';
        });
      },
    }, h('p', { i18n: 'run_intro' }), field('offer', f.offer), field('or_model', f.model), field('region', f.region), field('tier', f.tier),
    field('image', f.image), field('image_archive', f.archive), field('command', f.command), field('env', f.env, 'env_hint'),
    field('gpus', f.gpus), field('max_hours', f.hours), field('max_price', f.max, 'max_price_hint'), field('egress', f.egress), go), out);
    return null;
  };

  // splitArgs splits a command line on spaces, keeping quoted parts whole.
  function splitArgs(s) {
    const out = [];
    const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
    let m;
    while ((m = re.exec(s))) out.push(m[1] !== undefined ? m[1] : m[2] !== undefined ? m[2] : m[3]);
    return out;
  }

  PAGES.wallet = async (main) => {
    const body = h('div');
    const out = h('div');
    const amount = h('input', { inputmode: 'decimal', size: 8 });
    const deposit = button('deposit', () => busy(deposit, out, async () => {
      await api('POST', '/v1/wallet/deposit', { usdc: amount.value.replace(',', '.') });
      say(out, okBox('deposited'));
      runRefresh();
    }));
    main.append(body, card('deposit', field('amount_usdc', amount), deposit, out));
    return async () => {
      const b = await api('GET', '/v1/wallet/balance');
      fill(body, h('div', { class: 'grid' },
        card('available', h('p', { class: 'big' }, usdc(b.available_usdc))),
        card('held', h('p', { class: 'big' }, usdc(b.held_usdc)))),
      card('account', facts([['deposited', usdc(b.deposited_usdc)], ['charged', usdc(b.charged_usdc)],
        ['coordinator', h('code', {}, short(b.coordinator))], ['wallet', b.wallet ? h('code', {}, b.wallet) : '–'],
        ['wallet_usdc', b.wallet_usdc ? usdc(b.wallet_usdc) : '–']])),
      card('holds', table(['job', 'provider', 'amount', 'state', 'charge', 'expires'],
        (b.holds || []).map((x) => [h('code', {}, x.job), h('code', {}, short(x.provider)), usdc(x.amount_usdc), x.state, usdc(x.charge_usdc), when(x.expires_at)]))));
    };
  };

  // ---- coordinator pages ----

  PAGES.applications = async (main) => {
    const filter = h('select', {}, ['pending', 'info-requested', 'approved', 'rejected', 'revoked', ''].map((s) => h('option', { value: s, i18n: s ? 'status_' + s : 'all' })));
    const list = h('div', { id: 'application-queue' });
    const detail = h('div');
    main.append(field('status', filter), list, detail);
    const draw = async () => {
      const apps = (await api('GET', '/v1/coordinator/applications?status=' + encodeURIComponent(filter.value))) || [];
      fill(list, table(['id', 'provider', 'status', 'proposed_tier', 'submitted', 'decision_due', ''],
        apps.map((a) => [h('code', {}, a.id), h('code', { title: a.provider }, short(a.provider)),
          h('span', { class: 'badge ' + a.status }, t('status_' + a.status)), a.proposed_tier ? t('tier_' + a.proposed_tier) : '–',
          when(a.submitted_at), h('span', { class: a.overdue ? 'warn' : '' }, when(a.decision_due)),
          button('open', () => applicationDetail(detail, a.id, draw))]), 'queue_empty'));
    };
    filter.addEventListener('change', draw);
    return draw;
  };

  // applicationDetail shows one application with its audit trail and, while it waits for a
  // decision, the decision form; doneKey is a message to show (after a decision).
  async function applicationDetail(box, id, after, doneKey) {
    const a = await api('GET', '/v1/coordinator/applications/' + encodeURIComponent(id));
    const app = a.application || {};
    const out = h('div', {}, doneKey ? okBox(doneKey) : null);
    const action = h('select', {}, ['approve', 'reject', 'request-info'].map((s) => h('option', { value: s, i18n: 'action_' + s })));
    const tier = h('select', {}, ['community', 'enterprise'].map((s) => h('option', { value: s, i18n: 'tier_' + s })));
    tier.value = a.proposed_tier || 'community';
    const message = h('textarea', { rows: 3 });
    const actor = h('input', { autocomplete: 'username', required: true });
    actor.value = localStorage.getItem('gpunex-actor') || '';
    const decide = button('decide', () => busy(decide, out, async () => {
      localStorage.setItem('gpunex-actor', actor.value);
      await api('POST', `/v1/coordinator/applications/${encodeURIComponent(id)}/decision`, { action: action.value, tier: tier.value, message: message.value, actor: actor.value });
      await after();
      await applicationDetail(box, id, after, 'decision_recorded');
    }));
    const gpus = (app.gpus || []).map((g) => `${g.count} × ${g.model}`).join(', ');
    const loc = ((app.gpus || [])[0] || {}).location || {};
    fill(box, card('application',
      facts([['id', h('code', {}, a.id)], ['provider', h('code', {}, a.provider)], ['status', t('status_' + a.status)],
        ['contact', app.name ? `${app.name} <${app.email || ''}>` + (app.company ? ', ' + app.company : '') : '–'], ['gpus', gpus || '–'],
        ['location', [loc.city, loc.country, loc.region].filter(Boolean).join(', ') || '–'],
        ['commitment_months', String(app.commitment_months || 0)], ['ups', app.ups ? t('yes') : t('no')],
        ['detected', (app.detected || []).map((g) => `${g.count} × ${g.model}` + (g.simulated ? ' (' + t('simulated') + ')' : '')).join(', ') || '–'],
        ['differences', (app.differences || []).join('; ') || t('none_found')],
        ['case_by_case', (a.case_by_case || []).join('; ') || '–'],
        ['link_gaps', (a.link_gaps || []).join('; ') || '–'],
        ['applicant_answer', app.answer || '–'],
        ['proposed_tier', a.proposed_tier ? t('tier_' + a.proposed_tier) : '–'], ['tier_reasons', (a.tier_reasons || []).join('; ') || '–'],
        ['measured_link', a.measured_link ? `${num(a.measured_link.up_mbps, 0)} / ${num(a.measured_link.down_mbps, 0)} Mbit/s, ${num(a.measured_link.rtt_ms, 0)} ms` : '–']]),
      h('h3', { i18n: 'audit_trail' }),
      table(['when', 'actor', 'action', 'detail'], (a.events || []).map((e) => [when(e.at), e.actor, e.action, e.detail || ''])),
      a.status === 'pending' || a.status === 'info-requested'
        ? h('div', { class: 'decision' }, field('action', action), field('tier', tier), field('note', message), field('your_name', actor), decide)
        : null, out));
  }

  PAGES.providers = async (main) => {
    const list = h('div');
    const out = h('div');
    main.append(out, list);
    // One reason field per provider for the page's life, and no redraw while one is being
    // typed in: what is typed stays.
    const reasons = {};
    return async () => {
      if (list.contains(document.activeElement) && document.activeElement.tagName === 'INPUT') return;
      const [scores0, approved] = await Promise.all([maybe('/v1/scores'), maybe('/v1/coordinator/applications?status=approved')]);
      const scores = (scores0 || []).filter((s) => s.coordinator === status.peer_id);
      const tierOf = {};
      const certOf = {};
      for (const a of approved || []) {
        tierOf[a.provider] = a.tier;
        certOf[a.provider] = a;
      }
      // A certificate within a week of its expiry is marked: its renewal is due.
      const cert = (p) => {
        const a = certOf[p];
        if (!a || !a.certificate_expires) return '–';
        const soon = new Date(a.certificate_expires).getTime() - Date.now() < 7 * 86400000;
        return h('span', { class: soon ? 'badge bad' : '' }, `#${a.certificate_serial} · ${t('expires')} ${when(a.certificate_expires)}`);
      };
      fill(list, table(['provider', 'tier', 'certificate', 'score', 'uptime', 'completion', 'consistency', 'trend', 'issued', ''],
        scores.map((s) => {
          const reason = reasons[s.provider] || (reasons[s.provider] = h('input', { 'aria-label': t('revoke_reason'), placeholder: t('revoke_reason'), size: 12 }));
          const revoke = button('revoke', () => busy(revoke, out, async () => {
            await api('POST', '/v1/coordinator/revoke', { provider: s.provider, reason: reason.value, actor: localStorage.getItem('gpunex-actor') || 'dashboard' });
            say(out, okBox('revoked', { provider: short(s.provider) }));
          }), 'danger');
          return [h('code', { title: s.provider }, short(s.provider)), tierOf[s.provider] ? t('tier_' + tierOf[s.provider]) : '–', cert(s.provider), String(s.score), pct(s.uptime), pct(s.completion), pct(s.benchmark_consistency),
            String(s.trend || 0), when(s.issued_at), h('span', { class: 'inline' }, reason, revoke)];
        })));
    };
  };

  PAGES.payouts = async (main) => {
    const out = h('div');
    const list = h('div', { id: 'batches' });
    const detail = h('div');
    const run = button('run_payouts', () => busy(run, out, async () => {
      const b = await api('POST', '/v1/payouts/run', { now: true });
      say(out, okBox('batch_done', { batch: short(b.batch_id), total: usdc(b.total_usdc), state: b.state }));
      runRefresh();
    }));
    main.append(h('p', {}, run), out, list, detail);
    return async () => {
      const bs = (await maybe('/v1/payouts')) || [];
      fill(list, table(['batch', 'date', 'state', 'payouts', 'total', 'audit', ''],
        bs.map((b) => [h('code', {}, short(b.batch_id)), when(b.created_at), t('batch_' + b.state), String((b.payouts || []).length), usdc(b.total_usdc),
          b.merkle_root ? h('code', { title: b.merkle_root }, short(b.merkle_root)) : '–', button('open', () => batchDetail(detail, b))])));
    };
  };

  function batchDetail(box, b) {
    const out = h('div');
    const reference = h('input', { autocomplete: 'off', size: 16 });
    const confirm = button('confirm_bank', () => busy(confirm, out, async () => {
      await api('POST', `/v1/payouts/${encodeURIComponent(b.batch_id)}/confirm`, { reference: reference.value });
      say(out, okBox('confirmed'));
    }));
    const bank = button('bank_file', () => busy(bank, out, async () => {
      const f = await api('GET', `/v1/payouts/${encodeURIComponent(b.batch_id)}/bank?format=csv`);
      say(out, h('pre', { class: 'log' }, f.file));
    }));
    fill(box, card('batch', facts([['batch', h('code', {}, b.batch_id)], ['state', t('batch_' + b.state)], ['total', usdc(b.total_usdc)],
      ['fees', num(b.fees_lamports, 0) + ' lamports']]),
    table(['provider', 'method', 'amount', 'receipts', 'transaction'], (b.payouts || []).map((p) => [h('code', { title: p.provider }, short(p.provider)), p.method,
      usdc(p.amount_usdc), String(p.receipts),
      p.transaction ? link(p.explorer, short(p.transaction), 'tx') : '–'])),
    h('div', { class: 'inline' }, bank, (b.payouts || []).some((p) => p.method === 'bank' && !p.paid) ? [field('bank_reference', reference), confirm] : null), out));
  }

  PAGES.market = async (main) => {
    const body = h('div');
    main.append(body);
    return async () => {
      const rows = (await maybe('/v1/market')) || [];
      fill(body, table(['model', 'region', 'listed_gpus', 'providers', 'median_list', 'median_lease', 'leased_hours', 'utilisation', 'recommended', 'coordinator'],
        rows.map((m) => [m.model, m.region || t('all'), String(m.listed_gpus), String(m.listed_providers), usdc(m.median_list_usdc), usdc(m.median_lease_usdc),
          m.leased_gpu_hours, pct((m.utilisation_permille || 0) / 1000), usdc(m.recommended_usdc), h('code', {}, short(m.coordinator))])));
    };
  };

  PAGES.disputes = async (main) => {
    const body = h('div');
    const out = h('div');
    main.append(out, body);
    // One note field per dispute for the page's life, and no redraw while one is typed in.
    const notes = {};
    return async () => {
      if (body.contains(document.activeElement) && document.activeElement.tagName === 'INPUT') return;
      const ds = (await maybe('/v1/disputes?all=1')) || [];
      fill(body, table(['job', 'renter', 'provider', 'state', 'claimed', 'renter_says', 'floor', 'reason', ''],
        ds.map((d) => {
          const note = notes[d.job] || (notes[d.job] = h('input', { 'aria-label': t('decision_note'), placeholder: t('decision_note'), size: 16, autocomplete: 'off' }));
          const decide = (side) => {
            const b = button('for_' + side, () => busy(b, out, async () => {
              await api('POST', `/v1/disputes/${encodeURIComponent(d.job)}/resolve`, { for: side, note: note.value });
              say(out, okBox('decision_recorded'));
              // The note was used: the row is redrawn decided, even if the note keeps focus.
              if (body.contains(document.activeElement)) document.activeElement.blur();
              runRefresh();
            }));
            return b;
          };
          return [h('code', {}, d.job), h('code', {}, short(d.renter)), h('code', {}, short(d.provider)), t('dispute_' + d.state), usdc(d.claimed_usdc),
            usdc(d.renter_says_usdc), usdc(d.floor_usdc), d.reason, d.state === 'open' ? h('span', { class: 'inline' }, note, decide('provider'), decide('renter')) : usdc(d.charged_usdc)];
        })));
    };
  };

  // ---- start ----

  function translateStatic() {
    document.documentElement.lang = lang;
    for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
  }

  async function start() {
    // The messages and the node's status at once: the first page is drawn from both.
    const [messages, st] = await Promise.all([
      fetch('/ui/assets/messages.json', { credentials: 'same-origin' }).then((r) => r.json()),
      api('GET', '/v1/status')]);
    M = messages;
    status = st;
    lang = pickLanguage();
    const sel = document.getElementById('lang');
    sel.value = lang;
    sel.addEventListener('change', () => {
      lang = sel.value;
      localStorage.setItem('gpunex-lang', lang);
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
})();
