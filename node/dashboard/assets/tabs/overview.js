// Provider: Overview: the node, its GPUs, its offer as renters see it, its certificate
// and notifications.
import { maybe } from '../api.js';
import { card, facts, fill, h, short, table } from '../dom.js';
import { status } from '../frame.js';
import { micro, num, t, usdc, when } from '../i18n.js';

export async function overview(main) {
  const node = h('div');
  const gpus = h('div');
  const offer = h('div');
  const cert = h('div');
  const notes = h('div');
  main.append(h('div', { class: 'grid' }, card('node', node), card('certificate', cert)),
    card('gpus', gpus), card('offer_as_seen', offer), card('notifications', notes));
  return async () => {
    fill(node, facts([
      ['peer_id', h('code', {}, status.peer_id)],
      ['version', status.version],
      ['peers', String(status.peers)],
      ['reachability', t('reach_' + (status.reachability || 'unknown'))],
      ['started', when(status.started_at)],
    ]));
    const [gs, own, app, ns] = await Promise.all([
      maybe('/v1/provider/gpus'), maybe('/v1/provider/offer'), maybe('/v1/apply'), maybe('/v1/notifications')]);
    fill(gpus, table(['gpu', 'model', 'uuid', 'temperature', 'throttling', 'gpu_state'],
      (gs || []).map((g) => [String(g.index), g.model, h('code', {}, g.uuid),
        g.error ? '–' : num(g.temperature_c, 0) + ' °C',
        (g.throttle || []).join(', ') || t('no'),
        h('span', { class: 'badge ' + g.state }, t('gpu_' + g.state) + (g.delisted_why ? ': ' + g.delisted_why : ''))]), 'no_gpus'));
    if (own && own.offer) {
      const o = own.offer;
      fill(offer, facts([
        ['region', o.region], ['availability', o.availability || '24/7'],
        ['egress', o.egress ? t('egress_' + o.egress) : t('no')],
        ['expires', when(o.expires_at)],
      ]), table(['model', 'gpus', 'price'], o.gpus.map((g) => [g.model, String(g.count), usdc(micro(g.price_micro_usdc_per_gpu_hour))])));
      if (o.withdrawn) offer.prepend(h('p', { class: 'warn' }, t('withdrawn') + ': ' + o.withdrawn));
    } else fill(offer, h('p', { class: 'empty', i18n: 'no_offer' }));
    if (app && app.certificate) {
      const c = app.certificate;
      fill(cert, facts([['tier', t('tier_' + c.tier)], ['expires', when(c.expires_at)], ['coordinator', h('code', {}, short(c.coordinator))]]));
    } else fill(cert, h('p', { class: 'empty', i18n: 'no_certificate' }));
    fill(notes, table(['received', 'from', 'subject'],
      (ns || []).slice(-20).reverse().map((n) => [when(n.received_at), short(n.from), n.subject + (n.body ? ': ' + n.body : '')])));
  };
}
