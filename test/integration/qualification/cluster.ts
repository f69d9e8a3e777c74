import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createPrincipal } from '../../../src/broker/principals.js';
import type { QualificationRunView } from '../../../src/contracts/tools-qualification.js';
import { type RunningMaster, startMaster } from '../../../src/main.js';
import { readTokenFile } from '../../../src/master/data-dir.js';
import { silentLogger } from '../../../src/platform/logger.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { createCaTrustingFetch } from '../../../src/platform/tls.js';
import type { QualificationRunRecord } from '../../../src/store/qualification-repo.js';
import { type RunningWorker, startWorker } from '../../../worker/daemon/start-worker.js';
import { parseSimMigLayout } from '../../../worker/samplers/sim-mig-layout.js';
import { SimSampler } from '../../../worker/samplers/sim-sampler.js';
import { prepareSandbox } from '../../../worker/sandbox/setup.js';
import { testConfig } from '../../support/master.js';
import { callTool, connectMcpClient, expectOk } from '../../support/mcp.js';
import { makeTempDir, removeTempDir } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';

/**
 * A real master (startMaster on 127.0.0.1:0, TLS auto with its dev CA, temp data dir) and a real
 * in-process worker daemon on N simulated cards, connected over WSS — the set-up of a qualification
 * on a host without GPUs. The operator acts through the real MCP SDK client.
 */

/** The fake `claude` / `codex` executables (test/fixtures/bin-agents). */
export const FAKE_AGENTS_DIR = join(packageRoot(), 'test', 'fixtures', 'bin-agents');

/** Options of {@link startCluster}. */
export interface ClusterOptions {
  cards?: number;
  /** Extra environment for agent launches (e.g. FAKE_AGENT_MODE); PATH starts with the fake agents. */
  agentEnv?: Record<string, string>;
  /** The master's qualification_python (default /usr/bin/python3). */
  qualificationPython?: string;
  /** A MIG layout every simulated card is split into (`3g.40gb+1g.10gb`, as `--gpus sim:N:mig=`). */
  mig?: string;
}

/** Fake interpreters for the preflight (test/fixtures/bin-python). */
export const FAKE_PYTHONS_DIR = join(packageRoot(), 'test', 'fixtures', 'bin-python');

/** A running master + worker. */
export interface Cluster {
  master: RunningMaster;
  worker: RunningWorker;
  workerId: string;
  dataDir: string;
  operator: Client;
  /** Starts a run through MCP as the operator. */
  start(args: Record<string, unknown>): Promise<QualificationRunView>;
  /** Waits (bounded) until the run leaves RUNNING and returns its record. */
  finished(runId: string, timeoutMs?: number): Promise<QualificationRunRecord>;
  close(): Promise<void>;
}

/** Starts a master and a worker with `cards` simulated cards and waits until the worker is online. */
export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  const dataDir = makeTempDir('qualify');
  const config = testConfig({
    timing: { sample_interval_ms: 500 },
    ...(opts.qualificationPython ? { qualification_python: opts.qualificationPython } : {}),
  });
  const master = await startMaster({
    dataDir,
    config,
    logger: silentLogger(),
    qualification: {
      env: { ...process.env, PATH: `${FAKE_AGENTS_DIR}:${process.env['PATH'] ?? ''}`, ...opts.agentEnv },
      agentTimeoutMs: 60_000,
      runner: { settleTimeoutMs: 15_000, rungTimeoutMs: 90_000 },
    },
  });
  const caPem = readFileSync(master.caCertPath!, 'utf8');
  const workerId = 'sim-host-1';
  const { token } = createPrincipal(
    master.deps,
    { name: 'w1', roles: ['worker'], worker_id: workerId },
    'test',
  );
  const sampler = new SimSampler({
    count: opts.cards ?? 8,
    seed: workerId,
    ...(opts.mig ? { mig: parseSimMigLayout(opts.mig) } : {}),
  });
  const workerDir = join(dataDir, 'worker');
  // The rungs run in the real bubblewrap sandbox, as on a GPU host.
  const sandbox = await prepareSandbox({
    isolation: 'bwrap',
    dataDir: workerDir,
    sampler,
    hiddenPaths: [dataDir],
  });
  const worker = await startWorker({
    sandbox: sandbox.setup,
    masterUrl: master.url,
    token,
    workerId,
    dataDir: workerDir,
    sampler,
    ca: caPem,
    logger: silentLogger(),
    sampleIntervalMs: 500,
    cleanupPollMs: 50,
  });
  const trusting = createCaTrustingFetch(caPem);
  const operatorToken = master.bootstrappedOperatorToken ?? readTokenFile(master.operatorTokenPath);
  const operator = await connectMcpClient(master.url, operatorToken, trusting.fetch);
  await waitFor(
    () =>
      master.deps.cluster.fleet.isOnline(workerId, Date.now()) &&
      master.deps.cluster.fleet.get(workerId).cards.length > 0,
    { timeoutMs: 15_000, what: 'the worker online with sampled cards' },
  );
  let closed = false;
  let masterClosed = false;
  const closeMaster = master.close.bind(master);
  master.close = async () => {
    masterClosed = true;
    await closeMaster();
  };
  return {
    master,
    worker,
    workerId,
    dataDir,
    operator,
    async start(args) {
      return expectOk(
        await callTool<QualificationRunView>(operator, 'start_qualification', {
          worker_id: workerId,
          idempotency_key: `k-${Math.random()}`,
          ...args,
        }),
      );
    },
    async finished(runId, timeoutMs = 120_000) {
      return waitFor(
        () => {
          const run = master.deps.store.qualifications.get(runId);
          return run && run.state !== 'RUNNING' ? run : null;
        },
        { timeoutMs, intervalMs: 100, what: `qualification run ${runId} to finish` },
      );
    },
    async close() {
      if (closed) return;
      closed = true;
      await operator.close().catch(() => undefined);
      await trusting.close();
      await worker.close();
      // A test may have closed the master itself (closing twice would close the store twice).
      if (!masterClosed) await master.close();
      removeTempDir(dataDir);
    },
  };
}
