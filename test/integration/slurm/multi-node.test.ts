import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { readBinding, readExit, writeJobFiles } from '../../../worker/slurm/cli/job-wrapper.js';
import { startMultiNodeSlurm, stopMultiNodeSlurm } from '../../support/slurm.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * A two-node job through the job wrapper, on a second local cluster of two slurmd on this host (n1, n2;
 * 4 fake GPUs each; its own ports and dirs, see test/support/slurm.ts). Does not touch the shared
 * single-node cluster's GPUs, so it needs no exclusive use.
 */
const avail = startMultiNodeSlurm();

describe.runIf(avail.ok)(
  avail.ok ? 'two-node Slurm job through the wrapper' : (avail as { reason: string }).reason,
  () => {
    const slurm = avail.ok ? avail.slurm : (undefined as never);
    let driver: SlurmDriver;
    let root: string;
    const submitted: string[] = [];

    beforeAll(() => {
      root = makeTempDir('slurm-mn');
      driver = new SlurmDriver({ env: slurm.env });
    });
    afterAll(async () => {
      for (const id of submitted) await driver.cancel(id).catch(() => undefined);
      if (slurm.startedHere) stopMultiNodeSlurm();
      removeTempDirs();
    });

    it('lists both nodes with their GPUs', async () => {
      const nodes = await driver.nodes('gpu');
      expect(nodes.map((n) => n.name)).toEqual(['n1', 'n2']);
      for (const n of nodes) expect(n).toMatchObject({ gpus: 4, unavailable: false });
    });

    it('--nodes=2 --ntasks-per-node=2: every rank gets the rendezvous variables; binding lists both nodes', async () => {
      const dir = join(root, 'job');
      const f = await writeJobFiles({
        jobDir: dir,
        ntasksPerNode: 2,
        argv: [
          'bash',
          '-c',
          'echo "R host=$SLURMD_NODENAME rank=$RANK local=$LOCAL_RANK node=$NODE_RANK world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE addr=$MASTER_ADDR port=$MASTER_PORT cvd=$CUDA_VISIBLE_DEVICES"',
        ],
      });
      const id = await driver.submit({
        scriptPath: f.script,
        stdout: f.stdout,
        stderr: f.stderr,
        chdir: dir,
        jobName: `gbtest-mn-${process.pid}`,
        comment: `gbtest-mn-${process.pid}`,
        partition: 'gpu',
        nodes: 2,
        ntasksPerNode: 2,
        gpusPerNode: 2,
        timeLimitSeconds: 120,
      });
      submitted.push(id);
      const running = await waitFor(
        async () => {
          const j = await driver.job(id);
          return j && j.state !== 'PENDING' ? j : null;
        },
        { timeoutMs: 60_000, intervalMs: 100, what: 'two-node job start' },
      );
      if (running.state === 'RUNNING') expect(running.nodes).toEqual(['n1', 'n2']);

      const binding = await waitFor(() => readBinding(dir), {
        timeoutMs: 60_000,
        intervalMs: 100,
        what: 'binding.json',
      });
      expect(binding).toMatchObject({
        job_id: id,
        nodes: ['n1', 'n2'],
        master_addr: '127.0.0.1',
        world_size: 4,
        ntasks_per_node: 2,
        gpu_source: 'probe',
      });
      expect(binding.per_node.map((p) => p.node)).toEqual(['n1', 'n2']);
      for (const p of binding.per_node) expect(p.gpus).toHaveLength(2);

      const exit = await waitFor(() => readExit(dir), {
        timeoutMs: 60_000,
        intervalMs: 100,
        what: 'exit.json',
      });
      expect(exit.exit_code).toBe(0);
      const ranks = readFileSync(f.stdout, 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('R '))
        .map((l) =>
          Object.fromEntries(
            l
              .slice(2)
              .split(' ')
              .map((kv) => kv.split('=') as [string, string]),
          ),
        )
        .sort((a, b) => Number(a.rank) - Number(b.rank));
      expect(ranks.map((r) => [r.host, r.rank, r.local, r.node])).toEqual([
        ['n1', '0', '0', '0'],
        ['n1', '1', '1', '0'],
        ['n2', '2', '0', '1'],
        ['n2', '3', '1', '1'],
      ]);
      for (const r of ranks) {
        expect(r).toMatchObject({
          world: '4',
          lws: '2',
          addr: '127.0.0.1',
          port: String(binding.master_port),
        });
        expect(r.cvd?.split(',')).toHaveLength(2);
      }
    });
  },
);
