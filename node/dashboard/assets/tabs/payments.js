// Provider: Payments: earnings by day, group and job, payouts, and the payout settings.
import { api } from '../api.js';
import { barChart } from '../charts.js';
import { busy, button, card, errorBox, facts, field, fill, h, link, okBox, saveFile, say, short, table } from '../dom.js';
import { day, micro, num, t, usdc, when } from '../i18n.js';

export async function payments(main) {
  const period = h('select', {}, ['week', 'month'].map((p) => h('option', { value: p, i18n: 'period_' + p })));
  period.value = 'month';
  const by = h('select', {}, ['model', 'gpu'].map((p) => h('option', { value: p, i18n: 'by_' + p })));
  const body = h('div');
  let last = null;
  const csv = button('export_csv', () => {
    if (!last) return;
    const lines = [['job', 'ended_at', 'model', 'gpus', 'seconds', 'charge_usdc', 'commission_usdc', 'net_usdc', 'paid', 'batch'].join(',')];
    for (const r of last.history || []) {
      lines.push([r.job, r.ended_at, r.model, r.gpus, r.seconds, r.charge_usdc, r.commission_usdc, r.net_usdc, r.paid, r.batch || ''].join(','));
    }
    saveFile(new Blob([lines.join('\n') + '\n'], { type: 'text/csv' }), 'gpunex-earnings.csv');
  });
  const form = h('div', { class: 'inline' }, field('period', period), field('group_by', by), csv);
  // How the provider is paid: the form is drawn once (and after a save), so that what is
  // typed stays; where the coordinators stand is redrawn with the rest.
  const payout = h('div', { id: 'payout-settings' });
  const payoutOut = h('div');
  const deliveries = h('div', { id: 'payout-deliveries' });
  main.append(form, body, card('payout_settings', payout, payoutOut, h('h3', { i18n: 'payout_deliveries' }), deliveries));
  const drawDeliveries = (v) => fill(deliveries, table(['coordinator', 'state', 'error'], (v.deliveries || []).map((d) => [
    h('code', { title: d.coordinator }, short(d.coordinator)),
    d.delivered_at ? t('delivered_at', { when: when(d.delivered_at) }) : t('not_delivered'), d.error || '']), 'no_payout_settings'));
  const drawPayout = async () => {
    const v = await api('GET', '/v1/provider/payout');
    const s = v.settings || {};
    const method = h('select', { id: 'payout-method' }, ['usdc', 'bank'].map((m) => h('option', { value: m, i18n: 'method_' + m })));
    method.value = s.method || 'usdc';
    const schedule = h('select', {}, ['weekly', 'monthly'].map((m) => h('option', { value: m, i18n: 'schedule_' + m })));
    schedule.value = s.schedule || 'weekly';
    const addr = h('input', { id: 'payout-address', value: s.solana_address || '', size: 44, autocomplete: 'off', spellcheck: 'false' });
    const holder = h('input', { id: 'payout-holder', value: s.account_name || '', autocomplete: 'name' });
    const iban = h('input', { id: 'payout-iban', value: s.iban || '', size: 34, autocomplete: 'off', spellcheck: 'false' });
    const bic = h('input', { id: 'payout-bic', value: s.bic || '', size: 11, autocomplete: 'off', spellcheck: 'false' });
    const usdcFields = h('div', {}, field('solana_address', addr));
    const bankFields = h('div', {}, field('account_name', holder), field('iban', iban, 'iban_hint'), field('bic', bic));
    const sync = () => {
      usdcFields.hidden = method.value !== 'usdc';
      bankFields.hidden = method.value !== 'bank';
    };
    method.addEventListener('change', sync);
    sync();
    const save = button('save_payout', () => busy(save, payoutOut, async () => {
      const req = { method: method.value, schedule: schedule.value };
      if (method.value === 'bank') Object.assign(req, { account_name: holder.value, iban: iban.value, bic: bic.value });
      else req.solana_address = addr.value;
      const nv = await api('PUT', '/v1/provider/payout', req);
      say(payoutOut, okBox(nv.pending ? 'payout_pending_saved' : 'payout_saved'));
      drawDeliveries(nv);
      await drawPayout();
    }));
    const reset = v.from_config ? null : button('payout_from_config', () => busy(reset, payoutOut, async () => {
      const nv = await api('DELETE', '/v1/provider/payout');
      say(payoutOut, okBox(nv.pending ? 'payout_pending_saved' : 'payout_reset'));
      drawDeliveries(nv);
      await drawPayout();
    }), 'danger');
    const now = v.settings ? `${t('method_' + s.method)}, ${t('schedule_' + s.schedule)}: ${s.method === 'bank' ? s.account_name + ' · ' + s.iban : s.solana_address}` : t('no_payout_settings');
    // A change asked for from a session waits for payout.change_delay: shown with its
    // cancel button, since whoever took a session would hope it goes unnoticed.
    const p = v.pending;
    const ps = (p && p.settings) || {};
    const pendingWhat = p && (p.remove ? t('payout_pending_remove')
      : `${t('method_' + ps.method)}, ${t('schedule_' + ps.schedule)}: ${ps.method === 'bank' ? ps.account_name + ' · ' + ps.iban : ps.solana_address}`);
    const cancel = p ? button('payout_cancel', () => busy(cancel, payoutOut, async () => {
      const nv = await api('DELETE', '/v1/provider/payout/pending');
      say(payoutOut, okBox('payout_cancelled'));
      drawDeliveries(nv);
      await drawPayout();
    }), 'danger') : null;
    const rows = [['paid_to', h('span', { id: 'payout-now' }, now)], ['set_in', t(v.from_config ? 'set_in_config' : 'set_in_dashboard')]];
    if (p) rows.push(['payout_pending', h('span', { id: 'payout-pending' }, t('payout_pending_what', { what: pendingWhat, when: when(p.apply_at) }), ' ', cancel)]);
    fill(payout, facts(rows),
      h('div', { class: 'filters' }, field('method', method), field('schedule', schedule)), usdcFields, bankFields, h('p', { class: 'inline' }, save, reset));
    drawDeliveries(v);
  };
  drawPayout().catch((e) => say(payoutOut, errorBox(e)));
  const draw = async () => {
    const e = await api('GET', `/v1/earnings?period=${period.value}&by=${by.value}`);
    last = e;
    const days = new Map();
    for (let d = new Date(e.from); d < new Date(e.to); d = new Date(d.getTime() + 86400000)) days.set(day(d), 0);
    for (const r of e.history || []) {
      const k = day(new Date(r.ended_at));
      days.set(k, (days.get(k) || 0) + r.net_micro_usdc);
    }
    fill(body, 
      h('div', { class: 'grid' },
        card('earned_period', h('p', { class: 'big', id: 'earned-total' }, usdc(e.total_usdc))),
        card('pending', h('p', { class: 'big', id: 'earned-pending' }, usdc(e.pending_usdc))),
        card('paid_all_time', h('p', { class: 'big' }, usdc(e.paid_usdc)))),
      card('earnings_by_day', barChart([...days].map(([label, value]) => ({ label, value })), (v) => usdc(micro(v)), 'earnings_by_day')),
      card('by_' + by.value, table(['key', 'jobs', 'gpu_hours', 'net'], (e.groups || []).map((g) => [g.key, String(g.jobs), num(g.gpu_seconds / 3600, 2), usdc(g.net_usdc)]))),
      card('jobs_paid_for', table(['job', 'ended', 'model', 'gpus', 'charge', 'commission', 'net', 'payout'],
        (e.history || []).map((r) => [h('code', {}, r.job), when(r.ended_at), r.model, String(r.gpus), usdc(r.charge_usdc), usdc(r.commission_usdc), usdc(r.net_usdc),
          r.paid ? t('paid') : t('pending')]))),
      card('payouts', table(['batch', 'date', 'amount', 'method', 'state', 'transaction'],
        (e.payouts || []).map((p) => [h('code', {}, short(p.batch)), when(p.issued_at), usdc(p.amount_usdc), p.method, p.paid ? t('paid') : p.state,
          p.transaction ? link(p.explorer, short(p.transaction), 'tx') : '–']))),
      (e.unreachable || []).length ? h('p', { class: 'warn' }, t('coordinators_unreachable') + ': ' + e.unreachable.join(', ')) : null);
  };
  period.addEventListener('change', draw);
  by.addEventListener('change', draw);
  // Earnings come from every coordinator the provider trusts: asked at most every 10 s.
  let drawnAt = 0;
  return async () => {
    if (Date.now() - drawnAt < 10000) return;
    drawnAt = Date.now();
    await Promise.all([draw(), api('GET', '/v1/provider/payout').then(drawDeliveries)]);
  };
}
