import type { Provider } from '../contracts/sample.js';
import type { HostResources } from '../contracts/task-limits.js';
import type {
  ContainerEngine,
  IsolationMode,
  SlurmPool,
  TorchBackend,
  WorkerBackend,
  WorkerMount,
} from '../contracts/worker-protocol.js';
import type { Db } from './db.js';

/** A card's identity as last reported by its worker. */
export interface KnownCard {
  index: number;
  uuid: string;
  model: string;
  memory_total_mib: number | null;
  simulated: boolean;
  /** A MIG slice's profile and compute slices (ADR 0046): usage charges it as that share of a card. */
  mig?: { profile: string; compute_slices: number };
}

/** A worker row. Liveness is tracked in memory by the hub; `last_seen_at` survives restarts. */
export interface WorkerRecord {
  id: string;
  hostname: string;
  provider: Provider;
  version: string;
  boot_id: string;
  cards: KnownCard[];
  /** How the worker runs tasks, from its latest hello: `none` makes it UNISOLATED. */
  isolation: IsolationMode;
  /** The engine that runs `container` tasks there, or null. */
  container_engine: ContainerEngine | null;
  /** The named data mounts it declared (`--mount`), from its latest hello. */
  mounts: WorkerMount[];
  /** How it runs tasks (`slurm`: its cards are a pool, docs/decisions/0013-slurm-backend.md). */
  backend: WorkerBackend;
  /** A Slurm worker's partition and nodes, from its latest hello; null on a local worker. */
  slurm: SlurmPool | null;
  /** The syscall filter its process tasks run under, from its latest hello; null: none. */
  seccomp: WorkerSeccomp | null;
  /** Its host's RAM, CPUs and data-dir disk, from its latest hello; null: not known. */
  host: HostResources | null;
  /** What its qualification interpreter can do, as its current process reported; null until then. */
  qualification_probe: QualificationProbe | null;
  draining: boolean;
  first_seen_at: number;
  last_seen_at: number;
}

/** A worker's answer to the qualification preflight (the `probe` message, stamped on arrival). */
export interface QualificationProbe {
  python: string;
  /** Null when `import torch` failed. */
  torch_version: string | null;
  backend: TorchBackend | null;
  /** Why the import failed (its last line), or null. */
  error: string | null;
  probed_at: number;
}

/** A cordoned card. */
export interface CordonRecord {
  worker_id: string;
  card_index: number;
  reason: string;
  actor: string;
  created_at: number;
}

/** A worker's syscall filter as its hello names it. */
export interface WorkerSeccomp {
  version: string;
  allowed: string[];
}

interface WorkerRow
  extends Omit<
    WorkerRecord,
    'cards' | 'draining' | 'mounts' | 'qualification_probe' | 'slurm' | 'seccomp' | 'host'
  > {
  cards: string;
  slurm: string | null;
  seccomp: string | null;
  host: string | null;
  mounts: string;
  qualification_probe: string | null;
  draining: number;
}

const toWorker = (r: WorkerRow): WorkerRecord => ({
  ...r,
  cards: JSON.parse(r.cards) as KnownCard[],
  mounts: JSON.parse(r.mounts) as WorkerMount[],
  slurm: r.slurm === null ? null : (JSON.parse(r.slurm) as SlurmPool),
  seccomp: r.seccomp === null ? null : (JSON.parse(r.seccomp) as WorkerSeccomp),
  host: r.host === null ? null : (JSON.parse(r.host) as HostResources),
  qualification_probe:
    r.qualification_probe === null ? null : (JSON.parse(r.qualification_probe) as QualificationProbe),
  draining: r.draining === 1,
});

/** Workers, cordons and the per-boot high-water marks of processed worker messages. */
export class WorkersRepo {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      get: db.prepare<[string], WorkerRow>('SELECT * FROM workers WHERE id = ?'),
      all: db.prepare<[], WorkerRow>('SELECT * FROM workers ORDER BY id'),
      upsert: db.prepare(
        `INSERT INTO workers (id, hostname, provider, version, boot_id, cards, isolation, container_engine, mounts, backend, slurm, seccomp, host, draining, first_seen_at, last_seen_at)
         VALUES (@id, @hostname, @provider, @version, @boot_id, @cards, @isolation, @container_engine, @mounts, @backend, @slurm, @seccomp, @host, 0, @now, @now)
         ON CONFLICT (id) DO UPDATE SET hostname = excluded.hostname, provider = excluded.provider,
           version = excluded.version, boot_id = excluded.boot_id, cards = excluded.cards,
           isolation = excluded.isolation, container_engine = excluded.container_engine,
           mounts = excluded.mounts, backend = excluded.backend, slurm = excluded.slurm, seccomp = excluded.seccomp, host = excluded.host, qualification_probe = NULL, last_seen_at = excluded.last_seen_at`,
      ),
      setCards: db.prepare('UPDATE workers SET cards = ? WHERE id = ?'),
      setProbe: db.prepare('UPDATE workers SET qualification_probe = ? WHERE id = ?'),
      seen: db.prepare('UPDATE workers SET last_seen_at = ? WHERE id = ?'),
      setDraining: db.prepare('UPDATE workers SET draining = ? WHERE id = ?'),
      remove: db.prepare('DELETE FROM workers WHERE id = ?'),
      removeCordons: db.prepare('DELETE FROM cordons WHERE worker_id = ?'),
      cordons: db.prepare<[], CordonRecord>('SELECT * FROM cordons ORDER BY worker_id, card_index'),
      cordon: db.prepare(
        'INSERT INTO cordons (worker_id, card_index, reason, actor, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET reason = excluded.reason, actor = excluded.actor',
      ),
      uncordon: db.prepare('DELETE FROM cordons WHERE worker_id = ? AND card_index = ?'),
      mark: db.prepare<[string, string], { seq: number }>(
        'SELECT seq FROM worker_marks WHERE worker_id = ? AND boot_id = ?',
      ),
      setMark: db.prepare(
        'INSERT INTO worker_marks (worker_id, boot_id, seq, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET seq = max(seq, excluded.seq), updated_at = excluded.updated_at',
      ),
      marks: db.prepare<[string], { boot_id: string; seq: number }>(
        'SELECT boot_id, seq FROM worker_marks WHERE worker_id = ? ORDER BY updated_at DESC LIMIT 16',
      ),
    };
  }

  /** One worker. */
  get(id: string): WorkerRecord | undefined {
    const r = this.s.get.get(id);
    return r ? toWorker(r) : undefined;
  }

  /** Every worker ever seen. */
  list(): WorkerRecord[] {
    return this.s.all.all().map(toWorker);
  }

  /** Records a hello (which forgets the previous process's probe). */
  upsertOnHello(
    w: Omit<
      WorkerRecord,
      | 'draining'
      | 'first_seen_at'
      | 'last_seen_at'
      | 'mounts'
      | 'qualification_probe'
      | 'backend'
      | 'slurm'
      | 'seccomp'
      | 'host'
    > & {
      mounts?: WorkerMount[];
      backend?: WorkerBackend;
      slurm?: SlurmPool | null;
      seccomp?: WorkerSeccomp | null;
      host?: HostResources | null;
    },
    now: number,
  ): void {
    this.s.upsert.run({
      ...w,
      cards: JSON.stringify(w.cards),
      mounts: JSON.stringify(w.mounts ?? []),
      backend: w.backend ?? 'local',
      slurm: w.slurm === undefined || w.slurm === null ? null : JSON.stringify(w.slurm),
      seccomp: w.seccomp === undefined || w.seccomp === null ? null : JSON.stringify(w.seccomp),
      host: w.host === undefined || w.host === null ? null : JSON.stringify(w.host),
      now,
    });
  }

  /** Replaces the known card identities. */
  setCards(id: string, cards: KnownCard[]): void {
    this.s.setCards.run(JSON.stringify(cards), id);
  }

  /** Stores the worker's qualification probe. */
  setProbe(id: string, probe: QualificationProbe): void {
    this.s.setProbe.run(JSON.stringify(probe), id);
  }

  /** Stamps the last time a message arrived. */
  touch(id: string, now: number): void {
    this.s.seen.run(now, id);
  }

  /** Sets or clears draining; false when the worker is unknown. */
  setDraining(id: string, draining: boolean): boolean {
    return this.s.setDraining.run(draining ? 1 : 0, id).changes === 1;
  }

  /** Forgets a worker and its cordons (epoch marks stay: epochs are never reused). */
  remove(id: string): boolean {
    this.s.removeCordons.run(id);
    return this.s.remove.run(id).changes === 1;
  }

  /** Every cordon. */
  cordons(): CordonRecord[] {
    return this.s.cordons.all();
  }

  /** Cordons a card (idempotent). */
  cordon(c: CordonRecord): void {
    this.s.cordon.run(c.worker_id, c.card_index, c.reason, c.actor, c.created_at);
  }

  /** Removes a cordon; false if there was none. */
  uncordon(workerId: string, index: number): boolean {
    return this.s.uncordon.run(workerId, index).changes === 1;
  }

  /** Highest processed seq for a worker boot (0 if none). */
  mark(workerId: string, bootId: string): number {
    return this.s.mark.get(workerId, bootId)?.seq ?? 0;
  }

  /** Raises the processed mark. */
  raiseMark(workerId: string, bootId: string, seq: number, now: number): void {
    this.s.setMark.run(workerId, bootId, seq, now);
  }

  /** The most recent marks, sent in `welcome`. */
  marks(workerId: string): Array<{ boot_id: string; seq: number }> {
    return this.s.marks.all(workerId);
  }
}
