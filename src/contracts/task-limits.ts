import { z } from 'zod';

/**
 * Per-task resource limits (docs/security.md "Resource limits"): what one task may take of
 * its worker's host. The policy sets defaults and maxima per card (an 8-card task gets 8 times a 1-card
 * one); a spec may ask for other values within the maximum; the master resolves them
 * (src/domain/policy/task-limits.ts) into the plan; the worker enforces them (worker/sandbox/limits.ts) and
 * reports what it enforced.
 */

/** The limit names, in the order they are shown. */
export const LIMIT_NAMES = ['memory_mib', 'pids', 'cpu_weight', 'tmp_mib', 'shm_mib', 'disk_mib'] as const;
/** One limit's name. */
export type LimitName = (typeof LIMIT_NAMES)[number];

/** Largest value of any MiB limit (16 TiB): far beyond any host, small enough for exact byte arithmetic. */
export const MAX_LIMIT_MIB = 16 * 1024 * 1024;
/** Largest process count. */
export const MAX_LIMIT_PIDS = 4 * 1024 * 1024;
/** cgroup v2's range of cpu.weight (the default is 100). */
export const MAX_CPU_WEIGHT = 10000;

const mib = (what: string) =>
  z.number().int().min(1).max(MAX_LIMIT_MIB).describe(`${what}, in MiB (a whole number >= 1)`);
const pids = z
  .number()
  .int()
  .min(1)
  .max(MAX_LIMIT_PIDS)
  .describe('Most processes and threads alive at once (a whole number >= 1)');
const cpuWeight = z
  .number()
  .int()
  .min(1)
  .max(MAX_CPU_WEIGHT)
  .describe(
    "CPU share under contention, cgroup v2's cpu.weight scale (1 to 10000; 100 is one card's default)",
  );

/** Every limit, each value given: what the master resolves and the worker enforces. */
export const ResolvedLimitsSchema = z.strictObject({
  memory_mib: mib('Hard memory limit (RAM; no swap), including what the task keeps in /tmp and /dev/shm'),
  pids,
  cpu_weight: cpuWeight,
  tmp_mib: mib('Size of the private /tmp'),
  shm_mib: mib('Size of the private /dev/shm'),
  disk_mib: mib("Disk the task's directory (/task) may hold"),
});
/** Every limit, resolved. */
export type ResolvedLimits = z.infer<typeof ResolvedLimitsSchema>;

/** Most CPUs a spec may ask for (`limits.cpus`). */
export const MAX_LIMIT_CPUS = 65536;

/**
 * `limits.cpus`: whole CPUs the task may use at once (a CPU quota: cgroup `cpu.max`, podman `--cpus`).
 * Unlike the other limits it has no default: a task that asks for none is not capped, and only tasks that
 * ask are counted against their host's CPUs when the scheduler places them (docs/operations.md "Task
 * limits"). Not in the plan's `limits` (an older worker refuses unknown keys there): the plan's `cpus`.
 */
export const CpusSchema = z
  .number()
  .int()
  .min(1)
  .max(MAX_LIMIT_CPUS)
  .describe(
    'Whole CPUs the task may use at once (a quota); it runs only where its host has that many CPUs not promised to other tasks. Omit for no cap.',
  );

/** What a spec may ask for: any of the limits, each a total for the whole task. */
export const SpecLimitsSchema = ResolvedLimitsSchema.partial()
  .extend({ cpus: CpusSchema.optional() })
  .describe(
    "Resource limits for the whole task, each optional: memory_mib (hard; over it the task ends OUT_OF_MEMORY), pids, cpu_weight (1..10000), tmp_mib (/tmp), shm_mib (/dev/shm), disk_mib (/task), cpus (whole CPUs, a quota; placed only where the host has them free). Omitted ones are the operator's per-card default times cards.count (cpus: no cap); asking above the policy maximum is an error finding (LIMIT_OVER_POLICY). Omit unless the task needs more (or wants less) than the default.",
  );

/** Per-card defaults: what a 1-card task gets when its spec asks for nothing. */
export const DEFAULT_LIMITS_PER_CARD: ResolvedLimits = {
  memory_mib: 32 * 1024,
  pids: 4096,
  cpu_weight: 100,
  tmp_mib: 8 * 1024,
  shm_mib: 16 * 1024,
  disk_mib: 20 * 1024,
};

/** Per-card maxima: the most a spec may ask for, per card it leases. */
export const DEFAULT_MAX_LIMITS_PER_CARD: ResolvedLimits = {
  memory_mib: 256 * 1024,
  pids: 32768,
  cpu_weight: MAX_CPU_WEIGHT,
  tmp_mib: 64 * 1024,
  shm_mib: 128 * 1024,
  disk_mib: 1024 * 1024,
};

/**
 * What a worker keeps of its host for itself, the master and the system (docs/security.md "The task sandbox"): tasks on that
 * worker share the rest (src/domain/policy/task-limits.ts `hostAllowance`).
 */
export const HostReserveSchema = z.strictObject({
  memory_mib: z.number().int().min(0).max(MAX_LIMIT_MIB).default(4096),
  disk_mib: z.number().int().min(0).max(MAX_LIMIT_MIB).default(10240),
  /** CPUs kept for the worker and the system: tasks asking for `limits.cpus` share the rest. */
  cpus: z.number().int().min(0).max(MAX_LIMIT_CPUS).default(1),
});
/** The policy's `task_limits.host_reserve`. */
export type HostReserve = z.infer<typeof HostReserveSchema>;
/** The reserve when the policy names none. */
export const DEFAULT_HOST_RESERVE: HostReserve = HostReserveSchema.parse({});

/**
 * What a worker's host has (its hello's `host`): RAM, CPUs, and the size of the file
 * system that holds its data dir (where tasks' directories are).
 */
export const HostResourcesSchema = z.strictObject({
  memory_mib: z.number().int().min(1).max(MAX_LIMIT_MIB),
  cpus: z.number().int().min(1).max(65536),
  disk_mib: z.number().int().min(0).max(MAX_LIMIT_MIB),
});
/** A worker host's resources. */
export type HostResources = z.infer<typeof HostResourcesSchema>;

/** The policy's `task_limits` section. */
export const PolicyLimitsSchema = z
  .strictObject({
    /** Defaults per leased card. */
    per_card: ResolvedLimitsSchema.default(DEFAULT_LIMITS_PER_CARD),
    /** Maxima per leased card: a spec's ask above `max_per_card × cards` is an error finding. */
    max_per_card: ResolvedLimitsSchema.default(DEFAULT_MAX_LIMITS_PER_CARD),
    /** Kept of each worker's host for itself, the master and the system; tasks share the rest. */
    host_reserve: HostReserveSchema.prefault({}),
  })
  .refine((p) => LIMIT_NAMES.every((n) => p.per_card[n] <= p.max_per_card[n]), {
    message: 'every task_limits.per_card value must be at most its task_limits.max_per_card value',
  });

/** How one limit was enforced on the worker: the mechanism, or why it was not (reported in `detail`). */
export interface EnforcedLimit {
  /** The value enforced (as resolved), or null when it could not be. */
  readonly value: number | null;
  /** e.g. `cgroup v1 memory.limit_in_bytes`, `tmpfs size`, `watchdog`, `podman --memory`, `not enforced: …`. */
  readonly by: string;
}
/** What the worker enforced, limit by limit. */
export type EnforcedLimits = Partial<Record<LimitName | 'cpus', EnforcedLimit>>;
