import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createPrincipal } from '../../../src/broker/principals.js';
import type { QualificationRunView } from '../../../src/contracts/tools-qualification.js';
import { type RunningMaster, startMaster } from '../../../src/main.js';
import { readTokenFile } from '../../../src/master/data-dir.js';
import { silentLogger } from '../../../src/platform/logger.js';
import { createCaTrustingFetch } from '../../../src/platform/tls.js';
import type { QualificationRunRecord } from '../../../src/store/qualification-repo.js';
import { type RunningWorker, startWorker } from '../../../worker/daemon/start-worker.js';
import { prepareSandbox } from '../../../worker/sandbox/setup.js';
import { SlurmDriver } from '../../../worker/slurm/cli/driver.js';
import { slurmPoolSampler } from '../../../worker/slurm/sampler.js';
import { testConfig } from '../../support/master.js';
import { callTool, connectMcpClient } from '../../support/mcp.js';
import type { TestSlurm } from '../../support/slurm.js';
import { makeTempDir, removeTempDir } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * A real master (HTTPS, its dev CA, the qualification runner) and a real in-process Slurm worker
 * daemon (`--backend slurm --slurm-simulated-gpus`) on a test Slurm's partition: what
 * `gpu-broker qualify <slurm worker>` drives. The operator acts through the real MCP SDK client.
 */

/** A running master + Slurm worker. */
export interface SlurmQualCluster {
  master: RunningMaster;
  worker: RunningWorker;
  workerId: string;
  operator: Client;
  /** start_qualification; while the shared pool is busy (another engineer's jobs) it retries, bounded. */
  start(args: Record<string, unknown>): Promise<QualificationRunView>;
  /** Waits (bounded) until the run leaves RUNNING and returns its record. */
  finished(runId: string, timeoutMs?: number): Promise<QualificationRunRecord>;
  close(): Promise<void>;
}

/** Starts a master and a Slurm worker on `slurm`'s partition; waits until its pool is listed. */
export async function startSlurmQualCluster(slurm: TestSlurm, workerId: string): Promise<SlurmQualCluster> {
  const dataDir = makeTempDir('slurm-qualify');
  const master = await startMaster({
    dataDir,
    // The two-node rung's ranks meet over the network (network "host" in its spec): the policy allows it.
    config: testConfig({ timing: { sample_interval_ms: 500 }, policy: { allow_network: true } }),
    logger: silentLogger(),
    qualification: {
      env: { ...process.env },
      agentTimeoutMs: 60_000,
      runner: { settleTimeoutMs: 30_000, rungTimeoutMs: 240_000 },
    },
  });
  const caPem = readFileSync(master.caCertPath!, 'utf8');
  const { token } = createPrincipal(
    master.deps,
    { name: 'w1', roles: ['worker'], worker_id: workerId },
    'test',
  );
  const driver = new SlurmDriver({ env: slurm.env });
  const sampler = slurmPoolSampler({ driver, partition: slurm.partition, workerId, simulated: true });
  // Sandboxed like `gpu-broker worker --backend slurm` (ADR 0018): each rank in bwrap on its node, with
  // the test Slurm's fake GPU files (one dir per node on the two-node cluster, gres.conf File= with %n).
  const prepared = await prepareSandbox({
    isolation: 'bwrap',
    dataDir: join(dataDir, 'worker'),
    hiddenPaths: [dataDir],
    sampler,
    containerEngine: 'none',
  });
  if (prepared.setup.kind !== 'bwrap') throw new Error('the Slurm qualification tests need bwrap');
  const gpuDevDir = join(slurm.localDir, 'dev', ...(slurm.nodes.length > 1 ? ['%n'] : []));
  const worker = await startWorker({
    masterUrl: master.url,
    token,
    workerId,
    dataDir: join(dataDir, 'worker'),
    sampler,
    ca: caPem,
    logger: silentLogger(),
    sampleIntervalMs: 500,
    backoff: { initialMs: 50, maxMs: 500 },
    sandbox: prepared.setup,
    slurm: {
      backend: {
        driver,
        partition: slurm.partition,
        extraArgs: [],
        jobDir: join(makeTempDir('slurm-qualify-jobs'), 'jobs'),
        pollMs: 250,
        sandbox: { setup: prepared.setup, gpuDevDir },
      },
      sampler,
    },
  });
  const trusting = createCaTrustingFetch(caPem);
  const operatorToken = master.bootstrappedOperatorToken ?? readTokenFile(master.operatorTokenPath);
  const operator = await connectMcpClient(master.url, operatorToken, trusting.fetch);
  const total = slurm.nodes.length * slurm.gpusPerNode;
  await waitFor(
    () =>
      master.deps.cluster.fleet.isOnline(workerId, Date.now()) &&
      master.deps.cluster.fleet.get(workerId).cards.length === total &&
      (master.deps.store.workers.get(workerId)?.slurm?.nodes.length ?? 0) === slurm.nodes.length,
    { timeoutMs: 30_000, what: `the Slurm worker online with its pool of ${total} GPUs` },
  );
  return {
    master,
    worker,
    workerId,
    operator,
    async start(args) {
      const key = `k-${Math.random()}`;
      return waitFor(
        async () => {
          const r = await callTool<QualificationRunView>(operator, 'start_qualification', {
            worker_id: workerId,
            idempotency_key: key,
            ...args,
          });
          if (r.ok) return r.structured;
          // The shared Slurm may be running someone else's test jobs: wait for the pool to be idle.
          if (JSON.stringify(r.error).includes('POOL_NOT_IDLE')) return null;
          throw new Error(`start_qualification failed: ${JSON.stringify(r.error)}`);
        },
        { timeoutMs: 180_000, intervalMs: 1000, what: 'an idle Slurm pool to start the qualification on' },
      );
    },
    async finished(runId, timeoutMs = 600_000) {
      return waitFor(
        () => {
          const run = master.deps.store.qualifications.get(runId);
          return run && run.state !== 'RUNNING' ? run : null;
        },
        { timeoutMs, intervalMs: 250, what: `qualification run ${runId} to finish` },
      );
    },
    async close() {
      await operator.close().catch(() => undefined);
      await trusting.close();
      await worker.close();
      await master.close();
      removeTempDir(dataDir);
    },
  };
}
