import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMaster } from '../src/main.js';
import { parseConfig } from '../src/platform/config.js';
import { silentLogger } from '../src/platform/logger.js';
import { Store } from '../src/store/store.js';
import { appendChain } from '../test/fixtures/audit-chain.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * Audit checks against chain length (issue 14). For each chain length a master runs in this process
 * (TLS off, so the numbers are the event loop's, not the handshake's) on a data dir seeded with that many
 * correctly hashed events, and one client loop measures `GET /api/v1/cards` (an ordinary request) and
 * `GET /healthz` / `GET /api/v1/status`:
 *
 * - `idle`: nothing else runs;
 * - `+ health loop`: a second loop calls `/healthz`, `/api/v1/status` and `/metrics` back to back;
 * - `+ full verify`: the monitor re-walks the whole chain back to back (`verifyAll()` in a loop).
 *
 * Client and master share one event loop on purpose: a synchronous walk would stall the client too, so
 * any blocking shows up in its latencies. Before issue 14 a check walked the whole chain inside the
 * request (1.2–2 s at 79k events); now a request waits at most one batch (`audit.batch_size`).
 */

const CHAIN_LENGTHS = [10_000, 50_000, 200_000];
const SECONDS_PER_ROW = 2;

async function measure(
  label: string,
  get: (path: string) => Promise<number>,
  path: string,
  op: string,
  notes: string,
): Promise<OpResult> {
  const latencies: number[] = [];
  let errors = 0;
  const started = performance.now();
  const until = started + SECONDS_PER_ROW * 1000;
  while (performance.now() < until) {
    const t = performance.now();
    const status = await get(path);
    latencies.push(performance.now() - t);
    if (status !== 200) errors++;
  }
  return summarise(label, op, latencies, errors, (performance.now() - started) / 1000, notes);
}

async function runChain(events: number): Promise<OpResult[]> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-audit-'));
  const seed = Store.open(join(dataDir, 'broker.db'));
  const now = Date.now();
  appendChain(seed, events, () => now);
  seed.close();
  const master = await startMaster({
    dataDir,
    config: parseConfig({ listen: '127.0.0.1:0', tls: { mode: 'off' } }),
    logger: silentLogger(),
  });
  const token = master.bootstrappedOperatorToken ?? '';
  const get = async (path: string) => {
    const res = await fetch(`${master.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
    await res.arrayBuffer();
    return res.status;
  };
  const section = `audit ${events / 1000}k`;
  const rows: OpResult[] = [];
  try {
    await master.audit.idle();
    const t = performance.now();
    await master.audit.verifyAll();
    const fullNote = `one full pass ${((performance.now() - t) / 1000).toFixed(2)} s`;
    for (const path of ['/api/v1/cards', '/healthz', '/api/v1/status'])
      rows.push(await measure(section, get, path, `${path} idle`, path === '/api/v1/cards' ? fullNote : ''));

    let stop = false;
    const healthLoop = (async () => {
      while (!stop) for (const p of ['/healthz', '/api/v1/status', '/metrics']) await get(p);
    })();
    rows.push(await measure(section, get, '/api/v1/cards', '/api/v1/cards + health loop', ''));
    stop = true;
    await healthLoop;

    stop = false;
    let passes = 0;
    const verifyLoop = (async () => {
      while (!stop) {
        await master.audit.verifyAll();
        passes++;
      }
    })();
    for (const path of ['/api/v1/cards', '/healthz', '/api/v1/status'])
      rows.push(await measure(section, get, path, `${path} + full verify`, ''));
    stop = true;
    await verifyLoop;
    rows[rows.length - 1]!.notes = `${passes} full pass(es) meanwhile`;
  } finally {
    await master.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  return rows;
}

/** The bench section (bench/run.ts). */
export const auditCheckSection: BenchSection = {
  name: 'audit-check',
  description:
    'request latency against audit chain length, idle, beside a health loop, during full verification',
  async run() {
    const rows: OpResult[] = [];
    for (const n of CHAIN_LENGTHS) rows.push(...(await runChain(n)));
    return rows;
  },
};
