// Building the page. Everything a peer publishes is written as text (textContent), never
// as markup.
import { t } from './i18n.js';

export function h(tag, attrs, ...kids) {
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
export function field(key, input, hint) {
  if (!input.id) input.id = 'f-' + key + '-' + Math.random().toString(36).slice(2, 7);
  return h('div', { class: 'field' }, h('label', { for: input.id, i18n: key }), input,
    hint ? h('small', { i18n: hint }) : null);
}

export function table(heads, rows, empty) {
  if (!rows.length) return h('p', { class: 'empty', i18n: empty || 'none' });
  return h('div', { class: 'scroll' }, h('table', {},
    h('thead', {}, h('tr', {}, heads.map((k) => h('th', { scope: 'col', i18n: k || null })))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))));
}

export function card(titleKey, ...kids) {
  return h('section', { class: 'card' }, h('h2', { i18n: titleKey }), ...kids);
}

export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.flatMap(([k, v]) => [h('dt', { i18n: k }), h('dd', {}, v)]));
}

export function errorBox(err) {
  return h('p', { class: 'error', role: 'alert' }, String(err && err.message ? err.message : err));
}

export function okBox(key, vars) {
  return h('p', { class: 'ok', role: 'status' }, t(key, vars));
}

export function say(box, node) {
  fill(box, node);
}

// fill replaces an element's children, leaving out the parts a condition left null.
export function fill(e, ...kids) {
  e.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
}

export function button(key, onclick, cls) {
  return h('button', { type: 'button', class: cls, i18n: key, onclick });
}

// busy runs an action with its button disabled and shows the outcome in box.
export async function busy(btn, box, action) {
  btn.disabled = true;
  fill(box);
  try {
    await action();
  } catch (e) {
    say(box, errorBox(e));
  } finally {
    btn.disabled = false;
  }
}

// saveFile hands a blob to the browser as a download.
export function saveFile(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

// link makes a link to a page outside the node (a payout's explorer page) only for an
// http(s) address; anything else is shown as text.
export function link(href, text, cls) {
  let ok = false;
  try {
    ok = ['https:', 'http:'].includes(new URL(href).protocol);
  } catch (e) {
    ok = false;
  }
  return ok ? h('a', { href, rel: 'noopener noreferrer', target: '_blank', class: cls }, text) : h('code', { class: cls }, text);
}

export function short(id) {
  return id && id.length > 16 ? id.slice(0, 6) + '…' + id.slice(-6) : id || '–';
}
