// Coordinator: Payouts: run a batch now, the batches with their audit root, each payout's
// transaction, the bank file, confirming bank transfers.
import { api, maybe } from '../api.js';
import { busy, button, card, facts, field, fill, h, link, okBox, say, short, table } from '../dom.js';
import { runRefresh } from '../frame.js';
import { num, t, usdc, when } from '../i18n.js';

export async function payouts(main) {
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
}

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
