import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { buildClientKit } from '../../client-kit/build.js';
import { findExecutable } from '../../qualification/run/agent-submitter.js';
import { runQualification } from '../../qualification/run/runner.js';
import type { RunnerOptions } from '../../qualification/run/runner-options.js';
import { workloadPath } from '../../qualification/workload/location.js';
import type { WorkloadPin } from '../../qualification/workload/spec.js';
import type { BrokerDeps } from '../broker/deps.js';
import type { QualificationLauncher } from '../broker/ports.js';
import { finishRun, recordStep } from '../broker/tools/qualification.js';
import { runSliceRungs } from '../broker/tools/qualification-layout.js';
import { collectPost, collectRung, runFacts } from '../broker/tools/qualification-records.js';
import { principalName } from '../broker/tools/views.js';
import { BrokerError } from '../contracts/errors.js';
import { pinnedScripts } from '../contracts/policy.js';
import type { SubmitterKind } from '../store/qualification-repo.js';

/**
 * Runs qualification runs in the master's process, in the background: start_qualification commits the
 * run and calls `launch`; the runner then drives the master through its own public MCP endpoint (HTTPS,
 * trusting its CA) exactly as an outside agent would, and this service stores what it concluded.
 */

/** Options of the service. */
export interface QualificationServiceOptions {
  /** The master's data dir; runs keep scratch files (client kit, agent homes) under it while running. */
  dataDir: string;
  /** The environment agents are launched with (PATH finds `claude`/`codex`; their logins pass through). */
  env: Readonly<Record<string, string | undefined>>;
  /** Longest one agent launch may take (default 10 min). */
  agentTimeoutMs?: number;
  /** Runner bounds (tests shorten them). */
  runner?: Partial<Pick<RunnerOptions, 'rungTimeoutMs' | 'settleTimeoutMs'>>;
}

/** How long `close` waits for aborted runs to record their end. */
const CLOSE_WAIT_MS = 10_000;

/** See the file comment. */
export class QualificationService implements QualificationLauncher {
  private endpoint: { url: string; caFile: string | null; caPem: string | null } | null = null;
  private readonly active = new Map<string, { controller: AbortController; done: Promise<void> }>();

  constructor(
    private readonly deps: BrokerDeps,
    private readonly opts: QualificationServiceOptions,
  ) {}

  /** Where the runner reaches the master; set once it listens. */
  setEndpoint(url: string, caFile: string | null): void {
    this.endpoint = { url, caFile, caPem: caFile === null ? null : readFileSync(caFile, 'utf8') };
  }

  /** The bundled workload as the master's policy allows it (withBundledWorkload always adds it). */
  private pin(): WorkloadPin {
    const script = workloadPath();
    const rule = pinnedScripts(this.deps.config.policy.scripts).find((s) => s.script === script);
    if (!rule)
      throw new BrokerError(
        'UNAVAILABLE',
        `the policy does not allow the qualification workload ${script}`,
        'The master adds it by default; check policy.scripts in the config.',
      );
    return { interpreter: rule.interpreter, script: rule.script, sha256: rule.sha256 };
  }

  assertReady(kind: SubmitterKind): void {
    if (this.endpoint === null)
      throw new BrokerError('UNAVAILABLE', 'the master is not listening yet', 'Retry in a moment.');
    this.pin();
    if (kind !== 'scripted' && findExecutable(kind, this.opts.env['PATH']) === null)
      throw new BrokerError(
        'INVALID_INPUT',
        `${kind} is not on the master's PATH`,
        `Install the ${kind} CLI for the user running the master (and log it in), or use --submitter scripted.`,
      );
  }

  launch(runId: string, tokens: { submitter: string; reviewer: string }): void {
    const controller = new AbortController();
    const done = this.execute(runId, tokens, controller.signal).finally(() => this.active.delete(runId));
    this.active.set(runId, { controller, done });
  }

  /** Aborts one run's runner; it records the run CANCELLED. False when none is active. */
  cancel(runId: string): boolean {
    const run = this.active.get(runId);
    run?.controller.abort();
    return run !== undefined;
  }

  /** Resolves once the run's background work ended (its state is then final). */
  async settled(runId: string): Promise<void> {
    await this.active.get(runId)?.done;
  }

  /** Stops every run (each ends CANCELLED, its cards still cordoned) and waits briefly for that. */
  async close(): Promise<void> {
    const runs = [...this.active.values()];
    for (const r of runs) r.controller.abort();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(runs.map((r) => r.done)),
      new Promise((resolve) => {
        timer = setTimeout(resolve, CLOSE_WAIT_MS);
      }),
    ]);
    clearTimeout(timer);
  }

  private async execute(runId: string, tokens: { submitter: string; reviewer: string }, signal: AbortSignal) {
    const { deps } = this;
    const scratch = join(this.opts.dataDir, 'qualification', runId);
    try {
      const run = deps.store.qualifications.get(runId);
      const endpoint = this.endpoint;
      if (!run || endpoint === null) throw new Error('the run or the master endpoint is gone');
      const worker = deps.store.workers.get(run.worker_id);
      let agent: RunnerOptions['agent'];
      if (run.submitter_kind !== 'scripted') {
        const kitDir = join(scratch, 'kit');
        await buildClientKit({
          outDir: kitDir,
          url: endpoint.url,
          ...(endpoint.caFile ? { caFile: endpoint.caFile } : {}),
        });
        agent = {
          kitDir,
          workDir: join(scratch, 'agents'),
          env: this.opts.env,
          timeoutMs: this.opts.agentTimeoutMs ?? 600_000,
        };
      }
      const evidence = await runQualification(
        {
          facts: runFacts(deps, run, this.pin()),
          requested: run.requested,
          ladder: run.ladder,
          slices: runSliceRungs(deps, run).map((r) => ({ card: r.card, profile: r.profile })),
          span: run.span,
          skipped: run.skipped,
          worker: { hostname: worker?.hostname ?? null, provider: worker?.provider ?? null },
          submitterKind: run.submitter_kind,
          submitter: { name: principalName(deps.store, run.submitter_id), token: tokens.submitter },
          reviewer: { name: principalName(deps.store, run.reviewer_id), token: tokens.reviewer },
          masterUrl: endpoint.url,
          caPem: endpoint.caPem,
          caFile: endpoint.caFile,
          ...(agent ? { agent } : {}),
          startedAt: run.created_at,
          now: () => deps.clock.now(),
          ...this.opts.runner,
        },
        {
          step: (cards, text) => recordStep(deps, runId, cards, text),
          collectRung: (cards, perNode, proposalId, migProfile) =>
            collectRung(deps, cards, perNode, proposalId, migProfile),
          collectPost: () => collectPost(deps, deps.store.qualifications.get(runId) ?? run),
        },
        signal,
      );
      finishRun(deps, runId, evidence ? { evidence } : { cancelled: 'the master shut down during the run' });
    } catch (err) {
      deps.logger.error({ err, run_id: runId }, 'qualification run failed to complete');
      const message = (err as Error)?.message ?? String(err);
      try {
        recordStep(deps, runId, null, `runner error: ${message}`);
        finishRun(deps, runId, { cancelled: `runner error: ${message}` });
      } catch (inner) {
        deps.logger.error({ err: inner, run_id: runId }, 'qualification run could not be closed');
      }
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }
}
