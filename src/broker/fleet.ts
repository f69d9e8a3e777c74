import { type CardMig, type CardSample, cardLabel, type MigMode } from '../contracts/sample.js';
import type { SlurmJobReport } from '../contracts/worker-protocol.js';
import { type CardState, deriveCardState } from '../domain/machines/card-state.js';
import type { CardView, SchedulingConfig, WorkerView } from '../domain/scheduling/types.js';
import type { LiveLeaseCard } from '../store/leases-repo.js';
import type { Store } from '../store/store.js';
import type { KnownCard, WorkerRecord } from '../store/workers-repo.js';

/**
 * What the master knows about its workers right now. Sessions and samples are observed state and live
 * in memory (a restart makes every sample stale anyway); durable facts — enrolment, draining, cordons,
 * leases — come from the store. Card state is derived from both each time, never stored.
 */

/** Live facts about one worker. */
export interface LiveWorker {
  worker_id: string;
  connected: boolean;
  boot_id: string | null;
  last_message_at: number | null;
  /** When the latest sample arrived, on the master's clock (worker clocks may be skewed). */
  sampled_at: number | null;
  sampler_error: string | null;
  cards: CardSample[];
  /** Cards the worker says its unfinished executions hold (hello, then every sample). */
  held_cards: number[];
  /** Since when the worker has been offline (null while online); grace periods count from here. */
  offline_since: number | null;
  /** When its current session said `hello` (null before the first since the master started). */
  connected_at: number | null;
  /**
   * Whether its latest hello said it starts an execution only once the master acknowledged the
   * acceptance (`starts_after_ack`): then an assign it never acknowledged may be withdrawn while it is
   * offline. False until this master heard a hello from it.
   */
  starts_after_ack: boolean;
}

/** A card as listed to people and agents. */
export interface CardListing {
  worker_id: string;
  index: number;
  uuid: string;
  model: string;
  state: CardState;
  reasons: string[];
  simulated: boolean;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
  utilization_pct: number | null;
  temperature_c: number | null;
  power_w: number | null;
  health: string;
  task_id: string | null;
  owner_id: string | null;
  lease_epoch: number | null;
  cordon_reason: string | null;
  /** A Slurm worker's held slot: the job and its binding (ADR 0013); null otherwise. */
  slurm: SlurmJobReport | null;
  /** `3`, or `0:mig:2/0` for a MIG slice (ADR 0046). */
  label: string;
  /** A whole card's MIG mode (null: not known); `enabled`: only its slices are leased. */
  mig_mode: MigMode | null;
  /** A MIG slice's parent, instances and profile; null on a whole card. */
  mig: CardMig | null;
}

/** In-memory registry of worker sessions and samples. */
export class Fleet {
  private readonly live = new Map<string, LiveWorker>();

  constructor(
    private readonly offlineAfterMs: number,
    startedAt: number,
  ) {
    this.startedAt = startedAt;
  }

  private readonly startedAt: number;

  private entry(workerId: string): LiveWorker {
    let w = this.live.get(workerId);
    if (!w) {
      // A worker known from the store but not yet seen by this process counts as offline since start.
      w = {
        worker_id: workerId,
        connected: false,
        boot_id: null,
        last_message_at: null,
        sampled_at: null,
        sampler_error: null,
        cards: [],
        held_cards: [],
        offline_since: this.startedAt,
        connected_at: null,
        starts_after_ack: false,
      };
      this.live.set(workerId, w);
    }
    return w;
  }

  /** A session opened with `hello`. */
  connected(
    workerId: string,
    bootId: string,
    cards: CardSample[],
    now: number,
    heldCards: number[] = [],
    startsAfterAck = false,
  ): void {
    const w = this.entry(workerId);
    Object.assign(w, {
      starts_after_ack: startsAfterAck,
      connected: true,
      boot_id: bootId,
      last_message_at: now,
      offline_since: null,
      connected_at: now,
      held_cards: heldCards,
    });
    if (cards.length > 0) Object.assign(w, { cards, sampled_at: now, sampler_error: null });
  }

  /** Any message arrived. */
  touched(workerId: string, now: number): void {
    const w = this.entry(workerId);
    w.last_message_at = now;
    if (w.connected) w.offline_since = null;
  }

  /** A sample arrived. Returns true when something scheduling depends on changed. */
  sampled(
    workerId: string,
    cards: CardSample[],
    samplerError: string | null,
    now: number,
    heldCards: number[] = [],
  ): boolean {
    const w = this.entry(workerId);
    const before = JSON.stringify([
      w.sampler_error,
      w.cards.map((c) => [c.uuid, c.memory_used_mib, c.health, c.processes.length]),
      w.held_cards,
    ]);
    w.sampled_at = now;
    w.sampler_error = samplerError;
    w.held_cards = heldCards;
    if (samplerError === null) w.cards = cards;
    const after = JSON.stringify([
      w.sampler_error,
      w.cards.map((c) => [c.uuid, c.memory_used_mib, c.health, c.processes.length]),
      w.held_cards,
    ]);
    return before !== after;
  }

  /**
   * An execution of this worker ended for good (cleaned or rejected): its cards are no longer held,
   * without waiting for the worker's next sample to say so (the latest one predates the report).
   */
  releaseHeld(workerId: string, indexes: readonly number[]): void {
    const w = this.entry(workerId);
    w.held_cards = w.held_cards.filter((i) => !indexes.includes(i));
  }

  /** The session closed. */
  disconnected(workerId: string, bootId: string | null, now: number): void {
    const w = this.entry(workerId);
    if (bootId !== null && w.boot_id !== bootId) return; // an older session closing after a newer one opened
    w.connected = false;
    w.offline_since ??= now;
  }

  /** Online: connected and heard from within the offline window. */
  isOnline(workerId: string, now: number): boolean {
    const w = this.live.get(workerId);
    return !!w && w.connected && w.last_message_at !== null && now - w.last_message_at <= this.offlineAfterMs;
  }

  /** Marks silent workers offline; returns the ids that just went offline. */
  sweep(now: number): string[] {
    const went: string[] = [];
    for (const w of this.live.values()) {
      if (w.offline_since === null && !this.isOnline(w.worker_id, now)) {
        w.offline_since = this.wentOffline(w, now);
        went.push(w.worker_id);
      }
    }
    return went;
  }

  /**
   * Since when a worker is offline, as of `now` (null while online): the same instant the next sweep will
   * record, so a worker shown offline shows since when from the first moment, not only after a sweep
   * (docs/operations.md "Partitions").
   */
  offlineSince(workerId: string, now: number): number | null {
    const w = this.entry(workerId);
    if (w.offline_since !== null) return w.offline_since;
    return this.isOnline(workerId, now) ? null : this.wentOffline(w, now);
  }

  /** When a silent worker went offline: its last message plus the offline window; else now. */
  private wentOffline(w: LiveWorker, now: number): number {
    return w.connected && w.last_message_at !== null ? w.last_message_at + this.offlineAfterMs : now;
  }

  /** Live facts about a worker (offline since master start if never seen). */
  get(workerId: string): LiveWorker {
    return this.entry(workerId);
  }

  /** Builds the scheduler's view of every enrolled worker. */
  workerViews(store: Store, now: number): WorkerView[] {
    const cordoned = new Set(store.workers.cordons().map((c) => `${c.worker_id}/${c.card_index}`));
    const leased = new Map<string, LiveLeaseCard>();
    for (const c of store.leases.liveCards()) leased.set(`${c.worker_id}/${c.card_index}`, c);
    const bound = boundGpus(store);
    const committed = store.leases.committedByWorker();
    return store.workers.list().map((rec) => {
      const w = this.entry(rec.id);
      const cards = cardsOf(rec, w);
      const pool = rec.backend === 'slurm';
      return {
        worker_id: rec.id,
        online: this.isOnline(rec.id, now),
        draining: rec.draining,
        isolation: rec.isolation,
        container_engine: rec.container_engine,
        mounts: rec.mounts.map((m) => m.name),
        host: rec.host,
        memory_committed_mib: committed.get(rec.id)?.memory_mib ?? 0,
        disk_committed_mib: committed.get(rec.id)?.disk_mib ?? 0,
        cpus_committed: committed.get(rec.id)?.cpus ?? 0,
        backend: rec.backend,
        ...(rec.slurm === null ? {} : { pool_node_gpus: rec.slurm.nodes.map((n) => n.gpus) }),
        ...(pool ? { pool_bound: bound.get(rec.id) ?? [] } : {}),
        sampled_at: w.sampled_at,
        sampler_error: w.sampler_error,
        cards: cards.map((c): CardView => {
          const key = `${rec.id}/${c.index}`;
          const lease = leased.get(key);
          const leaseState = lease?.state;
          return {
            index: c.index,
            model: c.model,
            memory_used_mib: c.memory_used_mib,
            memory_total_mib: c.memory_total_mib,
            memory_used_pct: c.memory_used_pct ?? null,
            health: c.health,
            health_reasons: c.health_reasons,
            processes: c.processes,
            simulated: c.simulated,
            ...(c.mig_mode != null ? { mig_mode: c.mig_mode } : {}),
            ...(c.mig !== undefined ? { mig: c.mig } : {}),
            // Cordoning a card in MIG mode cordons its slices too (ADR 0046); a slice may be cordoned alone.
            cordoned:
              cordoned.has(key) || (c.mig !== undefined && cordoned.has(`${rec.id}/${c.mig.parent_index}`)),
            leased: leaseState === 'ACTIVE' || leaseState === 'RELEASING',
            ...(lease?.limit_ends_at != null ? { lease_ends_by: lease.limit_ends_at } : {}),
            quarantined: leaseState === 'QUARANTINED',
            broker_pids: [],
            held_by_worker: w.held_cards.includes(c.index),
            ...(pool ? nodeOf(c.uuid) : {}),
          };
        }),
      };
    });
  }

  /** Every card with its derived state, for list_cards, status and the dashboard. */
  listCards(
    store: Store,
    now: number,
    config: Pick<SchedulingConfig, 'sample_interval_ms' | 'vram_threshold_pct'>,
  ): CardListing[] {
    const cordons = new Map(store.workers.cordons().map((c) => [`${c.worker_id}/${c.card_index}`, c.reason]));
    const leases = new Map(store.leases.liveCards().map((c) => [`${c.worker_id}/${c.card_index}`, c]));
    const out: CardListing[] = [];
    const views = this.workerViews(store, now);
    // A Slurm worker's leased slots show the job and the devices Slurm gave it (ADR 0013).
    const slurmByLease = new Map<string, SlurmJobReport | null>();
    const slurmOf = (leaseId: string): SlurmJobReport | null => {
      if (!slurmByLease.has(leaseId)) {
        const e = store.leases.executionForLease(leaseId);
        slurmByLease.set(leaseId, e ? store.leases.executionSlurm(e.id) : null);
      }
      return slurmByLease.get(leaseId) ?? null;
    };
    for (const rec of store.workers.list()) {
      const w = this.entry(rec.id);
      const view = views.find((v) => v.worker_id === rec.id)!;
      for (const c of cardsOf(rec, w)) {
        const cardView = view.cards.find((v) => v.index === c.index)!;
        const derived = deriveCardState({ card: cardView, worker: view }, now, config);
        const lease = leases.get(`${rec.id}/${c.index}`);
        out.push({
          worker_id: rec.id,
          index: c.index,
          uuid: c.uuid,
          model: c.model,
          state: derived.state,
          reasons: derived.reasons,
          simulated: c.simulated,
          memory_used_mib: c.memory_used_mib,
          memory_total_mib: c.memory_total_mib,
          utilization_pct: c.utilization_pct,
          temperature_c: c.temperature_c,
          power_w: c.power_w,
          health: c.health,
          task_id: lease?.task_id ?? null,
          owner_id: lease?.owner_id ?? null,
          lease_epoch: lease?.lease_epoch ?? null,
          cordon_reason: cordons.get(`${rec.id}/${c.index}`) ?? null,
          slurm: lease !== undefined && rec.backend === 'slurm' ? slurmOf(lease.lease_id) : null,
          label: cardLabel(c.index),
          mig_mode: c.mig_mode ?? null,
          mig: c.mig ?? null,
        });
      }
    }
    return out;
  }
}

/** A Slurm pool card's node, from its uuid `slurm:<node>:gpu<i>` (worker/slurm/sampler.ts). */
function nodeOf(uuid: string): { node?: string } {
  const m = /^slurm:(.+):gpu[0-9]+$/.exec(uuid);
  return m === null ? {} : { node: m[1] as string };
}

/**
 * Per Slurm worker, the GPUs per node that its live leases' started jobs hold (their bindings). A job
 * that has not started has no binding and holds no known node (domain/scheduling/nodes.ts).
 */
function boundGpus(store: Store): Map<string, Array<{ node: string; gpus: number }>> {
  const out = new Map<string, Array<{ node: string; gpus: number }>>();
  for (const { worker_id, slurm } of store.leases.liveSlurmJobs()) {
    // Validated when reported; checked again because one unreadable row must not stop every pass.
    const nodes = slurm.binding?.nodes;
    if (!Array.isArray(nodes)) continue;
    let list = out.get(worker_id);
    if (list === undefined) {
      list = [];
      out.set(worker_id, list);
    }
    for (const n of nodes)
      if (typeof n?.node === 'string' && Array.isArray(n.gpus))
        list.push({ node: n.node, gpus: n.gpus.length });
  }
  return out;
}

/** The latest sampled cards, or the identities remembered from the store when there is no sample. */
function cardsOf(rec: WorkerRecord, w: LiveWorker): CardSample[] {
  if (w.cards.length > 0) return w.cards;
  return rec.cards.map((k: KnownCard) => ({
    index: k.index,
    uuid: k.uuid,
    model: k.model,
    memory_used_mib: null,
    memory_total_mib: k.memory_total_mib,
    utilization_pct: null,
    temperature_c: null,
    power_w: null,
    health: 'unknown',
    health_reasons: [],
    processes: [],
    simulated: k.simulated,
  }));
}
