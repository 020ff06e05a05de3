// Charts, drawn as SVG from the node's own data.
import { h } from './dom.js';
import { day, lang, t, when } from './i18n.js';

export function barChart(points, fmt, labelKey) {
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
export function lineChart(series, top, fmt, labelKey) {
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
export function weekGrid(week) {
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
