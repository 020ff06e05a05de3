// Coordinator: Market: the market statistics and recommended prices.
import { maybe } from '../api.js';
import { fill, h, short, table } from '../dom.js';
import { pct, t, usdc } from '../i18n.js';

export async function market(main) {
  const body = h('div');
  main.append(body);
  return async () => {
    const rows = (await maybe('/v1/market')) || [];
    fill(body, table(['model', 'region', 'listed_gpus', 'providers', 'median_list', 'median_lease', 'leased_hours', 'utilisation', 'recommended', 'coordinator'],
      rows.map((m) => [m.model, m.region || t('all'), String(m.listed_gpus), String(m.listed_providers), usdc(m.median_list_usdc), usdc(m.median_lease_usdc),
        m.leased_gpu_hours, pct((m.utilisation_permille || 0) / 1000), usdc(m.recommended_usdc), h('code', {}, short(m.coordinator))])));
  };
}
