// Provider: Performance: the reliability score, its components and why it moved, its
// history, the week's hours answered, and jobs completed or failed.
import { maybe } from '../api.js';
import { barChart, lineChart, weekGrid } from '../charts.js';
import { card, facts, fill, h, short } from '../dom.js';
import { status } from '../frame.js';
import { points, providerHistory } from '../history.js';
import { nodeText, num, pct, t, when } from '../i18n.js';

export async function performance(main) {
  const body = h('div');
  main.append(body);
  return async () => {
    const [scores, jobs, hist] = await Promise.all([maybe('/v1/scores?provider=' + encodeURIComponent(status.peer_id)), maybe('/v1/jobs'), providerHistory()]);
    const parts = [];
    for (const s of scores || []) {
      parts.push(card('score', h('p', { class: 'big' }, String(s.score), h('small', {}, ' ' + (s.trend > 0 ? '▲ +' : s.trend < 0 ? '▼ ' : '') + (s.trend || ''))),
        facts([['uptime', pct(s.uptime)], ['completion', pct(s.completion)], ['consistency', pct(s.benchmark_consistency)],
          ['coordinator', h('code', {}, short(s.coordinator))], ['issued', when(s.issued_at)]]),
        barChart([{ label: t('uptime'), value: s.uptime * 100 }, { label: t('completion'), value: s.completion * 100 }, { label: t('consistency'), value: s.benchmark_consistency * 100 }],
          (v) => num(v, 1) + ' %', 'score_components'),
        (s.why || []).length ? h('div', {}, h('h3', { i18n: 'why' }), h('ul', { id: 'score-why' }, s.why.map((w) => h('li', {}, nodeText(w))))) : null));
    }
    if (!parts.length) parts.push(h('p', { class: 'empty', i18n: 'no_score' }));
    // The trend: the score and its uptime over 30 days, one pair of lines per coordinator.
    const byCoord = new Map();
    for (const it of hist.scores || []) {
      if (!byCoord.has(it.value.coordinator)) byCoord.set(it.value.coordinator, []);
      byCoord.get(it.value.coordinator).push(it);
    }
    const series = [];
    for (const [c, items] of byCoord) {
      const who = byCoord.size > 1 ? ' ' + short(c) : '';
      series.push({ label: t('score') + who, points: points(items, (v) => v.score) });
      series.push({ label: t('uptime') + ' %' + who, points: points(items, (v) => v.uptime * 100) });
    }
    parts.push(card('score_history', h('div', { id: 'score-history' }, lineChart(series, 100, (v) => num(v, 0), 'score_history'))));
    const w = hist.week;
    parts.push(card('uptime_week', h('p', { id: 'uptime-week' }, t('uptime_week_summary', { answered: w.answered_hours, declared: w.declared_hours }),
      w.declared_hours ? ' (' + pct(w.answered_hours / w.declared_hours) + ')' : ''),
    weekGrid(w), h('small', {}, t('uptime_week_hint', { tz: w.timezone }))));
    const mine = (jobs || []).filter((j) => j.side === 'provider' && j.state === 'ended');
    const done = mine.filter((j) => j.exit_code === 0).length;
    parts.push(card('jobs_done', facts([['completed', String(done)], ['failed', String(mine.length - done)]])));
    fill(body, ...parts);
  };
}
