// Provider: Benchmarks: per-GPU figures against the catalogue's datasheet, the verdict,
// storage and network, a run on demand with its progress, and the runs over time.
import { maybe, stream } from '../api.js';
import { lineChart } from '../charts.js';
import { busy, button, card, facts, fill, h, okBox, say, short, table } from '../dom.js';
import { runRefresh } from '../frame.js';
import { forgetHistory, providerHistory } from '../history.js';
import { num, t, when } from '../i18n.js';

export async function benchmarks(main) {
  const out = h('div');
  const progress = h('pre', { class: 'log', 'aria-live': 'polite', hidden: true });
  const figures = h('div');
  const run = button('run_now', () => busy(run, out, async () => {
    progress.hidden = false;
    progress.textContent = '';
    await stream('POST', '/v1/bench/run', (s) => { progress.textContent += s; });
    say(out, okBox('bench_done'));
    forgetHistory();
    await runRefresh();
  }));
  main.append(h('p', {}, run), out, progress, figures);
  return async () => {
    const [b, models] = await Promise.all([maybe('/v1/bench'), maybe('/v1/models')]);
    if (!b) {
      fill(figures, h('p', { class: 'empty', i18n: 'no_bench' }));
      return;
    }
    const a = b.attestation;
    const ref = {};
    for (const m of (models && models.models) || []) ref[m.model] = m;
    const parts = [facts([['measured', when(a.issued_at)], ['driver', a.driver_version || '–'], ['cuda', a.cuda_version || '–']])];
    parts.push(table(['model', 'uuid', 'fp32', 'fp16', 'tensor', 'mem_bw', 'perf_score', 'datasheet', 'verdict'],
      a.gpus.map((g) => {
        const d = ref[g.model];
        return [g.model, h('code', {}, short(g.uuid)), num(g.fp32_tflops), num(g.fp16_tflops), num(g.tensor_tflops),
          num(g.mem_bandwidth_gbps, 0), String(g.perf_score),
          d ? `${num(d.fp32_tflops)} / ${num(d.fp16_tflops)} / ${num(d.tensor_tflops)} / ${num(d.mem_bandwidth_gbps, 0)}` : '–',
          g.below ? h('span', { class: 'badge bad' }, t('below') + ': ' + g.below) : h('span', { class: 'badge good', i18n: 'passes' })];
      })));
    if (a.host_below) parts.push(h('p', { class: 'warn' }, t('delisted_why') + ': ' + a.host_below));
    // Each GPU's performance score run after run, and the host's figures.
    const hist = await providerHistory();
    const perGPU = new Map();
    for (const it of hist.bench || []) {
      for (const g of it.value.gpus || []) {
        const k = g.model + ' ' + short(g.uuid);
        if (!perGPU.has(k)) perGPU.set(k, []);
        perGPU.get(k).push({ at: new Date(it.at), value: g.perf_score });
      }
    }
    parts.push(card('bench_history', h('div', { id: 'bench-history' }, lineChart([...perGPU].map(([label, pts]) => ({ label, points: pts })), 100, (v) => num(v, 0), 'bench_history')),
      table(['measured', 'passing', 'storage_write', 'network_up', 'network_down'], (hist.bench || []).slice(-10).reverse().map((it) => {
        const v = it.value;
        const ok = (v.gpus || []).filter((g) => !g.below).length;
        return [when(it.at), `${ok} / ${(v.gpus || []).length}` + (v.host_below ? ' · ' + v.host_below : ''), num(v.storage_write_mbps, 0) + ' MB/s',
          num(v.up_mbps, 0) + ' Mbit/s', num(v.down_mbps, 0) + ' Mbit/s'];
      }))));

    if (a.gpus.some((g) => g.below)) parts.push(h('p', { i18n: 'delisted_check' }));
    if (b.enterprise_below) parts.push(h('p', { class: 'warn' }, t('enterprise_below') + ': ' + b.enterprise_below));
    // The link as the coordinator measured it is what counts; the provider's own
    // figures when there is no such receipt.
    const net = b.network_receipt || a.network || {};
    parts.push(card('storage_network', facts([
      ['storage_read', num(a.storage && a.storage.seq_read_mbps, 0) + ' MB/s'],
      ['storage_write', num(a.storage && a.storage.seq_write_mbps, 0) + ' MB/s'],
      ['network_up', num(net.up_mbps, 0) + ' Mbit/s'],
      ['network_down', num(net.down_mbps, 0) + ' Mbit/s'],
      ['measured_by', t(b.network_receipt ? 'by_coordinator' : 'by_provider')],
    ])));
    fill(figures, ...parts);
  };
}
