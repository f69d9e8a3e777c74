import { statfs } from 'node:fs/promises';
import {
  growthFits,
  type StorageState,
  type StorageThresholds,
  storageAcceptsGrowth,
  storageState,
} from '../../domain/machines/storage-state.js';
import type { Clock } from '../../platform/clock.js';
import type { Logger } from '../../platform/logger.js';
import { storageUnavailable } from '../../store/storage-errors.js';
import type { Store } from '../../store/store.js';
import type { StorageGate, StorageReservation, StorageStatus } from '../ports.js';

/**
 * Keeps the master honest about its disk (ADR 0016). Every `check_interval_ms` it reads the free
 * space of the data dir's filesystem (`statfs`, injectable) and, after a write failed with SQLITE_FULL
 * or an I/O error (the store reports it through `onWriteFailure`), probes with one small write. The
 * pure `storageState` (src/domain/machines/storage-state.ts) turns those facts into a state; this class only
 * gathers facts, remembers the last state and says it:
 *
 * - `assertAcceptsGrowth` throws a retryable `UNAVAILABLE` while the state is `refusing` or
 *   `unwritable`: the tool dispatcher, the blob upload route and the worker hub (log and output
 *   chunks) call it before writing, so a filling disk refuses early instead of failing with INTERNAL;
 * - `reserve` (docs/performance.md "Noisy neighbours") holds the declared size of a write that lands later (an upload streams to a
 *   temporary file, then into the store) in an in-memory ledger: every admission checks free − reserved
 *   − its own size ≥ `min_free_bytes`, so concurrent uploads cannot together overshoot the floor that
 *   each alone respects (a sample only sees what already landed). A release with the bytes written
 *   takes them off the sampled free space until the next sample sees them itself;
 * - `status()` feeds `/healthz` (503 while growth is refused), the `disk_low` / `disk_full` alerts and
 *   the scheduler (no grants while growth is refused);
 * - `onRecovered` listeners run when the state leaves `refusing`/`unwritable` (the hub re-applies the
 *   hellos it could not store).
 */

/** Free and total bytes of a filesystem. */
export interface FsSpace {
  free_bytes: number;
  total_bytes: number;
}

/** Reads the space of the filesystem holding `path`; tests inject their own. */
export type StatfsFn = (path: string) => Promise<FsSpace>;

/** The real one: blocks available to an unprivileged user × block size. */
export const systemStatfs: StatfsFn = async (path) => {
  const s = await statfs(path);
  return { free_bytes: s.bavail * s.bsize, total_bytes: s.blocks * s.bsize };
};

/** Guard settings (master config `storage`, plus the data dir). */
export interface StorageGuardOptions extends StorageThresholds {
  dataDir: string;
  statfs?: StatfsFn | undefined;
}

/** The storage guard; see the file comment. */
export class StorageGuard implements StorageGate {
  private space: FsSpace | null = null;
  private statfsError: string | null = null;
  private writeFailure: string | null = null;
  private state: StorageState = 'ok';
  private readonly statfs: StatfsFn;
  private readonly recovered: Array<() => void> = [];
  private checking: Promise<void> | null = null;
  /** When growth was last refused (or found refused); null: never since start. */
  private refusedAt: number | null = null;
  /** Bytes held by reservations not yet released. */
  private reserved = 0;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly opts: StorageGuardOptions,
    private readonly logger?: Logger,
  ) {
    this.statfs = opts.statfs ?? systemStatfs;
    store.onWriteFailure = (detail) => this.writeFailed(detail);
  }

  /** The last state with its facts. */
  status(): StorageStatus {
    const status: StorageStatus = {
      ok: storageAcceptsGrowth(this.state),
      state: this.state,
      free_bytes: this.space?.free_bytes ?? null,
      total_bytes: this.space?.total_bytes ?? null,
      warn_free_bytes: this.opts.warn_free_bytes,
      min_free_bytes: this.opts.min_free_bytes,
    };
    const detail = this.detail();
    if (detail !== undefined) status.detail = detail;
    return status;
  }

  /** Whether writes that make the store grow are accepted now. */
  acceptsGrowth(): boolean {
    return storageAcceptsGrowth(this.state);
  }

  /**
   * The last time growth was refused: now while it is, else the moment it last was (null: never). A
   * worker report refused meanwhile is still on its way, so deadlines that wait for worker reports (the
   * cleanup receipt) count from here rather than from a time the master could not hear the worker.
   */
  lastRefusalAt(): number | null {
    return this.acceptsGrowth() ? this.refusedAt : this.clock.now();
  }

  /** Bytes reserved by writes in flight. */
  reservedBytes(): number {
    return this.reserved;
  }

  /** Throws a retryable UNAVAILABLE naming `what` unless growth is accepted and `bytes` more fit. */
  assertAcceptsGrowth(what: string, bytes = 0): void {
    if (!this.acceptsGrowth()) {
      this.refusedAt = this.clock.now();
      throw storageUnavailable(`${what} refused: ${this.detail() ?? this.state}`);
    }
    const free = this.space?.free_bytes ?? null;
    if (growthFits({ free_bytes: free, reserved_bytes: this.reserved, bytes }, this.opts)) return;
    // Not a refusal of all growth (health stays as it is): this write alone does not fit now.
    throw storageUnavailable(
      `${what} refused: it needs ${mib(bytes)}; ${mib(free ?? 0)} free, ${mib(this.reserved)} reserved by writes in flight, storage.min_free_bytes is ${mib(this.opts.min_free_bytes)}`,
    );
  }

  /** Reserves `bytes` for a write in flight; see the file comment. */
  reserve(what: string, bytes: number): StorageReservation {
    this.assertAcceptsGrowth(what, bytes);
    this.reserved += bytes;
    let held = true;
    return {
      release: (written = 0) => {
        if (!held) return;
        held = false;
        this.reserved -= bytes;
        if (written > 0 && this.space) {
          this.space = { ...this.space, free_bytes: Math.max(0, this.space.free_bytes - written) };
          this.update();
        }
      },
    };
  }

  /** Registers `cb` to run each time growth is accepted again after a refusal. */
  onRecovered(cb: () => void): void {
    this.recovered.push(cb);
  }

  /** A store write failed for lack of space or a failing disk (from `Store.onWriteFailure`). */
  writeFailed(detail: string): void {
    if (this.writeFailure === null) this.logger?.error({ detail }, 'master store cannot write');
    this.writeFailure = detail;
    this.update();
  }

  /** One check: statfs, then (after a write failure) a probe write. Checks never overlap. */
  check(): Promise<void> {
    if (this.checking) return this.checking;
    const run = async () => {
      try {
        this.space = await this.statfs(this.opts.dataDir);
        this.statfsError = null;
      } catch (err) {
        // Unknown free space counts as enough (the SQLITE_FULL mapping still protects); said in detail.
        this.space = null;
        this.statfsError = (err as Error).message;
      }
      if (this.writeFailure !== null) {
        try {
          this.store.probeWrite(this.clock.now());
          this.logger?.info({ was: this.writeFailure }, 'master store takes writes again');
          this.writeFailure = null;
        } catch {
          // Still failing: the store called writeFailed again with the new detail.
        }
      }
      this.update();
    };
    this.checking = run().finally(() => {
      this.checking = null;
    });
    return this.checking;
  }

  private update(): void {
    const before = this.state;
    this.state = storageState(
      { free_bytes: this.space?.free_bytes ?? null, write_failure: this.writeFailure },
      this.opts,
    );
    if (!storageAcceptsGrowth(this.state) || !storageAcceptsGrowth(before)) this.refusedAt = this.clock.now();
    if (this.state === before) return;
    const status = this.status();
    if (this.state === 'ok') this.logger?.info(status, 'master storage ok');
    else if (this.state === 'low') this.logger?.warn(status, 'master storage low');
    else this.logger?.error(status, 'master storage refuses writes');
    if (!storageAcceptsGrowth(before) && storageAcceptsGrowth(this.state))
      for (const cb of this.recovered) {
        try {
          cb();
        } catch (err) {
          this.logger?.error({ err }, 'storage recovery listener failed');
        }
      }
  }

  private detail(): string | undefined {
    const free = this.space ? `${mib(this.space.free_bytes)} free` : null;
    switch (this.state) {
      case 'unwritable':
        return `the store cannot write (${this.writeFailure}); probing every check`;
      case 'refusing':
        return `${free} on the data dir's filesystem, under storage.min_free_bytes (${mib(this.opts.min_free_bytes)})`;
      case 'low':
        return `${free} on the data dir's filesystem, under storage.warn_free_bytes (${mib(this.opts.warn_free_bytes)})`;
      default:
        return this.statfsError === null ? undefined : `cannot read free space: ${this.statfsError}`;
    }
  }
}

function mib(bytes: number): string {
  return `${Math.floor(bytes / (1024 * 1024))} MiB`;
}
