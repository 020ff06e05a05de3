// Coordinator: Providers: each provider this coordinator scores, with its tier,
// certificate, score and components; revoke.
import { api, maybe } from '../api.js';
import { busy, button, fill, h, okBox, say, short, table } from '../dom.js';
import { status } from '../frame.js';
import { pct, t, when } from '../i18n.js';

export async function providers(main) {
  const list = h('div');
  const out = h('div');
  main.append(out, list);
  // One reason field per provider for the page's life, and no redraw while one is being
  // typed in: what is typed stays.
  const reasons = {};
  return async () => {
    if (list.contains(document.activeElement) && document.activeElement.tagName === 'INPUT') return;
    const [scores0, approved] = await Promise.all([maybe('/v1/scores'), maybe('/v1/coordinator/applications?status=approved')]);
    const scores = (scores0 || []).filter((s) => s.coordinator === status.peer_id);
    const tierOf = {};
    const certOf = {};
    for (const a of approved || []) {
      tierOf[a.provider] = a.tier;
      certOf[a.provider] = a;
    }
    // A certificate within a week of its expiry is marked: its renewal is due.
    const cert = (p) => {
      const a = certOf[p];
      if (!a || !a.certificate_expires) return '–';
      const soon = new Date(a.certificate_expires).getTime() - Date.now() < 7 * 86400000;
      return h('span', { class: soon ? 'badge bad' : '' }, `#${a.certificate_serial} · ${t('expires')} ${when(a.certificate_expires)}`);
    };
    fill(list, table(['provider', 'tier', 'certificate', 'score', 'uptime', 'completion', 'consistency', 'trend', 'issued', ''],
      scores.map((s) => {
        const reason = reasons[s.provider] || (reasons[s.provider] = h('input', { 'aria-label': t('revoke_reason'), placeholder: t('revoke_reason'), size: 12 }));
        const revoke = button('revoke', () => busy(revoke, out, async () => {
          await api('POST', '/v1/coordinator/revoke', { provider: s.provider, reason: reason.value, actor: localStorage.getItem('gpunex-actor') || 'dashboard' });
          say(out, okBox('revoked', { provider: short(s.provider) }));
        }), 'danger');
        return [h('code', { title: s.provider }, short(s.provider)), tierOf[s.provider] ? t('tier_' + tierOf[s.provider]) : '–', cert(s.provider), String(s.score), pct(s.uptime), pct(s.completion), pct(s.benchmark_consistency),
          String(s.trend || 0), when(s.issued_at), h('span', { class: 'inline' }, reason, revoke)];
      })));
  };
}
