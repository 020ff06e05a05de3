// A job's input on the Jobs tab: the inputs this node is hashing or sending (GET
// /v1/uploads), each with a progress bar, bytes, rate and time left; the same line in a
// job's details while its input goes to the provider.
import { h } from '../dom.js';
import { num, t } from '../i18n.js';

// bytes writes a byte count for people.
export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let x = n || 0;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${num(x, i ? 1 : 0)}\u00a0${units[i]}`;
}

// inputLine says where an input stands, in words.
export function inputLine(u) {
  switch (u.phase) {
    case 'hashing':
      return t('input_hashing', { done: bytes(u.hashed_bytes), total: bytes(u.bytes) });
    case 'uploading':
      return t('input_uploading', {
        sent: bytes(u.sent_bytes), total: bytes(u.bytes - u.held_bytes), held: bytes(u.held_bytes),
        rate: bytes(u.rate_bytes_per_second), eta: `${u.eta_seconds}\u00a0s`,
      });
    case 'done':
      return t('input_done', { total: bytes(u.bytes), sent: bytes(u.sent_bytes), held: bytes(u.held_bytes) });
    case 'failed':
      return t('input_failed', { error: u.error || '' });
    default:
      return t('input_hashed', { total: bytes(u.bytes) });
  }
}

// inputProgress is an input's line with a progress bar.
export function inputProgress(u) {
  let value = 1;
  if (u.phase === 'hashing') value = u.bytes ? u.hashed_bytes / u.bytes : 0;
  if (u.phase === 'uploading') value = u.bytes - u.held_bytes > 0 ? u.sent_bytes / (u.bytes - u.held_bytes) : 1;
  return h('span', { class: 'input-progress', 'data-phase': u.phase },
    h('progress', { max: 1, value: Math.min(value, 1) }), ' ', inputLine(u));
}

// active says whether an input still moves (the tab then refreshes every second).
export function active(u) {
  return u && (u.phase === 'hashing' || u.phase === 'uploading');
}
