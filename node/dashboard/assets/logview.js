// A job's output as it streams in, up to the 64 MiB a provider keeps. Appending each chunk
// to a <pre>'s textContent copies the whole text every time and lays all of it out again:
// time grows with the square of the log, and a large one freezes the tab. Here the chunks
// are drawn at most every DRAW_MS, each as one text node, and only the last LOG_TAIL
// characters stay in the page (those before are dropped, as they would be in a terminal's
// scrollback); a note then says how much came and how to read all of it.
import { fill, h } from './dom.js';
import { num, t } from './i18n.js';

// LOG_TAIL is how many characters of a log the page keeps in view.
export const LOG_TAIL = 64 * 1024;
const DRAW_MS = 100;

// logView returns a log's element (pre, made with attrs), the note shown above it once
// the start of the log was dropped, and append, which adds a chunk of text. whole is the
// command that prints the whole log.
export function logView(attrs, whole) {
  const pre = h('pre', attrs);
  const note = h('p', { class: 'empty', id: attrs.id ? attrs.id + '-note' : null, hidden: true });
  let pending = []; // chunks received and not drawn yet
  let pendingLen = 0;
  let shown = 0; // characters in pre
  let total = 0; // characters received
  let timer = 0;

  const draw = () => {
    timer = 0;
    let text = pending.join('');
    pending = [];
    pendingLen = 0;
    if (text.length > LOG_TAIL) text = text.slice(-LOG_TAIL);
    if (text) pre.append(document.createTextNode(text));
    shown += text.length;
    // Drop the oldest text past the tail: whole nodes, then the start of the first.
    while (shown > LOG_TAIL) {
      const first = pre.firstChild;
      if (shown - first.length >= LOG_TAIL) {
        shown -= first.length;
        first.remove();
      } else {
        first.deleteData(0, shown - LOG_TAIL);
        shown = LOG_TAIL;
      }
    }
    if (total > shown) {
      note.hidden = false;
      fill(note, t('log_tail', { shown: num(shown, 0), total: num(total, 0) }), ' ', h('code', {}, whole));
    }
    pre.scrollTop = pre.scrollHeight;
  };

  const append = (s) => {
    total += s.length;
    pending.push(s);
    pendingLen += s.length;
    // While nothing is drawn (a tab in the background), keep no more than the tail.
    if (pendingLen > 2 * LOG_TAIL) {
      const tail = pending.join('').slice(-LOG_TAIL);
      pending = [tail];
      pendingLen = tail.length;
    }
    if (!timer) timer = setTimeout(draw, DRAW_MS);
  };

  return { pre, note, append };
}
