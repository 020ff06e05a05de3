// Provider: Application: the application form of `gpunex apply`, then its status and the
// coordinator's question with a form to answer.
import { api, maybe } from '../api.js';
import { busy, button, card, facts, field, fill, h, okBox, say, short } from '../dom.js';
import { show } from '../frame.js';
import { t, when } from '../i18n.js';

export async function application(main) {
  const box = h('div');
  const out = h('div');
  main.append(box, out);
  const app = await maybe('/v1/apply');
  if (!app) {
    applicationForm(box, out);
    return null;
  }
  let answer = null;
  return async () => {
    const a = (await maybe('/v1/apply')) || app;
    const rows = [['status', h('span', { class: 'badge ' + a.status }, t('status_' + a.status))],
      ['submitted', when(a.submitted_at)], ['updated', when(a.updated_at)], ['coordinator', h('code', {}, short(a.coordinator))]];
    if (a.tier) rows.push(['tier', t('tier_' + a.tier)]);
    if (a.decision_due && !a.decision_due.startsWith('0001')) rows.push(['decision_due', when(a.decision_due)]);
    if (a.message) rows.push(['message', a.message]);
    if (a.last_error) rows.push(['last_error', a.last_error]);
    const parts = [card('your_application', facts(rows))];
    if (a.status === 'info-requested') {
      // One answer box for the page's life: what is typed stays through refreshes.
      if (!answer) {
        const text = h('textarea', { rows: 4, required: true });
        const send = button('send_answer', () => busy(send, out, async () => {
          await api('POST', '/v1/apply/answer', { message: text.value });
          say(out, okBox('answer_sent'));
        }));
        answer = card('answer_question', field('your_answer', text), send);
      }
      parts.push(answer);
    }
    fill(box, ...parts);
  };
}

// applicationForm is the seed's application form: the fields and checks of `gpunex apply`
// (protocol.Application); the node signs it and the coordinator checks it again.
function applicationForm(box, out) {
  const f = {
    name: h('input', { autocomplete: 'name', required: true }),
    email: h('input', { type: 'email', autocomplete: 'email', required: true }),
    company: h('input', { autocomplete: 'organization' }),
    model: h('input', { required: true, placeholder: 'RTX-4090-24GB', autocomplete: 'off' }),
    count: h('input', { type: 'number', min: 1, value: 1, required: true }),
    ram: h('input', { type: 'number', min: 1, value: 64, required: true }),
    up: h('input', { type: 'number', min: 0, step: 'any', value: 1, required: true }),
    down: h('input', { type: 'number', min: 0, step: 'any', value: 1, required: true }),
    availability: h('input', { value: '24/7', required: true }),
    city: h('input', { required: true }),
    country: h('input', { required: true, maxlength: 2, placeholder: 'FR', pattern: '[A-Za-z]{2}' }),
    region: h('input', { required: true, placeholder: 'eu-west' }),
    ups: h('input', { type: 'checkbox' }),
    months: h('input', { type: 'number', min: 1, max: 60, value: 1, required: true }),
    notes: h('textarea', { rows: 2 }),
  };
  const submit = h('button', { type: 'submit', i18n: 'submit_application' });
  const form = h('form', {
    onsubmit: (ev) => {
      ev.preventDefault();
      busy(submit, out, async () => {
        const body = {
          name: f.name.value, email: f.email.value, company: f.company.value,
          gpus: [{
            model: f.model.value, count: Number(f.count.value), host_ram_gb: Number(f.ram.value),
            internet_up_gbps: Number(f.up.value), internet_down_gbps: Number(f.down.value), availability: f.availability.value,
            location: { city: f.city.value, country: f.country.value.toUpperCase(), region: f.region.value },
          }],
          ups: f.ups.checked, commitment_months: Number(f.months.value), maintenance_notes: f.notes.value,
        };
        await api('POST', '/v1/apply', body);
        say(out, okBox('application_sent'));
        show();
      });
    },
  }, h('p', { i18n: 'apply_intro' }),
  field('contact_name', f.name), field('contact_email', f.email), field('company', f.company),
  field('gpu_model', f.model, 'gpu_model_hint'), field('gpu_count', f.count), field('ram_gb', f.ram),
  field('up_gbps', f.up), field('down_gbps', f.down), field('availability', f.availability, 'availability_hint'),
  field('city', f.city), field('country', f.country), field('region', f.region), field('ups', f.ups),
  field('commitment_months', f.months), field('maintenance_notes', f.notes), submit);
  fill(box, card('apply', form));
}
