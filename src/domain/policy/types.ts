import type { TextInspection } from './text-inspection.js';

/** How serious a finding is: `error` blocks confirmation, `warning` is shown to the reviewer. */
export type FindingSeverity = 'error' | 'warning';

/**
 * One policy finding. `message` and `hint` are server-written; every submitter value inside them is
 * quoted with quoteUntrusted (src/domain/policy/untrusted.ts), never spliced in.
 */
export interface Finding {
  severity: FindingSeverity;
  code: string;
  /** Where in the spec, as a dotted path (`runtime.argv[0]`). */
  path: string;
  message: string;
  hint: string;
}

/**
 * Facts the shell gathers before the pure check: sha256 of files the spec names (null = unreadable), and
 * the size of each input blob the master's store holds (absent = not uploaded).
 */
export interface PolicyFacts {
  fileDigests: Readonly<Record<string, string | null>>;
  storedBlobs?: Readonly<Record<string, number>>;
  /** Names of the data mounts some enrolled worker offers (absent: not checked). */
  offeredMounts?: readonly string[];
  /**
   * The most one task may take of memory, /tmp, /dev/shm and disk on the largest enrolled host, by limit
   * (src/domain/policy/task-limits.ts `hostAllowance`); absent: no enrolled worker reports its host.
   */
  largestHost?: Readonly<Record<'memory_mib' | 'tmp_mib' | 'shm_mib' | 'disk_mib' | 'cpus', number>>;
  /**
   * The text inspection of input blobs, by sha256 (src/domain/policy/text-inspection.ts). Absent: the content
   * was not inspected (no text findings at all); a stored digest missing from it: not inspected because
   * too large, which is itself a warning.
   */
  inputText?: Readonly<Record<string, TextInspection>>;
  /** The owner's account and the highest priority it may ask for (absent or null max: no bound). */
  account?: { name: string; max_priority: number | null };
}

/** Adds one finding. */
export type Add = (s: FindingSeverity, code: string, path: string, message: string, hint: string) => void;
