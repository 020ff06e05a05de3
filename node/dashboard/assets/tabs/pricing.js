// Provider: Pricing & availability: prices per model against the market's recommendation,
// the weekly availability, planned maintenance.
import { api, maybe } from '../api.js';
import { busy, button, facts, field, fill, h, okBox, say, table, card } from '../dom.js';
import { micro, t, usdc, when } from '../i18n.js';

export async function pricing(main) {
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
}
