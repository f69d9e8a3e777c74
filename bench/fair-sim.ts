import { decide } from '../src/domain/scheduling/decide.js';
import type {
  CardView,
  FairShareView,
  QueuedTaskView,
  SchedulingConfig,
  WorkerView,
} from '../src/domain/scheduling/types.js';
import { benchCard } from './views.js';

/**
 * A pool of simulated cards driven through decide() on a simulated clock, as the master drives it:
 * accounts keep a backlog queued, leases end when their tasks do, and usage is charged when a lease ends
 * and decayed with a half-life. No wall clock and no randomness outside the seed: the same options give
 * the same result. The `fairness` bench section (bench/fairness.ts) and the fair-share unit tests
 * (test/unit/domain/scheduling/fair-share.test.ts) both run it.
 */

export interface FairSimOptions {
  /** Account name → fair-share weight. */
  accounts: Record<string, number>;
  /** Simulated hours. */
  hours: number;
  /** Card counts a new task draws from, uniformly. */
  sizes: readonly number[];
  /** Tasks each account keeps queued (default 6). */
  backlog?: Record<string, number>;
  /** false: no accounts on the views, one queue for everyone (first come, the order before accounts). */
  fair?: boolean;
  /** Workers of 8 cards (default 2). */
  workers?: number;
  /** A task runs 2..10 minutes by default: [min, max] in seconds. */
  durationSeconds?: readonly [number, number];
  /** Seconds an 8-card task may wait before it reserves (default 600). */
  reservationAfterSeconds?: number;
  /** Usage half-life (default 1 h). */
  halfLifeSeconds?: number;
  seed?: number;
  /** Usage counts the running leases' time so far too (default: only ended leases, as charged). */
  liveUsage?: boolean;
  /**
   * Each task's `time_limit_seconds` as a multiple of how long it really runs, rounded up to a whole
   * minute (default 2: agents ask for about twice what a run takes); null: no limits on the views, so
   * nothing is backfilled into reservations (ADR 0049).
   */
  limitFactor?: number | null;
}

export interface FairSimResult {
  /** Each account's share of the card-seconds used in the measured window. */
  shares: Record<string, number>;
  /** Card-seconds busy over card-seconds in the measured window. */
  utilisation: number;
  /** Free cards held by reservations, over card-seconds in the window. */
  reservedIdle: number;
  /** Free cards neither leased nor reserved, over card-seconds in the window. */
  otherIdle: number;
  /** When the measured window starts (ms): every account has held cards, and a quarter of the run is past. */
  /** Of reservedIdle: while a worker was held whole by one 8-card task (it would free all at once). */
  reservedBesideWide: number;
  measuredFromMs: number;
  /** Each 8-card task's wait from approval to start (ms), started in the window. */
  widestWaits: number[];
  /**
   * Each 8-card task's wait from when it became its account's oldest waiting 8-card task (its approval,
   * or its account's previous 8-card start if later) to its own start (ms): the scheduler's part of the
   * wait, without the time spent behind its own account's earlier 8-card tasks.
   */
  leadWaits: number[];
  /** Each task's wait (ms) by its card count, started in the window. */
  waits: Record<number, number[]>;
}

const STEP_MS = 5_000;

function card(index: number, leased: boolean, endsBy: number | undefined): CardView {
  return benchCard(index, {
    model: 'SIM-GPU',
    simulated: true,
    leased,
    ...(endsBy === undefined ? {} : { lease_ends_by: endsBy }),
  });
}

/** A small deterministic generator (the simulation must not depend on Math.random). */
function lcg(seed: number) {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return x / 2 ** 32;
  };
}

interface Running {
  task: QueuedTaskView;
  worker: number;
  cards: number[];
  started: number;
  ends: number;
}

/** Runs the pool; see FairSimOptions. */
export function simulateFairShare(opts: FairSimOptions): FairSimResult {
  const names = Object.keys(opts.accounts);
  const backlogOf = (a: string) => opts.backlog?.[a] ?? 6;
  const rnd = lcg(opts.seed ?? 42);
  const workerCount = opts.workers ?? 2;
  const totalCards = workerCount * 8;
  const [minS, maxS] = opts.durationSeconds ?? [120, 600];
  const halfLifeMs = (opts.halfLifeSeconds ?? 3600) * 1000;
  const limitFactor = opts.limitFactor === undefined ? 2 : opts.limitFactor;
  const durations = new Map<string, number>();
  const config: SchedulingConfig = {
    sample_interval_ms: 2000,
    vram_threshold_pct: 2,
    reservation_after_seconds: opts.reservationAfterSeconds ?? 600,
    max_concurrent_cards_per_owner: null,
    require_isolation: true,
  };
  const weightSum = Object.values(opts.accounts).reduce((n, w) => n + w, 0);
  const leased = Array.from({ length: workerCount }, () => new Set<number>());
  const queued: QueuedTaskView[] = [];
  const running: Running[] = [];
  // Decayed usage per account, kept as (value, as of) and decayed on read: what the master's ledger gives.
  const usage = new Map<string, { value: number; at: number }>(names.map((a) => [a, { value: 0, at: 0 }]));
  const used: Record<string, number> = Object.fromEntries(names.map((a) => [a, 0]));
  const everHeld = new Set<string>();
  const widestWaits: number[] = [];
  const leadWaits: number[] = [];
  const waits: Record<number, number[]> = {};
  let seq = 0;
  let busyCardMs = 0;
  let reservedCardMs = 0;
  let reservedBesideWideMs = 0;
  const lastWideStart = new Map<string, number>();
  let otherIdleMs = 0;
  const end = opts.hours * 3_600_000;
  let measureFrom = Number.POSITIVE_INFINITY;
  let reservedNow = 0;
  for (let now = 0; now < end; now += STEP_MS) {
    // The step just past: busy and idle cards, counted once the window has begun.
    if (now - STEP_MS >= measureFrom) {
      let busy = 0;
      for (const r of running) {
        busy += r.cards.length;
        used[r.task.account!] = (used[r.task.account!] ?? 0) + (r.cards.length * STEP_MS) / 1000;
      }
      busyCardMs += busy * STEP_MS;
      reservedCardMs += reservedNow * STEP_MS;
      if (reservedNow > 0 && running.some((r) => r.cards.length === 8))
        reservedBesideWideMs += reservedNow * STEP_MS;
      otherIdleMs += (totalCards - busy - reservedNow) * STEP_MS;
    }
    // Leases end: cards free, usage charged.
    for (let i = running.length - 1; i >= 0; i--) {
      const r = running[i]!;
      if (r.ends > now) continue;
      running.splice(i, 1);
      for (const c of r.cards) leased[r.worker]!.delete(c);
      const u = usage.get(r.task.account!)!;
      u.value = u.value * 2 ** (-(now - u.at) / halfLifeMs) + (r.cards.length * (r.ends - r.started)) / 1000;
      u.at = now;
    }
    // Every account keeps its backlog.
    for (const account of names) {
      let have = 0;
      for (const t of queued) if (t.account === account) have++;
      for (; have < backlogOf(account); have++) {
        seq++;
        const duration = (minS + Math.floor(rnd() * ((maxS - minS) / 5 + 1)) * 5) * 1000;
        const id = `t${String(seq).padStart(7, '0')}`;
        durations.set(id, duration);
        const limit = limitFactor === null ? undefined : Math.ceil((duration * limitFactor) / 60_000) * 60;
        queued.push({
          ...(limit === undefined ? {} : { time_limit_seconds: limit }),
          task_id: id,
          owner: `${account}-agent`,
          account,
          priority: 0,
          approved_at: now,
          cards: { count: opts.sizes[Math.floor(rnd() * opts.sizes.length)]! },
        });
      }
    }
    const liveOf = (a: string) =>
      running.reduce(
        (n, r) => (r.task.account === a ? n + (r.cards.length * (now - r.started)) / 1000 : n),
        0,
      );
    const held = new Map<string, number>();
    for (const r of running) held.set(r.task.account!, (held.get(r.task.account!) ?? 0) + r.cards.length);
    const fair: FairShareView = {
      total_cards: totalCards,
      accounts: Object.fromEntries(
        names.map((a) => {
          const u = usage.get(a)!;
          return [
            a,
            {
              share: opts.accounts[a]! / weightSum,
              usage: u.value * 2 ** (-(now - u.at) / halfLifeMs) + (opts.liveUsage ? liveOf(a) : 0),
              running_cards: held.get(a) ?? 0,
            },
          ];
        }),
      ),
    };
    // When each leased card's task is stopped by its time limit at the latest.
    const leaseOf = leased.map(() => new Map<number, number>());
    for (const r of running) {
      const limit = r.task.time_limit_seconds;
      if (limit === undefined) continue;
      for (const c of r.cards) leaseOf[r.worker]!.set(c, r.started + limit * 1000);
    }
    const workers: WorkerView[] = leased.map((_set, w) => ({
      worker_id: `w${w}`,
      online: true,
      draining: false,
      sampled_at: now,
      sampler_error: null,
      isolation: 'bwrap',
      container_engine: null,
      cards: Array.from({ length: 8 }, (_, i) => card(i, leased[w]!.has(i), leaseOf[w]!.get(i))),
    }));
    const tasks = opts.fair === false ? queued.map((t) => ({ ...t, account: undefined })) : queued;
    const d = decide(
      {
        workers,
        tasks,
        running_cards_by_owner: {},
        fair_share: opts.fair === false ? undefined : fair,
        config,
      },
      now,
    );
    const byId = new Map(queued.map((t, i) => [t.task_id, i]));
    const granted = new Set<number>();
    for (const g of d.grants) {
      const i = byId.get(g.task_id)!;
      granted.add(i);
      const t = queued[i]!;
      const worker = Number(g.worker_id.slice(1));
      for (const c of g.card_indexes) leased[worker]!.add(c);
      const duration = durations.get(t.task_id)!;
      durations.delete(t.task_id);
      running.push({ task: t, worker, cards: [...g.card_indexes], started: now, ends: now + duration });
      everHeld.add(t.account!);
      if (now >= measureFrom) {
        const bySize = waits[t.cards.count] ?? [];
        bySize.push(now - t.approved_at);
        waits[t.cards.count] = bySize;
        if (t.cards.count === 8) {
          widestWaits.push(now - t.approved_at);
          leadWaits.push(now - Math.max(t.approved_at, lastWideStart.get(t.account!) ?? 0));
        }
      }
      if (t.cards.count === 8) lastWideStart.set(t.account!, now);
    }
    if (granted.size > 0) {
      const left = queued.filter((_, i) => !granted.has(i));
      queued.length = 0;
      queued.push(...left);
    }
    reservedNow = d.reservations.reduce((n, r) => n + r.card_indexes.length, 0);
    if (measureFrom === Number.POSITIVE_INFINITY && everHeld.size === names.length)
      measureFrom = Math.max(now, end / 4) + STEP_MS;
    if (measureFrom !== Number.POSITIVE_INFINITY && now + STEP_MS === measureFrom)
      for (const a of names) used[a] = 0;
  }
  const total = Object.values(used).reduce((n, x) => n + x, 0);
  const window = totalCards * (end - measureFrom);
  return {
    shares: Object.fromEntries(Object.entries(used).map(([a, x]) => [a, total > 0 ? x / total : 0])),
    utilisation: busyCardMs / window,
    reservedIdle: reservedCardMs / window,
    otherIdle: otherIdleMs / window,
    reservedBesideWide: reservedBesideWideMs / window,
    measuredFromMs: measureFrom,
    widestWaits,
    leadWaits,
    waits,
  };
}
