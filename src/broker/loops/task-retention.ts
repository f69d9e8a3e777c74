import type { Clock } from '../../platform/clock.js';
import type { Logger } from '../../platform/logger.js';
import type { Store } from '../../store/store.js';

/**
 * Retention of what FINAL tasks produced (master config `storage.retention`): the
 * logs of tasks that ended more than `task_logs_days` ago are deleted, and the bytes of their output
 * files after `outputs_days` (the listing — path, size, sha256 — stays). The task row and its audit
 * events stay; the task records when (`logs_pruned_at`, `outputs_pruned_at`) so `get_task_logs` and
 * `get_task_outputs` say the data was pruned instead of answering an empty success. 0 days keeps for
 * ever.
 *
 * Like the audit monitor (src/broker/loops/audit-monitor.ts), the sweep works in batches of `batch_size`
 * tasks, one transaction each, and yields to the event loop between them, so a request waits at most
 * one batch. Runs never overlap. SQLite reuses the freed pages; the file itself does not shrink.
 */

/** Retention settings (`storage.retention`). */
export interface TaskRetentionOptions {
  task_logs_days: number;
  outputs_days: number;
  batch_size: number;
  /** Yields to the event loop between batches; tests may count. */
  yieldToLoop?: () => Promise<void>;
}

/** What one sweep deleted. */
export interface RetentionResult {
  logs_tasks: number;
  outputs_tasks: number;
}

const DAY_MS = 86_400_000;

/** The retention sweep; `run()` is called on a timer by the master. */
export class TaskRetention {
  private running: Promise<RetentionResult> | null = null;
  private stopped = false;
  private readonly yieldToLoop: () => Promise<void>;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly opts: TaskRetentionOptions,
    private readonly logger?: Logger,
  ) {
    this.yieldToLoop = opts.yieldToLoop ?? (() => new Promise((resolve) => setImmediate(resolve)));
  }

  /** One sweep over both kinds; a call while one runs resolves with that one. */
  run(): Promise<RetentionResult> {
    if (this.running) return this.running;
    const sweep = async (): Promise<RetentionResult> => ({
      logs_tasks: await this.sweep('logs', this.opts.task_logs_days),
      outputs_tasks: await this.sweep('outputs', this.opts.outputs_days),
    });
    this.running = sweep().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** Ends a sweep in progress at its next batch boundary; later runs do nothing. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.running?.catch(() => undefined);
  }

  private async sweep(kind: 'logs' | 'outputs', days: number): Promise<number> {
    if (days <= 0) return 0;
    const now = this.clock.now();
    const endedBefore = now - days * DAY_MS;
    let tasks = 0;
    let rows = 0;
    while (!this.stopped) {
      const batch = this.store.transaction(() => {
        const ids = this.store.logs.dueForRetention(kind, endedBefore, this.opts.batch_size);
        for (const id of ids) rows += this.store.logs.pruneTask(kind, id, now);
        return ids.length;
      });
      tasks += batch;
      if (batch < this.opts.batch_size) break;
      await this.yieldToLoop();
    }
    if (tasks > 0) this.logger?.info({ kind, tasks, rows, days }, 'task retention pruned');
    return tasks;
  }
}
