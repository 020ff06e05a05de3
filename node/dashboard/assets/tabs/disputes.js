// Coordinator: Disputes: renters' disputes of receipts, decided for either side with a
// note signed into the decision.
import { api, maybe } from '../api.js';
import { busy, button, fill, h, okBox, say, short, table } from '../dom.js';
import { runRefresh } from '../frame.js';
import { t, usdc } from '../i18n.js';

export async function disputes(main) {
  const body = h('div');
  const out = h('div');
  main.append(out, body);
  // One note field per dispute for the page's life, and no redraw while one is typed in.
  const notes = {};
  return async () => {
    if (body.contains(document.activeElement) && document.activeElement.tagName === 'INPUT') return;
    const ds = (await maybe('/v1/disputes?all=1')) || [];
    fill(body, table(['job', 'renter', 'provider', 'state', 'claimed', 'reported', 'renter_says', 'floor', 'reason', ''],
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
        // A provider that reported another receipt than the one disputed signed two: the
        // operator sees both amounts, and a decision charges at most the smaller.
        const reported = d.equivocation ? h('span', {}, usdc(d.reported_usdc), ' ', h('span', { class: 'badge bad' }, t('two_receipts'))) : usdc(d.reported_usdc);
        return [h('code', {}, d.job), h('code', {}, short(d.renter)), h('code', {}, short(d.provider)), t('dispute_' + d.state), usdc(d.claimed_usdc),
          reported, usdc(d.renter_says_usdc), usdc(d.floor_usdc), d.reason, d.state === 'open' ? h('span', { class: 'inline' }, note, decide('provider'), decide('renter')) : usdc(d.charged_usdc)];
      })));
  };
}
