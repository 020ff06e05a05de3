// The provider's own history, shared by the Benchmarks and Performance tabs.
import { api } from './api.js';

// history reads the provider's own history (scores, benchmark runs, the week's probes)
// at most every 10 s: the Benchmarks and Performance tabs share it.
let historyAt = 0;
let historyLast = null;
export async function providerHistory() {
  if (!historyLast || Date.now() - historyAt > 10000) {
    historyLast = await api('GET', '/v1/provider/history?days=30');
    historyAt = Date.now();
  }
  return historyLast;
}
export const points = (items, f) => items.map((it) => ({ at: new Date(it.at), value: f(it.value) }));

// forgetHistory has the next read ask the node again (after a benchmark run).
export function forgetHistory() {
  historyAt = 0;
}
