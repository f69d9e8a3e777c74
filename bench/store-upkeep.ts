import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrokerDeps } from '../src/broker/deps.js';
import { collectBlobGarbageInBatches } from '../src/broker/loops/blob-gc.js';
import { isText, pageBounds, textClassifier } from '../src/broker/tools/inputs.js';
import { verifiedBlob, verifiedPages } from '../src/broker/verified-blob.js';
import { silentLogger } from '../src/platform/logger.js';
import { GC_BATCH_ROWS } from '../src/store/blobs-repo.js';
import { Store } from '../src/store/store.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * Store upkeep (issue 21), in this process on a real SQLite file:
 *
 *   - get_input over a 64 MiB input in 256 KiB pages: the whole blob re-hashed per page (as before;
 *     8 pages measured, the rest extrapolated) against verified-once + the page's chunks
 *     (src/broker/verified-blob.ts verifiedPages), all 256 pages;
 *   - blob garbage collection of 100,000 unreferenced blobs: one transaction (BlobsRepo.collectGarbage,
 *     as before) against batches (src/broker/loops/blob-gc.ts); p50/p99/max are the gaps between turns
 *     of a setImmediate loop running alongside (how long a request would have waited). The master's
 *     history is seeded too (HISTORY_TASKS long-finished tasks, each naming INPUTS_PER_TASK inputs, and a
 *     few running ones): each batch asks which uploads unfinished or recent tasks still name.
 */

const MIB = 1024 * 1024;
const PAGE = 256 * 1024;
const BLOBS = 100_000;
/** Finished tasks in the seeded history (each with a spec of INPUTS_PER_TASK inputs, ~1.5 KiB). */
const HISTORY_TASKS = 50_000;
const INPUTS_PER_TASK = 10;

interface Fixture {
  readonly deps: BrokerDeps;
  readonly owner: string;
  close(): void;
}

function fixture(): Fixture {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-upkeep-'));
  const store = Store.open(join(dir, 'master.sqlite'));
  const owner = 'prin-bench';
  store.principals.insert({
    id: owner,
    name: 'bench',
    roles: ['submitter'],
    worker_id: null,
    created_at: 0,
    token_hash: '0'.repeat(64),
  });
  const deps = { store, logger: silentLogger(), clock: { now: () => Date.now() } } as unknown as BrokerDeps;
  return {
    deps,
    owner,
    close: () => {
      store.db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function oldPage(f: Fixture, sha256: string, offset: number): Promise<number> {
  const content = verifiedBlob(f.deps, f.owner, sha256);
  const text = isText(content);
  const b = pageBounds(content, text, offset, PAGE);
  return content.subarray(b.offset, b.end).length;
}

async function newPage(f: Fixture, sha256: string, offset: number): Promise<number> {
  const blob = await verifiedPages(f.deps, f.owner, sha256, textClassifier);
  return blob.read(offset, Math.min(blob.size, offset + PAGE)).length;
}

async function getInputRows(): Promise<OpResult[]> {
  const f = fixture();
  try {
    const content = randomBytes(64 * MIB);
    const sha256 = createHash('sha256').update(content).digest('hex');
    f.deps.store.blobs.put(sha256, content, 0);
    f.deps.store.blobs.recordUpload(f.owner, sha256, 0);
    const rows: OpResult[] = [];
    for (const [op, read, pages] of [
      ['get_input 64 MiB, whole blob re-hashed per page (before)', oldPage, 8],
      ['get_input 64 MiB, verified once + per-page chunks', newPage, (64 * MIB) / PAGE],
    ] as const) {
      const latencies: number[] = [];
      const started = performance.now();
      for (let i = 0; i < pages; i++) {
        const t = performance.now();
        await read(f, sha256, i * PAGE);
        latencies.push(performance.now() - t);
      }
      const seconds = (performance.now() - started) / 1000;
      const all = (seconds * (64 * MIB)) / PAGE / pages;
      rows.push(summarise('store-upkeep', op, latencies, 0, seconds, `all 256 pages: ${all.toFixed(1)} s`));
    }
    return rows;
  } finally {
    f.close();
  }
}

/**
 * The master's task history: HISTORY_TASKS tasks finished long ago and 20 running, each naming inputs
 * (none of them the orphans). Rows only: the foreign keys (proposals, revisions) are off while seeding.
 */
function seedHistory(f: Fixture): void {
  const { db } = f.deps.store;
  db.pragma('foreign_keys = OFF');
  const insert = db.prepare(
    `INSERT INTO tasks (id, proposal_id, revision_id, owner_id, spec, spec_digest, state, approved_at,
                        created_at, updated_at, finished_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, 0, ?)`,
  );
  f.deps.store.transaction(() => {
    for (let i = 0; i < HISTORY_TASKS + 20; i++) {
      const running = i >= HISTORY_TASKS;
      const inputs = Array.from({ length: INPUTS_PER_TASK }, (_, k) => ({
        path: `data/part-${k}.bin`,
        sha256: createHash('sha256').update(`history-${i}-${k}`).digest('hex'),
        size: 1024,
      }));
      const spec = JSON.stringify({ runtime: { kind: 'process', argv: ['python3', 'train.py'] }, inputs });
      const state = running ? 'RUNNING' : 'COMPLETED';
      insert.run(`t${i}`, `p${i}`, `r${i}`, f.owner, spec, '0'.repeat(64), state, running ? null : 1);
    }
  });
  db.pragma('foreign_keys = ON');
}

function seed(f: Fixture): void {
  seedHistory(f);
  f.deps.store.transaction(() => {
    for (let i = 0; i < BLOBS; i++) {
      const content = Buffer.from(`orphan-${i}-${'x'.repeat(200)}`);
      const sha256 = createHash('sha256').update(content).digest('hex');
      f.deps.store.blobs.put(sha256, content, 0);
      f.deps.store.blobs.recordUpload(f.owner, sha256, 0);
    }
  });
}

/** Runs `work` with a setImmediate loop alongside; the gaps between its turns (ms), sorted. */
async function loopGaps(work: () => Promise<unknown>): Promise<{ gaps: number[]; seconds: number }> {
  let stop = false;
  const gaps: number[] = [];
  const watcher = (async () => {
    let last = performance.now();
    while (!stop) {
      await new Promise((r) => setImmediate(r));
      const now = performance.now();
      gaps.push(now - last);
      last = now;
    }
  })();
  const started = performance.now();
  await work();
  const seconds = (performance.now() - started) / 1000;
  stop = true;
  await watcher;
  return { gaps: gaps.sort((a, b) => a - b), seconds };
}

async function blobGcRows(): Promise<OpResult[]> {
  const rows: OpResult[] = [];
  for (const [op, run] of [
    [
      `blob GC of ${BLOBS} unreferenced blobs, one transaction (before)`,
      async (f: Fixture) => f.deps.store.transaction(() => f.deps.store.blobs.collectGarbage(1, 1)),
    ],
    [
      `blob GC of ${BLOBS} unreferenced blobs, batches of 500 / 64 MiB`,
      async (f: Fixture) => collectBlobGarbageInBatches(f.deps, Date.now() - 1),
    ],
  ] as const) {
    const f = fixture();
    try {
      seed(f);
      const { gaps, seconds } = await loopGaps(() => run(f));
      const left = (f.deps.store.db.prepare('SELECT count(*) AS n FROM blobs').get() as { n: number }).n;
      // p50/p99/max are of the event loop's turns while the collection ran: how long others waited.
      rows.push({
        ...summarise('store-upkeep', op, gaps, left === 0 ? 0 : 1, seconds),
        notes: `event-loop turns measured; longest block ${gaps.at(-1)?.toFixed(0)} ms; ${left} blobs left; ${HISTORY_TASKS} finished tasks in the history`,
      });
    } finally {
      f.close();
    }
  }
  return rows;
}

/**
 * Step 1 alone (BlobsRepo.expireUploads), batch by batch, over the seeded history: each batch asks which
 * uploads unfinished or recent tasks name (issue 21: without migration 014-blob-chunks's partial index this
 * scanned every task per batch). p50/p99/max are per batch.
 */
function inUseCheckRows(): OpResult[] {
  const f = fixture();
  try {
    seed(f);
    const { store } = f.deps;
    const latencies: number[] = [];
    const started = performance.now();
    for (;;) {
      const t = performance.now();
      const dropped = store.transaction(() => store.blobs.expireUploads(1, 1, GC_BATCH_ROWS));
      latencies.push(performance.now() - t);
      if (dropped < GC_BATCH_ROWS) break;
    }
    const seconds = (performance.now() - started) / 1000;
    const indexed = store.db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'tasks_unfinished'")
      .get();
    const op = `blob GC step 1 (in-use check) per batch of ${GC_BATCH_ROWS}, ${HISTORY_TASKS} finished tasks`;
    return [
      summarise('store-upkeep', op, latencies, 0, seconds, indexed ? 'tasks_unfinished index' : 'no index'),
    ];
  } finally {
    f.close();
  }
}

export const storeUpkeepSection: BenchSection = {
  name: 'store-upkeep',
  description: 'get_input paging cost and blob GC event-loop blocking (issue 21)',
  run: async () => [...(await getInputRows()), ...inUseCheckRows(), ...(await blobGcRows())],
};
