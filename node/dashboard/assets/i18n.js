// Messages (messages.json, English and French) and the formats of the page's language.
// Amounts are formatted from the API's decimal strings, never through a float.

let M = { en: {} };
export let lang = 'en';

// loadMessages fetches the catalogue and picks the language: the one kept in the browser,
// else the first of its preferred languages the catalogue has.
export async function loadMessages() {
  M = await fetch('/ui/assets/messages.json', { credentials: 'same-origin' }).then((r) => r.json());
  lang = pickLanguage();
}

export function setLanguage(l) {
  lang = l;
  localStorage.setItem('gpunex-lang', lang);
}

export function t(key, vars) {
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
export function usdc(s) {
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
export function micro(n) {
  const neg = n < 0;
  const s = String(Math.abs(n)).padStart(7, '0');
  return (neg ? '-' : '') + s.slice(0, -6) + '.' + s.slice(-6);
}

export function num(x, digits) {
  if (x === undefined || x === null) return '–';
  return new Intl.NumberFormat(lang, { maximumFractionDigits: digits === undefined ? 1 : digits }).format(x);
}

export function pct(x) {
  return new Intl.NumberFormat(lang, { style: 'percent', maximumFractionDigits: 1 }).format(x || 0);
}

export function when(s) {
  if (!s || s.startsWith('0001-')) return '–';
  return new Intl.DateTimeFormat(lang, { dateStyle: 'medium', timeStyle: 'short' }).format(new Date(s));
}

export function day(d) {
  return new Intl.DateTimeFormat(lang, { dateStyle: 'short' }).format(d);
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

export function nodeText(s) {
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
