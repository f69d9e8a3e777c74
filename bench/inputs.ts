import { createHash, randomBytes } from 'node:crypto';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startChildMaster } from './child-master.js';
import { BenchClients, callTool, keySequence, proposeAndApprove } from './harness.js';
import { type BenchWorker, startBenchWorker } from './in-process-worker.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * Inputs (issue 13): upload throughput and what 50 MiB of inputs add to admission.
 *
 *   - PUT /api/v1/blobs/{sha256}: 10 × 5 MiB of random bytes, one at a time (MiB/s in notes);
 *   - MCP upload_inputs: 20 calls of 1 MiB base64 (the per-call cap);
 *   - approval → started for a `/bin/true` task with no inputs, with 50 MiB of inputs the worker must
 *     fetch (fresh blobs each run: cold cache), and with the same 50 MiB again (warm cache).
 * The master runs in its own process (`gpu-broker serve`), the worker in this one over WSS, sandboxed.
 */

const MIB = 1024 * 1024;
const RUNS = 3;

async function runInputs(): Promise<OpResult[]> {
  const master = await startChildMaster({
    executables: [{ path: '/bin/true' }],
    max_input_bytes: 64 * MIB,
    input_quota_bytes: 4096 * MIB,
  });
  const trusting = createCaTrustingFetch(master.caPem);
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-inputs');
  let worker: BenchWorker | null = null;
  try {
    const aliceToken = await master.createToken('bench-alice', ['submitter']);
    const alice = await clients.connect(aliceToken);
    const rita = await clients.connect(await master.createToken('bench-rita', ['reviewer']));
    worker = await startBenchWorker(master, alice, { workerId: 'bench-inputs', cards: 2 });

    // Upload throughput: PUT
    const put = async (bytes: Buffer) => {
      const digest = createHash('sha256').update(bytes).digest('hex');
      const res = await trusting.fetch(`${master.url}/api/v1/blobs/${digest}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${aliceToken}`, 'content-type': 'application/octet-stream' },
        body: bytes,
      });
      if (res.status !== 200) throw new Error(`PUT ${res.status}: ${await res.text()}`);
      return { path: '', sha256: digest, size: bytes.length };
    };
    const putMs: number[] = [];
    let t0 = performance.now();
    for (let i = 0; i < 10; i++) {
      const b = randomBytes(5 * MIB);
      const s = performance.now();
      await put(b);
      putMs.push(performance.now() - s);
    }
    const putSeconds = putMs.reduce((a, b) => a + b, 0) / 1000;
    const rows: OpResult[] = [
      summarise(
        'inputs',
        'PUT /api/v1/blobs 5 MiB',
        putMs,
        0,
        (performance.now() - t0) / 1000,
        `${(50 / putSeconds).toFixed(1)} MiB/s`,
      ),
    ];

    // Upload throughput: MCP upload_inputs at the per-call cap
    const mcpMs: number[] = [];
    t0 = performance.now();
    for (let i = 0; i < 20; i++) {
      const content = randomBytes(MIB - 64).toString('base64');
      const s = performance.now();
      await callTool(alice, 'upload_inputs', {
        files: [{ path: `chunk${i}.bin`, content, encoding: 'base64' }],
        idempotency_key: `up-${i}`,
      });
      mcpMs.push(performance.now() - s);
    }
    const mcpSeconds = mcpMs.reduce((a, b) => a + b, 0) / 1000;
    rows.push(
      summarise(
        'inputs',
        'MCP upload_inputs 1 MiB',
        mcpMs,
        0,
        (performance.now() - t0) / 1000,
        `${(20 / mcpSeconds).toFixed(1)} MiB/s`,
      ),
    );

    // Approval → started
    const nextKey = keySequence('adm');
    const admit = async (inputs: Array<{ path: string; sha256: string; size: number }>) => {
      const spec = {
        title: 'inputs bench',
        objective: 'measure admission with inputs',
        success_criteria: 'exits 0',
        cards: { count: 1 },
        runtime: { kind: 'process', argv: ['/bin/true'] },
        inputs,
        outputs: [],
        time_limit_seconds: 120,
        notes: 'bench',
      };
      const taskId = await proposeAndApprove(alice, rita, spec, nextKey);
      const waited = await callTool<{
        task: { state: string; approved_at: string; started_at: string | null };
      }>(alice, 'wait_for_task', { task_id: taskId, timeout_seconds: 25 });
      if (waited.task.state !== 'COMPLETED') throw new Error(`task ended ${waited.task.state}`);
      return Date.parse(waited.task.started_at!) - Date.parse(waited.task.approved_at);
    };
    const fiftyMiB = async () => {
      const files = [];
      for (let i = 0; i < 10; i++)
        files.push({ ...(await put(randomBytes(5 * MIB))), path: `data/part${i}.bin` });
      return files;
    };
    const none: number[] = [];
    const cold: number[] = [];
    const warm: number[] = [];
    t0 = performance.now();
    for (let i = 0; i < RUNS; i++) none.push(await admit([]));
    rows.push(summarise('inputs', 'approval → started, no inputs', none, 0, (performance.now() - t0) / 1000));
    let last: Array<{ path: string; sha256: string; size: number }> = [];
    let spent = 0;
    for (let i = 0; i < RUNS; i++) {
      last = await fiftyMiB();
      const s = performance.now();
      cold.push(await admit(last));
      spent += performance.now() - s;
    }
    rows.push(
      summarise(
        'inputs',
        'approval → started, 50 MiB inputs, cold cache',
        cold,
        0,
        spent / 1000,
        '10 × 5 MiB fetched over HTTPS, verified, placed',
      ),
    );
    t0 = performance.now();
    for (let i = 0; i < RUNS; i++) warm.push(await admit(last));
    rows.push(
      summarise(
        'inputs',
        'approval → started, 50 MiB inputs, warm cache',
        warm,
        0,
        (performance.now() - t0) / 1000,
        'verified and placed from the worker cache',
      ),
    );
    return rows;
  } finally {
    await clients.close();
    await worker?.close();
    await trusting.close();
    await master.stop();
  }
}

/** The inputs section of `npm run bench`. */
export const inputsSection: BenchSection = {
  name: 'inputs',
  description: 'upload throughput and approval → started with 50 MiB of inputs vs none',
  run: runInputs,
};
