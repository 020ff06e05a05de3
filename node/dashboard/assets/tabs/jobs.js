// Every role: Jobs: the jobs this node rented or runs, each with its live output; a renter
// cancels one, extends its lease or downloads its output.
import { api, maybe, stream } from '../api.js';
import { busy, button, errorBox, facts, fill, h, say, short, table, card } from '../dom.js';
import { t, usdc, when } from '../i18n.js';
import { logView } from '../logview.js';
import { active, inputProgress } from './jobinput.js';

let openJob = null;
let uploadTimer = null;
// placements keeps how each job placed by model from this page found its provider (the
// answer of POST /v1/jobs; the node does not keep it).
const placements = {};

export async function jobs(main) {
  const uploads = h('div', { id: 'uploads' });
  const list = h('div');
  const detail = h('div');
  main.append(uploads, list, detail);
  if (openJob) jobDetail(detail, openJob);
  const refresh = async () => {
    const js = (await api('GET', '/v1/jobs')) || [];
    fill(list, table(['job', 'side', 'state', 'gpus', 'model', 'seconds', 'cost', 'exit', 'peer'],
      js.map((j) => [h('a', { href: '#jobs', onclick: (ev) => { ev.preventDefault(); openJob = j.id; jobDetail(detail, j.id); } }, j.id),
        t('side_' + j.side), h('span', { class: 'badge ' + j.state }, t('state_' + j.state)), String(j.gpus), j.model, String(j.seconds), usdc(j.cost_usdc),
        j.state === 'ended' ? `${j.exit_code} ${j.exit_reason || ''}` : '–', h('code', {}, short(j.peer))]), 'no_jobs'));
    if (openJob) refreshJob();
    // Inputs being hashed or sent (before their job exists, or while it is leased): the
    // tab follows them every second until they are done.
    const ups = ((await maybe('/v1/uploads')) || []).filter(active);
    fill(uploads, ups.length ? card('uploads', ...ups.map((u) => h('p', {}, u.job ? h('code', {}, u.job) : '', ' ', inputProgress(u)))) : null);
    clearTimeout(uploadTimer);
    if (ups.length) uploadTimer = setTimeout(() => { if (uploads.isConnected) refresh(); }, 1000);
  };
  return refresh;
}

let jobAbort = null;
let refreshJob = () => {};

function jobDetail(box, id) {
  if (jobAbort) jobAbort.abort();
  jobAbort = new AbortController();
  const signal = jobAbort.signal;
  const head = h('div');
  const out = h('div');
  const shell = h('div');
  const log = logView({ class: 'log', id: 'job-log', 'aria-live': 'polite', tabindex: 0 }, `gpunex job logs ${id}`);
  fill(box, card('job', head, out, shell, h('h3', { i18n: 'output' }), log.note, log.pre));
  refreshJob = async () => {
    const j = await api('GET', '/v1/jobs/' + id);
    const rows = [['job', h('code', {}, j.id)], ['state', h('span', { class: 'badge ' + j.state, id: 'job-state' }, t('state_' + j.state))],
      ['provider', h('code', {}, short(j.peer))], ['gpus', `${j.gpus} × ${j.model}`], ['price', usdc(j.price_usdc_per_gpu_hour)],
      ['started', when(j.started_at)], ['ends', when(j.ends_at)]];
    const pl = placements[id];
    if (pl) {
      rows.push(['placement', h('span', { id: 'job-placement' }, pl.chosen)]);
      const passed = (pl.attempts || []).filter((a) => a.outcome !== 'accepted');
      if (passed.length) rows.push(['passed_over', passed.map((a) => `${a.offer} (${t('outcome_' + a.outcome)}: ${a.error || ''})`).join('; ')]);
    }
    if (j.input) rows.push(['input', h('span', { id: 'job-input' }, inputProgress(j.input))]);
    // The ports the job serves its renter, reached while it runs: opened in a new tab on
    // an origin of the job's own (pPORT-JOB.localhost, through a one-time ticket), or
    // forwarded to the renter's loopback from a terminal.
    if (j.side === 'renter' && j.ports && j.ports.length) {
      rows.push(['ports', h('span', { id: 'job-ports' }, j.ports.flatMap((p, i) => {
        const open = j.state === 'running' ? button('open_port', () => busy(open, out, async () => {
          const tk = await api('POST', '/v1/dashboard/open', { job: j.id, port: p });
          window.open(tk.url, '_blank', 'noopener');
        })) : null;
        if (open) open.dataset.port = String(p);
        return [i ? ' ' : null, h('strong', {}, String(p)), ' ', open, ' ', h('code', {}, `gpunex job forward ${j.id} ${p}`)];
      }))]);
    }
    if (j.metered_seconds) rows.push(['metered', t('metered_seconds', { seconds: j.metered_seconds })]);
    if (j.state === 'ended') {
      rows.push(['exit', h('span', { id: 'job-exit' }, `${j.exit_code} ${j.exit_reason || ''}`)], ['seconds', String(j.seconds)],
        ['cost', h('span', { id: 'job-cost' }, usdc(j.cost_usdc))],
        ['receipt', t(j.receipt_countersigned ? 'receipt_both' : j.receipt ? 'receipt_provider' : 'receipt_none')]);
      if (j.disputed) rows.push(['disputed', j.error || t('yes')]);
    }
    if (j.error && !j.disputed) rows.push(['error', j.error]);
    const acts = [];
    if (j.side === 'renter' && (j.state === 'running' || j.state === 'leased')) {
      const cancel = button('cancel', () => busy(cancel, out, async () => {
        await api('POST', `/v1/jobs/${id}/cancel`);
        refreshJob();
      }), 'danger');
      acts.push(cancel);
    }
    if (j.side === 'renter' && j.state === 'running') {
      // A longer lease before this one ends: the hold raised, then the provider asked.
      const hours = h('input', { type: 'number', min: 0.01, step: 'any', value: 1, id: 'extend-hours', 'aria-label': t('extend_hours'), title: t('extend_hours') });
      const extend = button('extend', () => busy(extend, out, async () => {
        await api('POST', `/v1/jobs/${id}/extend`, { hours: Number(hours.value) });
        refreshJob();
      }));
      extend.id = 'job-extend';
      acts.push(hours, extend);
      if (!shell.firstChild) {
        const open = button('open_shell', () => busy(open, out, () => openShell(shell, id, signal)));
        open.id = 'job-shell';
        acts.push(open);
      }
    }
    if (j.side === 'renter' && j.state === 'ended') {
      // Through a one-time ticket: the browser saves the output to disk as it arrives,
      // however large, instead of this page holding it.
      const get = button('fetch_output', () => busy(get, out, async () => {
        const tk = await api('POST', '/v1/dashboard/download', { path: `/v1/jobs/${encodeURIComponent(id)}/output` });
        const a = h('a', { href: tk.url, download: `${id}-output.tar` });
        document.body.append(a);
        a.click();
        a.remove();
      }));
      acts.push(get);
    }
    fill(head, facts(rows), h('p', { class: 'inline' }, acts));
    return j;
  };
  refreshJob().then(() => {
    return stream('GET', `/v1/jobs/${id}/logs?follow=1`, log.append, signal).then(() => refreshJob());
  }).catch((e) => {
    if (!signal.aborted) say(out, errorBox(e));
  });
}

// openShell runs a shell in the job (its user, its namespaces, no terminal) and shows it in
// box: its output as it comes, a line to type into. Leaving the job's page ends it.
async function openShell(box, id, signal) {
  const c = await api('POST', `/v1/jobs/${encodeURIComponent(id)}/console`, {});
  const base = `/v1/jobs/${encodeURIComponent(id)}/console/${c.id}`;
  const screen = h('pre', { class: 'log', id: 'shell-output', 'aria-live': 'polite', tabindex: 0 });
  const line = h('input', { type: 'text', id: 'shell-input', autocomplete: 'off', spellcheck: 'false', 'aria-label': t('shell_input'), title: t('shell_input') });
  const problem = h('div');
  line.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Enter') return;
    const text = line.value + '\n';
    line.value = '';
    screen.append(text);
    api('POST', base + '/input', { data: text }).catch((e) => say(problem, errorBox(e)));
  });
  fill(box, h('h3', { i18n: 'shell' }), screen, line, problem);
  line.focus();
  stream('GET', base, (text) => { screen.append(text); screen.scrollTop = screen.scrollHeight; }, signal)
    .then(() => { line.disabled = true; })
    .catch((e) => { line.disabled = true; if (!signal.aborted) say(problem, errorBox(e)); });
}

// followJob opens a job started from the Run tab on the Jobs tab, with how it was placed.
export function followJob(id, placement) {
  if (placement) placements[id] = placement;
  openJob = id;
  location.hash = '#jobs';
}
