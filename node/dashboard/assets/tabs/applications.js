// Coordinator: Applications: the queue by status, each application with its details,
// measured link and audit trail, and the decision form.
import { api } from '../api.js';
import { busy, button, card, facts, field, fill, h, okBox, short, table } from '../dom.js';
import { num, t, when } from '../i18n.js';

export async function applications(main) {
  const filter = h('select', {}, ['pending', 'info-requested', 'approved', 'rejected', 'revoked', ''].map((s) => h('option', { value: s, i18n: s ? 'status_' + s : 'all' })));
  const list = h('div', { id: 'application-queue' });
  const detail = h('div');
  main.append(field('status', filter), list, detail);
  const draw = async () => {
    const apps = (await api('GET', '/v1/coordinator/applications?status=' + encodeURIComponent(filter.value))) || [];
    fill(list, table(['id', 'provider', 'status', 'proposed_tier', 'submitted', 'decision_due', ''],
      apps.map((a) => [h('code', {}, a.id), h('code', { title: a.provider }, short(a.provider)),
        h('span', { class: 'badge ' + a.status }, t('status_' + a.status)), a.proposed_tier ? t('tier_' + a.proposed_tier) : '–',
        when(a.submitted_at), h('span', { class: a.overdue ? 'warn' : '' }, when(a.decision_due)),
        button('open', () => applicationDetail(detail, a.id, draw))]), 'queue_empty'));
  };
  filter.addEventListener('change', draw);
  return draw;
}

// applicationDetail shows one application with its audit trail and, while it waits for a
// decision, the decision form; doneKey is a message to show (after a decision).
async function applicationDetail(box, id, after, doneKey) {
  const a = await api('GET', '/v1/coordinator/applications/' + encodeURIComponent(id));
  const app = a.application || {};
  const out = h('div', {}, doneKey ? okBox(doneKey) : null);
  const action = h('select', {}, ['approve', 'reject', 'request-info'].map((s) => h('option', { value: s, i18n: 'action_' + s })));
  const tier = h('select', {}, ['community', 'enterprise'].map((s) => h('option', { value: s, i18n: 'tier_' + s })));
  tier.value = a.proposed_tier || 'community';
  const message = h('textarea', { rows: 3 });
  const actor = h('input', { autocomplete: 'username', required: true });
  actor.value = localStorage.getItem('gpunex-actor') || '';
  const decide = button('decide', () => busy(decide, out, async () => {
    localStorage.setItem('gpunex-actor', actor.value);
    await api('POST', `/v1/coordinator/applications/${encodeURIComponent(id)}/decision`, { action: action.value, tier: tier.value, message: message.value, actor: actor.value });
    await after();
    await applicationDetail(box, id, after, 'decision_recorded');
  }));
  const gpus = (app.gpus || []).map((g) => `${g.count} × ${g.model}`).join(', ');
  const loc = ((app.gpus || [])[0] || {}).location || {};
  fill(box, card('application',
    facts([['id', h('code', {}, a.id)], ['provider', h('code', {}, a.provider)], ['status', t('status_' + a.status)],
      ['contact', app.name ? `${app.name} <${app.email || ''}>` + (app.company ? ', ' + app.company : '') : '–'], ['gpus', gpus || '–'],
      ['location', [loc.city, loc.country, loc.region].filter(Boolean).join(', ') || '–'],
      ['commitment_months', String(app.commitment_months || 0)], ['ups', app.ups ? t('yes') : t('no')],
      ['detected', (app.detected || []).map((g) => `${g.count} × ${g.model}` + (g.simulated ? ' (' + t('simulated') + ')' : '')).join(', ') || '–'],
      ['differences', (app.differences || []).join('; ') || t('none_found')],
      ['case_by_case', (a.case_by_case || []).join('; ') || '–'],
      ['link_gaps', (a.link_gaps || []).join('; ') || '–'],
      ['applicant_answer', app.answer || '–'],
      ['proposed_tier', a.proposed_tier ? t('tier_' + a.proposed_tier) : '–'], ['tier_reasons', (a.tier_reasons || []).join('; ') || '–'],
      ['measured_link', a.measured_link ? `${num(a.measured_link.up_mbps, 0)} / ${num(a.measured_link.down_mbps, 0)} Mbit/s, ${num(a.measured_link.rtt_ms, 0)} ms` : '–']]),
    h('h3', { i18n: 'audit_trail' }),
    table(['when', 'actor', 'action', 'detail'], (a.events || []).map((e) => [when(e.at), e.actor, e.action, e.detail || ''])),
    a.status === 'pending' || a.status === 'info-requested'
      ? h('div', { class: 'decision' }, field('action', action), field('tier', tier), field('note', message), field('your_name', actor), decide)
      : null, out));
}
