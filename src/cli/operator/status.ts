import { parseCommand } from '../common/args.js';
import type { CommandRunner } from '../common/io.js';
import { withMaster } from '../common/master-client.js';
import { emit, escapeField, reportError, table } from '../common/output.js';
import { STATUS } from './command-specs.js';

interface Worker {
  worker_id: string;
  provider: string;
  simulated: boolean;
  online: boolean;
  draining: boolean;
  cards: number;
  sampler_error: string | null;
  hostname: string;
  isolation: string;
  container_engine: string | null;
  unisolated: boolean;
  /** Absent from older masters. */
  backend?: string;
  slurm?: { partition: string; nodes: Array<{ name: string }> } | null;
}
interface SlurmJob {
  job_id: string;
  state: string;
  pending_reason: string | null;
  binding: { nodes: Array<{ node: string; gpus: number[] }> } | null;
}
export interface Card {
  worker_id: string;
  index: number;
  model: string;
  state: string;
  simulated: boolean;
  memory_used_mib: number | null;
  memory_total_mib: number | null;
  utilization_pct: number | null;
  task_id: string | null;
  lease_epoch: number | null;
  slurm?: SlurmJob | null;
  /** Absent from older masters: `0:mig:2/0` for a MIG slice. */
  label?: string;
  mig_mode?: string | null;
  mig?: { parent_index: number; profile: string } | null;
}
interface QueueItem {
  position: number | null;
  task_id: string | null;
  title: string | null;
  cards: number;
  reason: { code?: string; message?: string } | null;
}
interface Status {
  tasks_by_state: Record<string, number>;
  leases: Array<{
    lease_id: string;
    task_id: string | null;
    worker_id: string;
    cards: number[];
    lease_epoch: number;
    state: string;
    reason: string | null;
  }>;
  alerts: Array<{ severity: string; kind: string; message: string; action: string }>;
  /** Absent from older masters. */
  you?: {
    principal: string;
    account: string;
    share: number;
    share_cards: number;
    held_cards: number;
    card_hours_7d: number;
    /** Absent from older masters. */
    words?: string;
  };
  /** Operators only; absent from older masters. */
  accounts?: AccountRow[];
}
interface AccountRow {
  account: string;
  parent: string | null;
  share: number;
  share_cards: number;
  held_cards: number;
  nominal_cards: number | null;
  limit_cards: number | null;
  period: string;
  usage_card_hours: number;
  budget_card_hours: number | null;
  budget_left_card_hours: number | null;
  queued: number;
  first_wait: { task_id: string | null; position: number | null; code: string; message: string } | null;
  /** Its quotas per card model (ADR 0048); absent from older masters. */
  model_quotas?: Array<{
    model: string;
    held_cards: number;
    nominal_cards: number | null;
    limit_cards: number | null;
    period: string;
    usage_card_hours: number;
    budget_card_hours: number | null;
    budget_left_card_hours: number | null;
  }>;
}

/** Nominal / limit of a quota as the ACCOUNTS section prints it ("4/6", "4/any", "-/-"). */
const limitsText = (a: { nominal_cards: number | null; limit_cards: number | null }) =>
  `${a.nominal_cards ?? '-'}/${a.limit_cards ?? (a.nominal_cards === null ? '-' : 'any')}`;

/** Budget left of a quota ("96.80 of 100 h", or "-"). */
const budgetText = (a: { budget_left_card_hours: number | null; budget_card_hours: number | null }) =>
  a.budget_left_card_hours === null
    ? '-'
    : `${a.budget_left_card_hours.toFixed(2)} of ${a.budget_card_hours} h`;

/**
 * The ACCOUNTS section (operators): one row per account, its share, cards held against share and quota,
 * card-hours this period, budget left, queued tasks and why the first of them waits; under it, one row
 * per quota of a card model ("  H100"): the cards of the model held against that quota, and its budget.
 */
function accountsSection(accounts: AccountRow[]): string[] {
  return [
    'ACCOUNTS',
    table(
      ['ACCOUNT', 'SHARE', 'CARDS', 'NOMINAL/LIMIT', 'USED (PERIOD)', 'BUDGET LEFT', 'QUEUED', 'FIRST WAITS'],
      accounts.flatMap((a) => [
        [
          a.parent === null ? a.account : `${a.account} (in ${a.parent})`,
          `${(a.share * 100).toFixed(1)} % (${a.share_cards})`,
          a.held_cards,
          limitsText(a),
          `${a.usage_card_hours.toFixed(2)} h (${a.period})`,
          budgetText(a),
          a.queued,
          a.first_wait === null ? '' : `${a.first_wait.task_id ?? '(task)'}: ${a.first_wait.code}`,
        ],
        ...(a.model_quotas ?? []).map((q) => [
          `  ${q.model}`,
          '',
          q.held_cards,
          limitsText(q),
          `${q.usage_card_hours.toFixed(2)} h (${q.period})`,
          budgetText(q),
          '',
          '',
        ]),
      ]),
    ),
  ];
}

/** The WORKERS section: one row per worker. */
function workersSection(workers: Worker[]): string[] {
  return [
    'WORKERS',
    table(
      [
        'WORKER',
        'HOST',
        'BACKEND',
        'PROVIDER',
        'ONLINE',
        'DRAINING',
        'CARDS',
        'ISOLATION',
        'ENGINE',
        'SAMPLER',
      ],
      workers.map((w) => [
        w.worker_id,
        w.hostname,
        w.backend === 'slurm' && w.slurm
          ? `slurm:${w.slurm.partition} (${w.slurm.nodes.length} node${w.slurm.nodes.length === 1 ? '' : 's'})`
          : (w.backend ?? 'local'),
        w.simulated ? 'sim (SIMULATED)' : w.provider,
        w.online ? 'yes' : 'NO',
        w.draining ? 'yes' : '',
        w.cards,
        w.unisolated ? 'UNISOLATED' : w.isolation,
        w.container_engine ?? '',
        w.sampler_error ?? 'ok',
      ]),
    ),
  ];
}

/**
 * The cards in listing order, each MIG slice right under its parent card (docs/decisions/0046-mig-slices-as-cards.md).
 */
function parentsThenSlices(cards: Card[]): Card[] {
  const slicesOf = new Map<string, Card[]>();
  for (const k of cards) {
    if (!k.mig) continue;
    const key = `${k.worker_id}/${k.mig.parent_index}`;
    slicesOf.set(key, [...(slicesOf.get(key) ?? []), k]);
  }
  const out: Card[] = [];
  for (const k of cards) {
    if (k.mig) continue;
    const key = `${k.worker_id}/${k.index}`;
    out.push(k, ...(slicesOf.get(key) ?? []));
    slicesOf.delete(key);
  }
  // Slices whose parent is not listed (an older master, a partial sample) still show, at the end.
  for (const orphans of slicesOf.values()) out.push(...orphans);
  return out;
}

/** The MODEL column: a slice shows its profile, a card in MIG mode says so; simulated ones say (sim). */
function modelText(k: Card): string {
  const sim = k.simulated ? ' (sim)' : '';
  if (k.mig) return `MIG ${k.mig.profile}${sim}`;
  return `${k.model}${sim}${k.mig_mode === 'enabled' ? ' [MIG mode]' : ''}`;
}

/**
 * The UTIL column: `n/a` where no tool gives it (nvidia-smi has no utilisation per MIG instance, and
 * `[N/A]` for a card in MIG mode; docs/operations.md "MIG slices"), `?` where a card's is unknown.
 */
function utilText(k: Card): string {
  if (k.utilization_pct !== null) return `${k.utilization_pct}%`;
  return k.mig || k.mig_mode === 'enabled' ? 'n/a' : '?';
}

/** The CARDS section: one row per card, with its lease and Slurm job; MIG slices under their card. */
export function cardsSection(cards: Card[]): string[] {
  return [
    'CARDS',
    table(
      ['WORKER', 'IDX', 'MODEL', 'STATE', 'VRAM', 'UTIL', 'TASK', 'EPOCH', 'SLURM JOB'],
      parentsThenSlices(cards).map((k) => [
        k.worker_id,
        k.mig ? `└ ${k.label ?? k.index}` : (k.label ?? k.index),
        modelText(k),
        k.state,
        k.memory_total_mib ? `${k.memory_used_mib ?? '?'}/${k.memory_total_mib} MiB` : '?',
        utilText(k),
        k.task_id,
        k.lease_epoch,
        slurmJobText(k.slurm),
      ]),
    ),
  ];
}

/** The QUEUE section: the waiting tasks in order, with why each waits. */
function queueSection(queue: QueueItem[]): string[] {
  return [
    `QUEUE (${queue.length})`,
    queue.length
      ? table(
          ['POS', 'TASK', 'CARDS', 'REASON'],
          queue.map((q) => [
            q.position,
            q.task_id ?? '(other owner)',
            q.cards,
            q.reason?.message ?? q.reason?.code,
          ]),
        )
      : '  empty',
  ];
}

/** The LEASES section: the live leases. */
function leasesSection(leases: Status['leases']): string[] {
  return [
    `LEASES (${leases.length} live)`,
    leases.length
      ? table(
          ['LEASE', 'TASK', 'WORKER', 'CARDS', 'EPOCH', 'STATE'],
          leases.map((l) => [l.lease_id, l.task_id, l.worker_id, l.cards.join(','), l.lease_epoch, l.state]),
        )
      : '  none',
  ];
}

/** The TASKS line: counts by state. */
function tasksSection(byState: Status['tasks_by_state']): string[] {
  return [
    `TASKS  ${
      Object.entries(byState)
        .map(([k, v]) => `${k}=${v}`)
        .join('  ') || 'none'
    }`,
  ];
}

/** The ALERTS section: each alert with what to do about it (their text escaped for the terminal). */
function alertsSection(alerts: Status['alerts']): string[] {
  return [
    `ALERTS (${alerts.length})`,
    ...(alerts.length
      ? alerts.map(
          (a) => `  [${a.severity}] ${a.kind}: ${escapeField(a.message)}\n      → ${escapeField(a.action)}`,
        )
      : ['  none']),
  ];
}

/** The YOU line: the caller's account and where it stands (absent from older masters). */
function youSection(you: Status['you']): string[] {
  if (!you) return [];
  return [
    `YOU  ${escapeField(you.principal)} in account ${escapeField(you.account)}: share ${(you.share * 100).toFixed(1)} % ` +
      `(${you.share_cards} cards), holds ${you.held_cards}, ${you.card_hours_7d.toFixed(3)} card-hours in 7 days`,
    ...(you.words ? [`     ${escapeField(you.words)}`] : []),
  ];
}

/** The status screen: its sections, a blank line between each. */
function statusText(workers: Worker[], cards: Card[], queue: QueueItem[], status: Status): string {
  const sections = [
    ...(status.you ? [youSection(status.you)] : []),
    ...(status.accounts?.length ? [accountsSection(status.accounts)] : []),
    workersSection(workers),
    cardsSection(cards),
    queueSection(queue),
    leasesSection(status.leases),
    tasksSection(status.tasks_by_state),
    alertsSection(status.alerts),
  ];
  return sections.flatMap((lines, i) => (i === 0 ? lines : ['', ...lines])).join('\n');
}

/** `gpu-broker status`: workers, cards, queue, leases and alerts in one screen. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(STATUS, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  try {
    return await withMaster(values, io, async (c) => {
      const [workers, cards, queue, status] = await Promise.all([
        c.get<{ workers: Worker[] }>('/api/v1/workers'),
        c.get<{ cards: Card[] }>('/api/v1/cards'),
        c.get<{ tasks: QueueItem[] }>('/api/v1/queue'),
        c.get<Status>('/api/v1/status'),
      ]);
      const all = { workers: workers.workers, cards: cards.cards, queue: queue.tasks, ...status };
      emit(io, values.json, all, () => statusText(workers.workers, cards.cards, queue.tasks, status));
      return 0;
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};

/** A Slurm job in one cell: `123 localhost[0,1]` once bound, `123 PENDING (Resources)` while it waits. */
function slurmJobText(job: SlurmJob | null | undefined): string {
  if (!job) return '';
  if (job.binding)
    return `${job.job_id} ${job.binding.nodes.map((n) => `${n.node}[${n.gpus.join(',')}]`).join(' ')}`;
  return `${job.job_id} ${job.state}${job.pending_reason ? ` (${job.pending_reason})` : ''}`;
}
