// Renter: Offers: search the network's offers, sorted by merit, price, score or
// performance, with the ranking's terms; "Rent" fills the Run tab.
import { api } from '../api.js';
import { busy, button, field, fill, h, short, table } from '../dom.js';
import { num, t, usdc } from '../i18n.js';
import { chooseOffer } from './run.js';

export async function offers(main) {
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
        button('rent', () => { chooseOffer(r.id); location.hash = '#run'; })]), 'no_offers'));
  };
  main.append(h('form', { class: 'filters', onsubmit: (ev) => { ev.preventDefault(); busy(search, out, draw); } },
    field('model', f.model), field('region', f.region), field('tier', f.tier), field('max_price', f.max), field('egress_only', f.egress),
    field('sort_by', f.sort), search), out, results);
  // Searched once now and on each submit: a search asks the network, not just the node.
  await draw();
  return null;
}
