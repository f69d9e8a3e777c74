import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { makeGateDir } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Limits follow the machine (docs/security.md "The task sandbox"), through a real master and worker: the worker reports its
 * host in its hello; a task's defaults are at most its host's share per card (the policy's 32 GiB per
 * card is above this 24 GiB host's RAM); a spec asking for more than the host can give waits with a
 * reason naming it instead of starting.
 */

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
// Disk: what the worker found free at its start; each running task's dir takes its room when it is made.
const HOST = { memory_mib: 24576, cpus: 4, disk_mib: 16384 };

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-small-host', { simCards: 4, hostResources: HOST });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-small-host').cards.length === 4, {
    what: 'four sim cards',
  });
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
});

/** The size of the task's /tmp and /dev/shm in MiB, as `df` inside the sandbox reads them. */
const SIZES = `echo "tmp=$(df -m /tmp | tail -1 | awk '{print $2}') shm=$(df -m /dev/shm | tail -1 | awk '{print $2}')"`;

describe('limits follow the machine', () => {
  it('records the host the worker reports, and list_workers shows it', async () => {
    expect(m.deps.store.workers.get('gpu-small-host')?.host).toEqual(HOST);
    const listed = expectOk(
      await callTool<{ workers: Array<{ worker_id: string; host: unknown }> }>(alice, 'list_workers', {}),
    ).workers.find((x) => x.worker_id === 'gpu-small-host');
    expect(listed?.host).toEqual({
      ...HOST,
      memory_committed_mib: 0,
      disk_committed_mib: 0,
      cpus_committed: 0,
    });
  });

  it("gives a task by default at most its host's share per card (24 GiB less 4 GiB, over 4 cards)", async () => {
    const one = await approveTask(alice, rita, shellSpec(SIZES));
    expect(await waitUntilSettled(alice, one)).toMatchObject({ state: 'COMPLETED' });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: one })).data;
    expect(logs).toBe('tmp=5120 shm=5120\n');
    const two = await approveTask(alice, rita, shellSpec(SIZES, { cards: { count: 2 } }));
    await waitUntilSettled(alice, two);
    const logs2 = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: two })).data;
    expect(logs2).toBe('tmp=10240 shm=10240\n');
  });

  it('runs a task asking above the share but within the host', async () => {
    const id = await approveTask(alice, rita, shellSpec(SIZES, { limits: { tmp_mib: 16384 } }));
    await waitUntilSettled(alice, id);
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: id })).data;
    expect(logs).toBe('tmp=16384 shm=5120\n');
  });

  it('tells the agent and the reviewer at create_proposal that no enrolled host can give such an ask', async () => {
    const created = expectOk(
      await callTool<{ findings: Array<{ code: string; severity: string; path: string; message: string }> }>(
        alice,
        'create_proposal',
        {
          spec: shellSpec('echo ran', { limits: { memory_mib: 65536 } }),
          idempotency_key: `host-${Date.now()}`,
        },
      ),
    );
    expect(created.findings.find((f) => f.code === 'LIMIT_ABOVE_HOSTS')).toMatchObject({
      severity: 'warning',
      path: 'limits.memory_mib',
    });
    expect(created.findings.find((f) => f.code === 'LIMIT_ABOVE_HOSTS')?.message).toContain('at most 20480');
  });

  it('attack: a spec asking for more memory than the host has waits with a reason naming it', async () => {
    const id = await approveTask(alice, rita, shellSpec('echo ran', { limits: { memory_mib: 65536 } }));
    const reason = await waitFor(
      async () => {
        const r = (await getTask(alice, id)).reason;
        return r?.['code'] === 'limits_exceed_host' ? r : undefined;
      },
      { what: 'limits_exceed_host' },
    );
    expect(reason).toMatchObject({ limit: 'memory_mib', ask: 65536, most: 20480 });
    expect(String(reason['message'])).toContain('24576 MiB RAM');
    expect((await getTask(alice, id)).state).toBe('QUEUED');
    expectOk(await callTool(alice, 'cancel_task', { task_id: id, idempotency_key: `c-${id}` }));
  });

  it('attack: a task asking for most of the host leaves the next one waiting for memory, not over-promised', async () => {
    const gate = join(makeGateDir('host-memory'), 'go');
    const big = await approveTask(
      alice,
      rita,
      shellSpec(`while [ ! -e '${gate}' ]; do sleep 0.05; done`, { limits: { memory_mib: 16384 } }),
    );
    await waitFor(async () => (await getTask(alice, big)).state === 'RUNNING', {
      what: 'the big task running',
    });
    expect(m.deps.store.leases.committedByWorker().get('gpu-small-host')?.memory_mib).toBe(16384);
    // Three cards are free, but 20480 - 16384 = 4096 MiB is left and a default task is given 5120.
    const next = await approveTask(alice, rita, shellSpec('echo next'));
    const reason = await waitFor(
      async () => {
        const r = (await getTask(alice, next)).reason;
        return r?.['code'] === 'waiting_for_host_room' ? r : undefined;
      },
      { what: 'waiting_for_host_room' },
    );
    expect(reason).toMatchObject({
      resource: 'memory_mib',
      worker_id: 'gpu-small-host',
      need_mib: 5120,
      free_mib: 4096,
    });
    writeFileSync(gate, '');
    expect(await waitUntilSettled(alice, big)).toMatchObject({ state: 'COMPLETED' });
    expect(await waitUntilSettled(alice, next)).toMatchObject({ state: 'COMPLETED' });
    expect(m.deps.store.leases.committedByWorker().get('gpu-small-host')?.memory_mib ?? 0).toBe(0);
  });

  it('attack: CPU asks are never promised twice: a task asking for the host’s free CPUs leaves the next CPU ask waiting, not one that asks none', async () => {
    // 4 CPUs less the 1 reserved: 3 for tasks that ask.
    const gate = join(makeGateDir('host-cpus'), 'go');
    const big = await approveTask(
      alice,
      rita,
      shellSpec(`while [ ! -e '${gate}' ]; do sleep 0.05; done`, { limits: { cpus: 3 } }),
    );
    await waitFor(async () => (await getTask(alice, big)).state === 'RUNNING', {
      what: 'the 3-CPU task running',
    });
    expect(m.deps.store.leases.committedByWorker().get('gpu-small-host')?.cpus).toBe(3);
    const more = await approveTask(alice, rita, shellSpec('echo more', { limits: { cpus: 1 } }));
    const reason = await waitFor(
      async () => {
        const r = (await getTask(alice, more)).reason;
        return r?.['code'] === 'waiting_for_host_room' ? r : undefined;
      },
      { what: 'waiting_for_host_room (cpus)' },
    );
    expect(reason).toMatchObject({ resource: 'cpus', need_cpus: 1, free_cpus: 0 });
    // A task asking no CPUs is not held back by them.
    const plain = await approveTask(alice, rita, shellSpec('echo plain'));
    expect(await waitUntilSettled(alice, plain)).toMatchObject({ state: 'COMPLETED' });
    // More CPUs than the host can ever give: the reason says so.
    const huge = await approveTask(alice, rita, shellSpec('echo huge', { limits: { cpus: 4 } }));
    const never = await waitFor(
      async () => {
        const r = (await getTask(alice, huge)).reason;
        return r?.['code'] === 'limits_exceed_host' ? r : undefined;
      },
      { what: 'limits_exceed_host (cpus)' },
    );
    expect(never).toMatchObject({ limit: 'cpus', ask: 4, most: 3 });
    expectOk(await callTool(alice, 'cancel_task', { task_id: huge, idempotency_key: `c-${huge}` }));
    writeFileSync(gate, '');
    expect(await waitUntilSettled(alice, big)).toMatchObject({ state: 'COMPLETED' });
    expect(await waitUntilSettled(alice, more)).toMatchObject({ state: 'COMPLETED' });
    expect(m.deps.store.leases.committedByWorker().get('gpu-small-host')?.cpus ?? 0).toBe(0);
  });
});
