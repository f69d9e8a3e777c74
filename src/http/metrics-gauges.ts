import { Counter, Gauge, type Registry } from 'prom-client';
import type { BrokerDeps } from '../broker/deps.js';
import { CardStateSchema } from '../contracts/tools-cluster.js';
import { TaskStateSchema } from '../contracts/views.js';

/**
 * The series of `GET /metrics` (metrics.ts) read at scrape time from the store and the fleet: cards by
 * state, queue depth, tasks by state, workers, sampler errors, the audit chain, scheduling passes, the
 * usage ledger and reclaims. Read when scraped, they can never drift from what the tools report.
 */

/** What the gauges read besides deps. */
export interface GaugeSources {
  /** Workers with an open WSS session. */
  connectedWorkers: () => number;
  /** Durations (ms) of recent scheduling passes. */
  passDurations?: () => readonly number[];
}

/** A gauge read at scrape time: its name, help and labels, and how it reads its value(s). */
interface ScrapedGauge {
  name: string;
  help: string;
  labelNames?: readonly string[];
  read(gauge: Gauge): void;
}

/** Cards by derived state, and how many are simulated. */
function cardGauges(deps: BrokerDeps): ScrapedGauge[] {
  const listCards = () =>
    deps.cluster.fleet.listCards(deps.store, deps.clock.now(), {
      sample_interval_ms: deps.config.timing.sample_interval_ms,
      vram_threshold_pct: deps.config.scheduling.vram_threshold_pct,
    });
  return [
    {
      name: 'gpu_broker_cards',
      help: 'Cards by derived state (AVAILABLE, LEASED, BUSY_FOREIGN, UNHEALTHY, CORDONED, QUARANTINED, UNKNOWN).',
      labelNames: ['state'],
      read(gauge) {
        const counts = new Map<string, number>(CardStateSchema.options.map((s) => [s, 0]));
        for (const c of listCards()) counts.set(c.state, (counts.get(c.state) ?? 0) + 1);
        for (const [state, n] of counts) gauge.set({ state }, n);
      },
    },
    {
      name: 'gpu_broker_cards_simulated',
      help: 'Cards that are simulated (no real GPU behind them).',
      read(gauge) {
        gauge.set(listCards().filter((c) => c.simulated).length);
      },
    },
    // MIG slices under their card (docs/decisions/0046-mig-slices-as-cards.md): one series per slice,
    // labelled as people name it (`0:mig:2/0`), with its parent card, profile, state and whether a lease
    // holds it; its memory (total and in use) and utilisation where the tool reports them (nvidia-smi has
    // no utilisation per instance, so that series is absent on real and simulated slices alike).
    {
      name: 'gpu_broker_mig_slices',
      help: 'MIG slices, one series per slice: 1, labelled with its worker, parent card, slice label, profile, derived state and whether a lease holds it.',
      labelNames: ['worker', 'card', 'slice', 'profile', 'state', 'leased'],
      read(gauge) {
        // A slice that went (a new layout) or changed state leaves no stale series behind.
        gauge.reset();
        for (const c of listCards()) {
          if (!c.mig) continue;
          gauge.set(
            {
              worker: c.worker_id,
              card: String(c.mig.parent_index),
              slice: c.label ?? String(c.index),
              profile: c.mig.profile,
              state: c.state,
              leased: String(c.task_id !== null),
            },
            1,
          );
        }
      },
    },
    {
      name: 'gpu_broker_mig_slice_memory_total_mib',
      help: "A MIG slice's memory in MiB (the tool's per-instance figure, or its profile's).",
      labelNames: ['worker', 'slice', 'profile'],
      read(gauge) {
        gauge.reset();
        for (const c of listCards())
          if (c.mig && c.memory_total_mib !== null)
            gauge.set(
              { worker: c.worker_id, slice: c.label ?? String(c.index), profile: c.mig.profile },
              c.memory_total_mib,
            );
      },
    },
    {
      name: 'gpu_broker_mig_slice_memory_used_mib',
      help: "A MIG slice's memory in use in MiB: its GPU instance's, from nvidia-smi's MIG devices table (absent where unmeasured).",
      labelNames: ['worker', 'slice', 'profile'],
      read(gauge) {
        gauge.reset();
        for (const c of listCards())
          if (c.mig && c.memory_used_mib !== null)
            gauge.set(
              { worker: c.worker_id, slice: c.label ?? String(c.index), profile: c.mig.profile },
              c.memory_used_mib,
            );
      },
    },
    {
      name: 'gpu_broker_mig_slice_utilization_pct',
      help: "A MIG slice's utilisation in percent, where the tool reports it per instance.",
      labelNames: ['worker', 'slice', 'profile'],
      read(gauge) {
        gauge.reset();
        for (const c of listCards())
          if (c.mig && c.utilization_pct !== null)
            gauge.set(
              { worker: c.worker_id, slice: c.label ?? String(c.index), profile: c.mig.profile },
              c.utilization_pct,
            );
      },
    },
  ];
}

/** Tasks by state, and the queue's depth. */
function taskGauges(deps: BrokerDeps): ScrapedGauge[] {
  return [
    {
      name: 'gpu_broker_tasks',
      help: 'Tasks by state.',
      labelNames: ['state'],
      read(gauge) {
        const counts = deps.store.tasks.countByState();
        for (const state of TaskStateSchema.options) gauge.set({ state }, counts[state] ?? 0);
      },
    },
    {
      name: 'gpu_broker_queue_depth',
      help: 'Tasks waiting in the queue (state QUEUED).',
      read(gauge) {
        gauge.set(deps.store.tasks.countByState()['QUEUED'] ?? 0);
      },
    },
  ];
}

/** Workers: open sessions, online or not, failing samplers. */
function workerGauges(deps: BrokerDeps, opts: GaugeSources): ScrapedGauge[] {
  return [
    {
      name: 'gpu_broker_worker_connections',
      help: 'Workers with an open WSS session.',
      read(gauge) {
        gauge.set(opts.connectedWorkers());
      },
    },
    {
      name: 'gpu_broker_workers',
      help: 'Enrolled workers by whether they are online (connected and heard from recently).',
      labelNames: ['online'],
      read(gauge) {
        const now = deps.clock.now();
        const workers = deps.store.workers.list();
        const online = workers.filter((w) => deps.cluster.fleet.isOnline(w.id, now)).length;
        gauge.set({ online: 'true' }, online);
        gauge.set({ online: 'false' }, workers.length - online);
      },
    },
    {
      name: 'gpu_broker_sampler_errors',
      help: 'Workers whose latest card sample failed (their cards are UNKNOWN and not scheduled).',
      read(gauge) {
        gauge.set(deps.store.workers.list().filter((w) => deps.cluster.fleet.get(w.id).sampler_error).length);
      },
    },
  ];
}

/** The master's own health: the audit chain's check and the storage guard's. */
function healthGauges(deps: BrokerDeps): ScrapedGauge[] {
  return [
    {
      name: 'gpu_broker_audit_chain_ok',
      help: "1 while the hash-chained audit log verifies, 0 once it does not (the background check's last result).",
      read(gauge) {
        gauge.set(deps.auditStatus().ok ? 1 : 0);
      },
    },
    {
      name: 'gpu_broker_storage_free_bytes',
      help: "Free bytes on the data dir's filesystem at the storage guard's last check (-1: unknown).",
      read(gauge) {
        gauge.set(deps.storage?.status().free_bytes ?? -1);
      },
    },
    {
      name: 'gpu_broker_storage_accepts_writes',
      help: '1 while the master takes writes that grow its store, 0 while it refuses them (disk full: UNAVAILABLE).',
      read(gauge) {
        gauge.set(deps.storage?.status().ok === false ? 0 : 1);
      },
    },
    {
      name: 'gpu_broker_audit_events',
      help: 'Rows of the live audit table verified so far (archived rows not counted).',
      read(gauge) {
        gauge.set(deps.auditStatus().events);
      },
    },
  ];
}

/** p50, p99 and max of the recent scheduling passes, when the master reports them. */
function passGauges(opts: GaugeSources): ScrapedGauge[] {
  const passes = opts.passDurations;
  if (!passes) return [];
  return [
    {
      name: 'gpu_broker_scheduling_pass_seconds',
      help: 'Duration of recent scheduling passes (up to the last 1000): p50, p99 and max.',
      labelNames: ['stat'],
      read(gauge) {
        const sorted = [...passes()].sort((a, b) => a - b);
        const at = (q: number) =>
          (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0) / 1000;
        gauge.set({ stat: 'p50' }, at(0.5));
        gauge.set({ stat: 'p99' }, at(0.99));
        gauge.set({ stat: 'max' }, (sorted[sorted.length - 1] ?? 0) / 1000);
      },
    },
  ];
}

/** Registers the gauges read at scrape time, in the order `/metrics` lists them. */
export function registerScrapedGauges(deps: BrokerDeps, opts: GaugeSources, registers: Registry[]): void {
  const gauges = [
    ...cardGauges(deps),
    ...taskGauges(deps),
    ...workerGauges(deps, opts),
    ...healthGauges(deps),
    ...passGauges(opts),
  ];
  // The usage ledger, a counter read at scrape time: it only grows (a lease is charged once, when it ends).
  new Counter({
    name: 'gpu_broker_card_seconds_total',
    help: 'Card-seconds charged to leases that ended, by account, card model and whether the cards were simulated (docs/operations.md "Accounts and usage").',
    labelNames: ['account', 'model', 'simulated'],
    registers,
    collect() {
      this.reset();
      for (const t of deps.store.usage.totals())
        this.inc({ account: t.account, model: t.model, simulated: String(t.simulated) }, t.card_seconds);
    },
  });
  // Reclaim by preemption (docs/operations.md "Borrowing and reclaim"): every lease the scheduler asked
  // to give its cards back, read from the preemptions table (it only grows).
  new Counter({
    name: 'gpu_broker_preemptions_total',
    help: 'Leases the scheduler asked to give their cards back to an account asking within its nominal share.',
    registers,
    collect() {
      this.reset();
      this.inc(deps.store.preemptions.total());
    },
  });
  for (const { name, help, labelNames = [], read } of gauges) {
    new Gauge({
      name,
      help,
      labelNames,
      registers,
      collect() {
        read(this);
      },
    });
  }
}
