import { type Policy, pinnedScripts } from '../../contracts/policy.js';
import type { ResolvedLimits } from '../../contracts/task-limits.js';
import type { Runtime } from '../../contracts/task-spec.js';
import type { ExecutionPlan, LeasedCard } from '../../contracts/worker-protocol.js';
import { nextLeaseEpoch } from '../../domain/machines/lease.js';
import { runArgv } from '../../domain/policy/run-argv.js';
import { type HostAllowance, hostAllowance, resolveLimits } from '../../domain/policy/task-limits.js';
import { BACKFILL_MARGIN_SECONDS } from '../../domain/scheduling/decide.js';
import type { Grant, Preemption } from '../../domain/scheduling/types.js';
import type { LeaseRecord } from '../../store/leases-repo.js';
import type { TaskRecord } from '../../store/tasks-repo.js';
import type { BrokerDeps } from '../deps.js';
import type { Fleet } from '../fleet.js';
import { cancelIfGrantLapsed } from '../grant-fence.js';
import { moveTask } from '../machines/task.js';
import type { WorkerLink } from '../ports.js';
import { enqueueForWorker } from '../workers/link.js';

/**
 * Step 3 of a scheduling pass (scheduler.ts), one decision at a time inside the pass's transaction: a
 * grant becomes a lease with a fresh epoch, its execution and the `assign` in the worker's outbox; a
 * preemption becomes its record and the `cancel` with `preempt`. Each re-checks what it acts on
 * (compare-and-set), so a decision made on a snapshot that moved since is skipped, never half applied.
 */
export class PassApplier {
  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
    private readonly link: WorkerLink,
    /** Asks for another pass (a grant skipped because its standing grant lapsed frees its place). */
    private readonly requestPass: () => void,
  ) {}

  /**
   * Step 3 for one preemption: re-checked in this transaction (the lease still ACTIVE at its epoch, its
   * task RUNNING and not being cancelled, the claimant still QUEUED), recorded (one row per lease: a second
   * request is a no-op), audited, and a `cancel` with `preempt` to the worker. The cards stay the lease's
   * until its cleanup receipt releases it, fenced by its epoch as ever; the claimant goes first then.
   */
  applyPreemption(p: Preemption): void {
    const { store, clock } = this.deps;
    const lease = store.leases.lease(p.lease_id);
    const task = store.tasks.stateFacts(p.task_id);
    const claimant = store.tasks.stateFacts(p.for_task_id);
    if (lease?.state !== 'ACTIVE' || lease.lease_epoch !== p.lease_epoch) return;
    if (task?.state !== 'RUNNING' || task.desired !== 'run' || claimant?.state !== 'QUEUED') return;
    const e = store.leases.executionForLease(lease.id);
    if (e === undefined) return;
    const now = clock.now();
    const recorded = store.preemptions.request({
      lease_id: lease.id,
      task_id: p.task_id,
      for_task_id: p.for_task_id,
      worker_id: lease.worker_id,
      lease_epoch: lease.lease_epoch,
      grace_seconds: Math.round(p.grace_seconds),
      requested_at: now,
    });
    if (!recorded) return;
    store.audit.append({
      at: now,
      actor: 'scheduler',
      action: 'task.preempt_requested',
      subject_type: 'task',
      subject_id: p.task_id,
      data: {
        for_task_id: p.for_task_id,
        worker_id: lease.worker_id,
        lease_epoch: lease.lease_epoch,
        cards: [...p.card_indexes],
        grace_seconds: p.grace_seconds,
      },
    });
    enqueueForWorker(this.deps, this.link, lease.worker_id, {
      type: 'cancel',
      execution_id: e.id,
      lease_epoch: lease.lease_epoch,
      reason: `preempted for task ${p.for_task_id}: its account asks within its nominal share`,
      preempt: true,
    });
  }

  /**
   * Step 3 for one grant: lease with a fresh epoch, execution, task → ASSIGNED, assign in the outbox. A
   * backfilled grant's run gets its deadline (ADR 0049): its time limit plus the start-up allowance, from
   * when its worker begins it (plan `stop_within_seconds`), and the lease records when that is.
   */
  applyGrant(g: Grant): void {
    const { task_id: taskId, worker_id: workerId, card_indexes: indexes } = g;
    const { store, config } = this.deps;
    const task = store.tasks.get(taskId);
    if (task?.state !== 'QUEUED' || task.desired !== 'run') return;
    // A run a standing grant approved starts only while that grant is ACTIVE and unexpired: checked in
    // this transaction, so a revoke cannot land between the check and the lease (ADR 0029).
    if (cancelIfGrantLapsed(this.deps, task, 'scheduler')) {
      store.afterCommit(() => this.requestPass());
      return;
    }
    // The task's limits on this worker, resolved once: the plan carries them, and the lease records the
    // memory promised, which the next passes count against the host (docs/operations.md "Task limits").
    const allowance = this.hostAllowanceOf(workerId);
    const limits = resolveLimits(task.spec, config.policy, allowance);
    const stopWithin = g.backfilled === true ? task.spec.time_limit_seconds + BACKFILL_MARGIN_SECONDS : null;
    const grant = this.recordGrant(
      taskId,
      workerId,
      this.sampledCards(workerId, indexes),
      allowance === undefined ? null : { memory_mib: limits.memory_mib, disk_mib: limits.disk_mib },
      task.spec.limits?.cpus ?? null,
      stopWithin,
    );
    moveTask(
      this.deps,
      task,
      'lease_granted',
      'scheduler',
      {},
      { worker_id: workerId, lease_epoch: grant.lease.lease_epoch, execution_id: grant.executionId },
    );
    const preemptions = store.preemptions.countFor(taskId);
    enqueueForWorker(this.deps, this.link, workerId, {
      type: 'assign',
      plan: {
        ...assignPlan(task, grant, config, limits),
        ...(preemptions > 0 ? { preemptions } : {}),
        ...(stopWithin === null ? {} : { stop_within_seconds: stopWithin }),
      },
    });
  }

  /**
   * What the worker's host can give a task (docs/security.md "The task sandbox"), from its latest hello's `host` and its
   * known cards, less the policy's reserve; undefined when its host is not known.
   */
  private hostAllowanceOf(workerId: string): HostAllowance | undefined {
    const rec = this.deps.store.workers.get(workerId);
    if (rec?.host == null) return undefined;
    return hostAllowance(rec.host, rec.cards.length, this.deps.config.policy.task_limits.host_reserve);
  }

  /** The granted cards with the uuids the worker last sampled for them. */
  private sampledCards(workerId: string, indexes: readonly number[]): LeasedCard[] {
    const sampled = this.fleet.get(workerId).cards;
    return indexes.map((index) => {
      const uuid = sampled.find((c) => c.index === index)?.uuid;
      if (!uuid) throw new Error(`card ${workerId}/${index} has no sampled uuid`);
      return { index, uuid };
    });
  }

  /** Inserts the lease (fresh epoch) and its execution, and audits the grant. */
  private recordGrant(
    taskId: string,
    workerId: string,
    cards: LeasedCard[],
    given: { memory_mib: number; disk_mib: number } | null,
    cpus: number | null,
    stopWithin: number | null,
  ): RecordedGrant {
    const { store, clock, ids } = this.deps;
    const indexes = cards.map((c) => c.index);
    const now = clock.now();
    const lease: LeaseRecord = {
      id: ids('lease'),
      task_id: taskId,
      worker_id: workerId,
      lease_epoch: nextLeaseEpoch(store.leases.epochsOf(workerId, indexes)),
      state: 'ACTIVE',
      reason: null,
      created_at: now,
      updated_at: now,
      released_at: null,
      cards,
    };
    // the unique index refuses a card that is already live
    store.leases.insertLease(lease, given, cpus, stopWithin === null ? null : now + stopWithin * 1000);
    const executionId = ids('exec');
    const assignmentId = ids('asg');
    store.leases.insertExecution({
      id: executionId,
      task_id: taskId,
      lease_id: lease.id,
      assignment_id: assignmentId,
      worker_id: workerId,
      lease_epoch: lease.lease_epoch,
      phase: 'assigned',
      exit_code: null,
      signal: null,
      failure_reason: null,
      outputs: null,
      detail: null,
      created_at: now,
      updated_at: now,
      offline_since: null,
    });
    store.audit.append({
      at: now,
      actor: 'scheduler',
      action: 'lease.granted',
      subject_type: 'lease',
      subject_id: lease.id,
      data: {
        task_id: taskId,
        worker_id: workerId,
        lease_epoch: lease.lease_epoch,
        cards,
        execution_id: executionId,
        assignment_id: assignmentId,
        ...(stopWithin === null ? {} : { backfilled: true, stop_within_seconds: stopWithin }),
      },
    });
    return { lease, executionId, assignmentId };
  }
}

/** A recorded grant: the lease and the ids of its execution and assignment. */
interface RecordedGrant {
  readonly lease: LeaseRecord;
  readonly executionId: string;
  readonly assignmentId: string;
}

/** The `assign` plan of a granted task. */
function assignPlan(
  task: TaskRecord,
  grant: RecordedGrant,
  config: BrokerDeps['config'],
  limits: ResolvedLimits,
): ExecutionPlan {
  return {
    task_id: task.id,
    execution_id: grant.executionId,
    assignment_id: grant.assignmentId,
    lease_epoch: grant.lease.lease_epoch,
    cards: grant.lease.cards,
    spec: task.spec,
    spec_digest: task.spec_digest,
    kill_grace_seconds: config.timing.kill_grace_seconds,
    cleanup_timeout_seconds: config.timing.cleanup_timeout_seconds,
    vram_clean_pct: config.scheduling.vram_threshold_pct,
    // The limits as the policy resolves them, within what this worker's host can give (its share per card
    // for the defaults).
    ...sandboxOfPlan(task.spec.runtime, config.policy, limits),
    argv: runArgv(task.spec, config.policy),
    ...(task.spec.limits?.cpus === undefined ? {} : { cpus: task.spec.limits.cpus }),
  };
}

/**
 * What the plan carries for the worker's sandbox: the policy's hidden paths, the task's resolved limits
 * (src/domain/policy/task-limits.ts) and, by runtime, the host
 * file pins (a process) or the digest the image must have (a container listed in policy.images with a
 * digest; its argv runs inside the image, so no host file is pinned).
 */
export function sandboxOfPlan(
  runtime: Runtime,
  policy: Policy,
  limits: ResolvedLimits,
): Pick<ExecutionPlan, 'pins' | 'hidden_paths' | 'image_digest' | 'limits'> {
  const hidden_paths = policy.hidden_paths;
  if (runtime.kind === 'process') return { pins: pinnedFiles(runtime.argv, policy), hidden_paths, limits };
  const digest = policy.images.find((i) => i.ref === runtime.image)?.digest;
  return { pins: [], hidden_paths, limits, ...(digest !== undefined ? { image_digest: digest } : {}) };
}

/** The policy's sha256 pins that apply to this argv: the executable's, and an allowed script's. */
export function pinnedFiles(
  argv: readonly string[],
  policy: Policy,
): Array<{ path: string; sha256: string }> {
  const [exe, script] = argv;
  const pins: Array<{ path: string; sha256: string }> = [];
  const rule = policy.executables.find((e) => e.path === exe);
  if (rule?.sha256) pins.push({ path: rule.path, sha256: rule.sha256 });
  const scriptRule = pinnedScripts(policy.scripts).find((s) => s.interpreter === exe && s.script === script);
  if (scriptRule) pins.push({ path: scriptRule.script, sha256: scriptRule.sha256 });
  return pins;
}
