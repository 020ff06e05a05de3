// Renter: Wallet: available and held funds, deposits, holds.
import { api } from '../api.js';
import { busy, button, card, facts, field, fill, h, okBox, say, short, table } from '../dom.js';
import { runRefresh } from '../frame.js';
import { usdc, when } from '../i18n.js';

export async function wallet(main) {
  const body = h('div');
  const out = h('div');
  const amount = h('input', { inputmode: 'decimal', size: 8 });
  const deposit = button('deposit', () => busy(deposit, out, async () => {
    await api('POST', '/v1/wallet/deposit', { usdc: amount.value.replace(',', '.') });
    say(out, okBox('deposited'));
    runRefresh();
  }));
  main.append(body, card('deposit', field('amount_usdc', amount), deposit, out));
  return async () => {
    const b = await api('GET', '/v1/wallet/balance');
    fill(body, h('div', { class: 'grid' },
      card('available', h('p', { class: 'big' }, usdc(b.available_usdc))),
      card('held', h('p', { class: 'big' }, usdc(b.held_usdc)))),
    card('account', facts([['deposited', usdc(b.deposited_usdc)], ['charged', usdc(b.charged_usdc)],
      ['coordinator', h('code', {}, short(b.coordinator))], ['wallet', b.wallet ? h('code', {}, b.wallet) : '–'],
      ['wallet_usdc', b.wallet_usdc ? usdc(b.wallet_usdc) : '–']])),
    card('holds', table(['job', 'provider', 'amount', 'state', 'charge', 'expires'],
      (b.holds || []).map((x) => [h('code', {}, x.job), h('code', {}, short(x.provider)), usdc(x.amount_usdc), x.state, usdc(x.charge_usdc), when(x.expires_at)]))));
  };
}
