// The node's JSON API (docs/api.md), called with the session's key.
import { t } from './i18n.js';

// The session's key: it comes once in the fragment of the login redirect (never sent to a
// server) and stays in this origin's storage, which no other port or site can read. Every
// API request carries it; the session cookie alone opens nothing.
const fromLink = location.hash.match(/^#key=([0-9a-f]{64})$/);
if (fromLink) {
  localStorage.setItem('gpunex-session-key', fromLink[1]);
  history.replaceState(null, '', location.pathname);
}
// The key is read at each request: a link opened in another tab replaces it.
export const sessionKey = () => localStorage.getItem('gpunex-session-key') || '';

export class APIError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

export async function api(method, path, body) {
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
export async function maybe(path) {
  try {
    return await api('GET', path);
  } catch (e) {
    if (e.code === 404) return null;
    throw e;
  }
}

// stream reads a streamed answer (logs, benchmark progress) chunk by chunk.
export async function stream(method, path, onText, signal) {
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
  let yielded = performance.now();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    onText(dec.decode(value, { stream: true }));
    // Chunks received already are read one after the other with nothing else running: a
    // fast stream (a large log) would hold the page still. Let it run every 50 ms.
    if (performance.now() - yielded > 50) {
      await new Promise((resolve) => setTimeout(resolve, 0));
      yielded = performance.now();
    }
  }
}
