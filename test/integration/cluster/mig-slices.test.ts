import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as cardListCli } from '../../../src/cli/operator/card-list.js';
import { run as cardsCli } from '../../../src/cli/operator/cards.js';
import { run as statusCli } from '../../../src/cli/operator/status.js';
import { migCardIndex } from '../../../src/contracts/sample.js';
import { parseSimMigLayout } from '../../../worker/samplers/sim-mig-layout.js';
import { SimSampler, simMigMinors } from '../../../worker/samplers/sim-sampler.js';
import { runCli } from '../../support/cli.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { makeGateDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * The measurement of docs/decisions/0046-mig-slices-as-cards.md on simulated slices: one
 * simulated card split 7 ways runs 7 one-slice tasks at once, each in a sandbox holding its parent's
 * node and only its own two capability nodes, named by its MIG- uuid; a whole-card task waits.
 */

let m: TestMaster;
let worker: TestWorker;
let alice: Client;
let rita: Client;
let gates: string;

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  const sampler = new SimSampler({ count: 1, seed: 'mig-1', mig: parseSimMigLayout('1g.10gb*7') });
  worker = await startWorkerOn(m, 'mig-1', { sampler });
  await waitFor(() => cards('AVAILABLE') === 7, { what: 'seven available slices' });
  gates = makeGateDir('mig-gates');
});

afterAll(async () => {
  await worker?.close();
  await m?.close();
  removeTempDirs();
});

function cards(state: string): number {
  return m.deps.cluster.fleet
    .listCards(m.store, Date.now(), { sample_interval_ms: 200 })
    .filter((c) => c.state === state && c.mig !== null).length;
}

async function reasonOf(taskId: string): Promise<string | undefined> {
  type Queue = { tasks: Array<{ task_id: string | null; reason: { code?: string } | null }> };
  const queue = expectOk(await callTool<Queue>(alice, 'get_queue', {}));
  return queue.tasks.find((t) => t.task_id === taskId)?.reason?.code;
}

describe('one simulated card in MIG mode, 1g.10gb × 7', () => {
  it('lists the card in MIG mode and its seven slices under it', () => {
    const listed = m.deps.cluster.fleet.listCards(m.store, Date.now(), { sample_interval_ms: 200 });
    expect(listed.map((c) => [c.label, c.state, c.mig?.profile ?? null, c.simulated])).toEqual([
      ['0', 'CORDONED', null, true],
      ...[1, 2, 3, 4, 5, 6, 7].map((gi) => [`0:mig:${gi}/0`, 'AVAILABLE', '1g.10gb', true]),
    ]);
  });

  it('/metrics shows each slice under its card with profile, state, memory and whether a lease holds it', async () => {
    const res = await m.fetch(new URL('/metrics', m.url), {
      headers: { authorization: `Bearer ${m.operatorToken}` },
    });
    const text = await res.text();
    const slices = text.split('\n').filter((l) => l.startsWith('gpu_broker_mig_slices{'));
    expect(slices).toHaveLength(7);
    expect(slices).toContain(
      'gpu_broker_mig_slices{worker="mig-1",card="0",slice="0:mig:3/0",profile="1g.10gb",state="AVAILABLE",leased="false"} 1',
    );
    const memory = text
      .split('\n')
      .filter((l) => l.startsWith('gpu_broker_mig_slice_memory_total_mib{worker="mig-1"'));
    expect(memory).toHaveLength(7);
    expect(memory.every((l) => /profile="1g\.10gb"\} [1-9]\d*$/.test(l))).toBe(true);
    expect(text).toContain('# TYPE gpu_broker_preemptions_total counter');
  });

  it('/metrics shows the memory a slice has in use as its instance reports it, and no utilisation per slice', async () => {
    // 100 MiB in use on slice 0:mig:4/0 (1 % of it: still AVAILABLE), as the MIG devices table would say.
    const index = migCardIndex(0, 4, 0);
    (worker.sampler as SimSampler).setOverride(index, { memory_used_mib: 100 });
    const scrape = async () => {
      const res = await m.fetch(new URL('/metrics', m.url), {
        headers: { authorization: `Bearer ${m.operatorToken}` },
      });
      return (await res.text()).split('\n');
    };
    const used = await waitFor(
      async () => {
        const lines = (await scrape()).filter((l) => l.startsWith('gpu_broker_mig_slice_memory_used_mib{'));
        return lines.some((l) => l.endsWith(' 100')) ? lines : null;
      },
      { what: 'the slice memory in use scraped' },
    );
    expect(used).toHaveLength(7);
    expect(used).toContain(
      'gpu_broker_mig_slice_memory_used_mib{worker="mig-1",slice="0:mig:4/0",profile="1g.10gb"} 100',
    );
    expect(used.filter((l) => l.endsWith(' 0'))).toHaveLength(6);
    // nvidia-smi reports no utilisation per MIG instance: the series is absent, never a made-up 0.
    expect((await scrape()).filter((l) => l.startsWith('gpu_broker_mig_slice_utilization_pct{'))).toEqual([]);
    (worker.sampler as SimSampler).setOverride(index, null);
    await waitFor(() => cards('AVAILABLE') === 7, { what: 'seven available slices again' });
  });

  it('gpu-broker status lists each slice under its card with its memory, and n/a for utilisation', async () => {
    const out = await runCli(statusCli, [], {
      GPU_BROKER_URL: m.url,
      GPU_BROKER_TOKEN: m.operatorToken,
      GPU_BROKER_CA_FILE: m.caCertPath ?? '',
    });
    expect(out.code, out.stderr).toBe(0);
    const rows = out.stdout.split('\n').filter((l) => l.startsWith('mig-1 ') && l.includes('MIG'));
    expect(rows[0]).toMatch(
      /^mig-1\s+0\s+Simulated GPU \(sim\) \[MIG mode\]\s+CORDONED\s+0\/81920 MiB\s+n\/a\s/,
    );
    expect(rows.slice(1)).toHaveLength(7);
    for (const row of rows.slice(1))
      expect(row).toMatch(
        /^mig-1\s+└ 0:mig:[1-7]\/0\s+MIG 1g\.10gb \(sim\)\s+AVAILABLE\s+\d+\/\d+ MiB\s+n\/a\s/,
      );
  });

  it('gpu-broker cards prints the same rows alone, and --json the cards with their slice fields', async () => {
    const env = {
      GPU_BROKER_URL: m.url,
      GPU_BROKER_TOKEN: m.operatorToken,
      GPU_BROKER_CA_FILE: m.caCertPath ?? '',
    };
    const out = await runCli(cardListCli, [], env);
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout.split('\n')[0]).toBe('CARDS');
    const slices = out.stdout.split('\n').filter((l) => /^mig-1\s+└ 0:mig:[1-7]\/0\s+MIG 1g\.10gb/.test(l));
    expect(slices).toHaveLength(7);
    expect(out.stdout).not.toMatch(/^QUEUE|^LEASES|^ALERTS/m);
    const json = await runCli(cardListCli, ['--json'], env);
    const cards = (
      JSON.parse(json.stdout) as { cards: Array<{ label?: string; mig?: { profile: string } | null }> }
    ).cards;
    expect(cards.filter((c) => c.mig?.profile === '1g.10gb').map((c) => c.label)).toHaveLength(7);
  });

  it('runs 7 one-slice tasks at once, each seeing only its own slice', async () => {
    const gate = join(gates, 'open');
    const script = [
      'echo "vis=$CUDA_VISIBLE_DEVICES ids=$GPU_BROKER_GPU_IDS"',
      'echo "caps=$(ls /dev/nvidia-caps | tr "\\n" " ")"',
      `while [ ! -e '${gate}' ]; do sleep 0.05; done`,
    ].join('\n');
    const ids = await Promise.all(
      Array.from({ length: 7 }, (_, i) =>
        approveTask(
          alice,
          rita,
          shellSpec(script, { title: `slice task ${i}`, cards: { count: 1, mig_profile: '1g.10gb' } }),
        ),
      ),
    );
    // All seven hold their slices at the same time, on one card.
    await waitFor(() => cards('LEASED') === 7, { what: 'seven leased slices', timeoutMs: 30_000 });
    const whole = await approveTask(alice, rita, shellSpec('true', { title: 'a whole card' }));
    await waitFor(async () => (await getTask(alice, whole)).state === 'QUEUED', { what: 'queued' });
    await waitFor(async () => (await reasonOf(whole)) === 'no_matching_worker', {
      what: 'the whole-card task waits as no_matching_worker',
    });
    writeFileSync(gate, '');
    const settled = await Promise.all(ids.map((id) => waitUntilSettled(alice, id, 60_000)));
    expect(settled.map((t) => t.state)).toEqual(ids.map(() => 'COMPLETED'));
    const seen = new Set<string>();
    for (const t of settled) {
      const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: t.task_id }));
      const vis = /^vis=(MIG-\S+) ids=0:mig:(\d)\/0$/m.exec(logs.data);
      expect(vis, logs.data).not.toBeNull();
      expect(vis![1]).toBe(t.cards[0]!.uuid);
      // What a reviewer reads in get_task: which slice of which card ran it.
      expect(t.cards[0]!.label).toBe(`0:mig:${vis![2]}/0`);
      const minors = simMigMinors(0, Number(vis![2]), 0);
      expect(logs.data).toContain(`caps=nvidia-cap${minors.gi} nvidia-cap${minors.ci} `);
      seen.add(vis![1]!);
    }
    expect(seen.size).toBe(7);
    // The ledger keeps each slice's profile beside the model and charges it as 1/7 of a card.
    await waitFor(() => m.store.usage.totals().some((r) => r.model === 'Simulated GPU MIG 1g.10gb'), {
      what: 'the slices charged',
    });
    const charged = m.store.usage.totals().filter((r) => r.simulated);
    expect(charged.map((r) => r.model)).toEqual(['Simulated GPU MIG 1g.10gb']);
    await callTool(alice, 'cancel_task', { task_id: whole, idempotency_key: `cancel-${whole}` });
  });

  it('cordon names a slice by its label; cordoning the card cordons every slice of it', async () => {
    const env = {
      GPU_BROKER_URL: m.url,
      GPU_BROKER_TOKEN: m.operatorToken,
      GPU_BROKER_CA_FILE: m.caCertPath ?? '',
    };
    const states = () =>
      m.deps.cluster.fleet
        .listCards(m.store, Date.now(), { sample_interval_ms: 200 })
        .filter((c) => c.mig !== null)
        .map((c) => c.state);
    await waitFor(() => cards('AVAILABLE') === 7, { what: 'the slices free again' });
    const one = await runCli(cardsCli, ['cordon', 'mig-1:0:mig:3/0', '--reason', 'one slice'], env);
    expect(one.code, one.stderr).toBe(0);
    expect(m.store.workers.cordons().map((c) => c.card_index)).toEqual([migCardIndex(0, 3, 0)]);
    expect(states().filter((s) => s === 'CORDONED')).toHaveLength(1);
    const parent = await runCli(cardsCli, ['cordon', 'mig-1:0', '--reason', 'the whole card'], env);
    expect(parent.code, parent.stderr).toBe(0);
    expect(states()).toEqual(Array.from({ length: 7 }, () => 'CORDONED'));
    const off = await runCli(cardsCli, ['uncordon', 'mig-1:0', 'mig-1:0:mig:3/0'], env);
    expect(off.code, off.stderr).toBe(0);
    expect(states()).toEqual(Array.from({ length: 7 }, () => 'AVAILABLE'));
    const bad = await runCli(cardsCli, ['cordon', 'mig-1:0:mig:15/0'], env);
    expect(bad.code).toBe(2);
    const missing = await runCli(cardsCli, ['cordon', 'mig-1:0:mig:9/0'], env);
    expect(missing.stderr).toContain('no such card: mig-1:0:mig:9/0');
  });
});
