import type { ExecutionPlan } from '../../src/contracts/worker-protocol.js';
import type { ExecutionExit } from '../executions/executor.js';
import { describeEnforced, type LimitBreach } from '../sandbox/limits.js';
import { collectOutputs } from '../task-io/outputs.js';
import type { TaskBox } from './box.js';
import { type OomProbe, readOomKillCount } from './process-group.js';
import { deadlineDetail, type LocalOutcome, localVerdict } from './verdict.js';

/**
 * Step 5 of a local execution (executor.ts): once the task's main process has exited and its leftovers
 * are gone, its outputs are collected (no symlink followed anywhere) and its failure reason decided
 * (verdict.ts) → the `exited` report.
 */

/** How the main process ended, as step 4 left it. */
export interface MainExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly logErrors: string[];
}

/** What the run knows of how it was stopped, and where its files are. */
export interface JudgeFacts {
  /** The execution's directory (its outputs are under `task/out`). */
  readonly execRoot: string;
  /** Who owns the task's files (outputs it does not own are refused). */
  readonly owner: number | null;
  /** The OOM baseline taken before the spawn; null where there is none. */
  readonly oomProbe: OomProbe | null;
  /** The executor's own kill (WORKER_LOST when the exit status was lost with its spawner), or null. */
  readonly killReason: LocalOutcome['killReason'];
  /** Why the exit status was lost, or null. */
  readonly lostReason: string | null;
  /** A backfilled run's deadline came before its time limit (a TIMED_OUT then says which stopped it). */
  readonly deadlineFirst: boolean;
}

/** The `exited` report of a task whose main process ended as `main`. */
export async function judgeExit(
  plan: ExecutionPlan,
  main: MainExit,
  box: TaskBox,
  facts: JudgeFacts,
): Promise<ExecutionExit> {
  const { code, signal } = main;
  const collection = await collectOutputs(
    { base: facts.execRoot, below: ['task', 'out'], owner: facts.owner },
    plan.spec.outputs,
  );
  const oomKilled = signal === 'SIGKILL' && facts.oomProbe !== null && (await oomCountRose(facts.oomProbe));
  const limits = box.limits;
  const breach = limits === undefined ? null : await limits.breach();
  const failure = localVerdict({
    killReason: facts.killReason,
    exitCode: code,
    signal,
    oomKilled,
    breach: breach?.reason ?? null,
    requiredMissing: collection.requiredMissing,
  });
  return {
    exit_code: code,
    signal,
    failure_reason: failure,
    outputs: collection.outputs,
    output_errors: collection.errors,
    log_errors:
      facts.lostReason === null
        ? main.logErrors
        : [...main.logErrors, `the task's exit status was lost (${facts.lostReason}); it was killed`],
    ...deadlineDetail(
      failure === 'TIMED_OUT' && facts.deadlineFirst && facts.killReason === 'TIMED_OUT'
        ? plan.stop_within_seconds
        : undefined,
      limitsDetail(plan, box, breach !== null && failure === breach.reason ? breach : null),
    ),
  };
}

/** What the exit reports of the task's limits: the one it broke, and what was enforced (sandbox/limits.ts). */
function limitsDetail(
  plan: ExecutionPlan,
  box: TaskBox,
  broke: LimitBreach | null,
): Pick<ExecutionExit, 'limits_detail'> {
  if (plan.limits === undefined) return {};
  if (box.limits !== undefined)
    return {
      limits_detail: [...(broke === null ? [] : [broke.detail]), describeEnforced(box.limits.enforced())],
    };
  // An unsandboxed worker enforces nothing, and says so once, in its hello (UNISOLATED).
  return {};
}

async function oomCountRose(probe: OomProbe): Promise<boolean> {
  const now = await readOomKillCount(probe.file);
  return now !== null && now > probe.baseline;
}
