// Renter: Run a job: an offer, or a model for the node to pick the best offer by merit,
// and the job.
import { api } from '../api.js';
import { busy, field, h, say } from '../dom.js';
import { t } from '../i18n.js';
import { inputProgress } from './jobinput.js';
import { followJob } from './jobs.js';

// chosenOffer is the offer "Rent" picked on the Offers tab.
let chosenOffer = '';

export function chooseOffer(id) {
  chosenOffer = id;
}

export async function run(main) {
  const f = {
    offer: h('input', { value: chosenOffer, placeholder: t('offer_placeholder'), autocomplete: 'off' }),
    model: h('input', { placeholder: 'H100-80GB', autocomplete: 'off' }),
    region: h('input', { autocomplete: 'off' }),
    tier: h('select', {}, h('option', { value: '', i18n: 'any' }), h('option', { value: 'community', i18n: 'tier_community' }), h('option', { value: 'enterprise', i18n: 'tier_enterprise' })),
    image: h('input', { placeholder: 'docker.io/library/python:3.12', autocomplete: 'off' }),
    archive: h('input', { placeholder: '/path/to/image.tar', autocomplete: 'off' }),
    command: h('input', { placeholder: 'python train.py', autocomplete: 'off' }),
    env: h('textarea', { rows: 2, placeholder: 'KEY=value' }),
    gpus: h('input', { type: 'number', min: 1, value: 1 }),
    hours: h('input', { type: 'number', min: 0.01, step: 'any', value: 1 }),
    max: h('input', { inputmode: 'decimal', size: 6 }),
    egress: h('input', { type: 'checkbox' }),
    inputs: h('textarea', { rows: 2, placeholder: '/path/to/dataset' }),
  };
  const out = h('div', { id: 'run-result' });
  const go = h('button', { type: 'submit', i18n: 'start_job' });
  main.append(h('form', {
    onsubmit: (ev) => {
      ev.preventDefault();
      busy(go, out, async () => {
        say(out, h('p', { i18n: 'negotiating' }));
        const req = {
          offer: f.offer.value.trim() || undefined, model: f.offer.value.trim() ? undefined : f.model.value.trim() || undefined,
          region: f.offer.value.trim() ? undefined : f.region.value.trim() || undefined,
          tier: f.offer.value.trim() ? undefined : f.tier.value || undefined,
          image: f.image.value.trim() || undefined, image_archive: f.archive.value.trim() || undefined,
          args: splitArgs(f.command.value), env: f.env.value.split('\n').map((s) => s.trim()).filter(Boolean),
          gpus: Number(f.gpus.value), max_seconds: Math.ceil(Number(f.hours.value) * 3600),
          max_price_usdc: f.max.value.replace(',', '.') || undefined, egress: f.egress.checked,
          inputs: f.inputs.value.split('\n').map((s) => s.trim()).filter(Boolean),
        };
        // An input is hashed and sent before the job starts: its progress is shown meanwhile.
        let poll = null;
        if (req.inputs.length) {
          req.progress = Math.random().toString(16).slice(2);
          poll = setInterval(async () => {
            const u = ((await api('GET', '/v1/uploads')) || []).find((x) => x.progress === req.progress);
            if (u) say(out, h('p', { id: 'run-input' }, inputProgress(u)));
          }, 1000);
        }
        try {
          const j = await api('POST', '/v1/jobs', req);
          followJob(j.id, j.placement);
        } finally {
          clearInterval(poll);
        }
      });
    },
  }, h('p', { i18n: 'run_intro' }), field('offer', f.offer), field('or_model', f.model), field('region', f.region), field('tier', f.tier),
  field('image', f.image), field('image_archive', f.archive), field('command', f.command), field('env', f.env, 'env_hint'),
  field('gpus', f.gpus), field('max_hours', f.hours), field('max_price', f.max, 'max_price_hint'), field('egress', f.egress),
  field('inputs', f.inputs, 'inputs_hint'), go), out);
  return null;
}

// splitArgs splits a command line on spaces, keeping quoted parts whole.
function splitArgs(s) {
  const out = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  let m;
  while ((m = re.exec(s))) out.push(m[1] !== undefined ? m[1] : m[2] !== undefined ? m[2] : m[3]);
  return out;
}
