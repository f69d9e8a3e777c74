import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { ReviewConfigSchema } from '../contracts/agent-ceiling.js';
import { BrokerError } from '../contracts/errors.js';
import { PolicySchema } from '../contracts/policy.js';
import { DEFAULT_MAX_LOG_BYTES_PER_TASK } from '../contracts/worker-protocol.js';

/**
 * The master's configuration: one JSON file (`--config FILE`) validated here, unknown keys refused,
 * overridden by CLI flags for the common settings.
 */

/** Timing knobs, all in seconds unless named otherwise. */
export const TimingSchema = z.strictObject({
  sample_interval_ms: z.number().int().min(100).max(60000).default(2000),
  worker_offline_seconds: z.number().min(1).max(3600).default(15),
  lease_grace_seconds: z.number().min(0).max(86400).default(60),
  kill_grace_seconds: z.number().min(0).max(600).default(10),
  cleanup_timeout_seconds: z.number().min(0).max(3600).default(30),
  proposal_ttl_seconds: z
    .number()
    .int()
    .min(1)
    .max(31536000)
    .default(7 * 86400),
  sweep_interval_ms: z.number().int().min(10).max(60000).default(1000),
});

/** Standing grants (docs/operations.md "Standing grants"). */
export const GrantsConfigSchema = z.strictObject({
  /** The hard cap on a grant's lifetime: expires_at is at most this long after it is decided. */
  max_ttl_seconds: z
    .number()
    .int()
    .min(60)
    .max(31_536_000)
    .default(7 * 86400),
});

/** Scheduling knobs. */
/** Limits on what the master stores per task (ADR 0016). */
export const StorageConfigSchema = z.strictObject({
  /**
   * Most log bytes (stdout and stderr together) kept per task; the rest is dropped, with one marker
   * line, and `get_task_logs` says `log_capped`. Default 64 MiB.
   */
  max_log_bytes_per_task: z
    .number()
    .int()
    .min(1024)
    .max(16 * 1024 * 1024 * 1024)
    .default(DEFAULT_MAX_LOG_BYTES_PER_TASK),
  /**
   * Free bytes on the data dir's filesystem below which the master raises a `disk_low` warning
   * (default 1 GiB).
   */
  warn_free_bytes: z
    .number()
    .int()
    .min(0)
    .default(1024 * 1024 * 1024),
  /**
   * Free bytes below which the master refuses what makes its store grow (new proposals, reviews, log
   * chunks, outputs, input uploads) with a retryable `UNAVAILABLE`, `/healthz` answers 503 and the alert
   * is `disk_full` (default 256 MiB). 0 turns the refusal off (the SQLITE_FULL mapping stays).
   */
  min_free_bytes: z
    .number()
    .int()
    .min(0)
    .default(256 * 1024 * 1024),
  /** How often the free space is checked, and a failed store probed with a write (default 10 s). */
  check_interval_ms: z.number().int().min(10).max(3_600_000).default(10_000),
  /**
   * How long an uploaded input nothing names is kept before the sweep deletes it (default 24 h): the
   * time an agent has between uploading and naming it in a proposal. Lower it on a small disk.
   */
  blob_grace_seconds: z.number().int().min(1).max(31_536_000).default(86_400),
  /**
   * Retention of what FINAL tasks produced (docs/operations.md "Retention"): logs and output files of
   * tasks that ended more than N days ago are deleted; the task row, its audit events and the outputs'
   * names, sizes and sha256 stay. 0 keeps them for ever.
   */
  retention: z
    .strictObject({
      task_logs_days: z.number().min(0).max(36_500).default(30),
      outputs_days: z.number().min(0).max(36_500).default(90),
      interval_seconds: z.number().int().min(1).max(31_536_000).default(3600),
      /** Tasks pruned per transaction; the sweep yields to the event loop between batches. */
      batch_size: z.number().int().min(1).max(10_000).default(20),
    })
    .prefault({}),
});

export const SchedulingConfigSchema = z.strictObject({
  vram_threshold_pct: z.number().min(0).max(100).default(2),
  reservation_after_seconds: z
    .number()
    .min(0)
    .max(86400 * 7)
    .default(300),
  max_concurrent_cards_per_owner: z.number().int().min(1).nullable().default(null),
  max_queued_tasks_per_owner: z.number().int().min(1).nullable().default(null),
  /**
   * Fair share across accounts (docs/operations.md "Accounts and usage"): an account's past usage counts
   * half as much after this many hours (decayed usage, as Slurm's PriorityDecayHalfLife).
   */
  fair_share_half_life_hours: z.number().min(0.1).max(720).default(6),
  /**
   * Reclaim by preemption (docs/operations.md "Borrowing and reclaim"): a task preempted this often is
   * never preempted again; it runs to its end.
   */
  max_preemptions_per_task: z.number().int().min(0).max(100).default(3),
});

/**
 * Audit chain checking and retention (docs/operations.md "Audit retention"). The master checks
 * new rows every `check_interval_ms` and re-walks the whole live chain every `full_verify_interval_seconds`,
 * `batch_size` rows at a time between event-loop turns. Retention archives rows older than
 * `min_age_seconds` beyond the newest `keep_events` into files under `<data-dir>/audit-archive/`.
 */
export const AuditConfigSchema = z.strictObject({
  check_interval_ms: z.number().int().min(100).max(3_600_000).default(5000),
  batch_size: z.number().int().min(10).max(100_000).default(200),
  full_verify_interval_seconds: z.number().int().min(60).max(31_536_000).default(86_400),
  retention: z
    .strictObject({
      enabled: z.boolean().default(true),
      keep_events: z.number().int().min(1).default(100_000),
      min_age_seconds: z
        .number()
        .int()
        .min(0)
        .default(30 * 86_400),
      max_segment_events: z.number().int().min(1).max(1_000_000).default(10_000),
      /** Segments one run archives at most; a run stopped at the cap continues on the next check. */
      max_segments_per_run: z.number().int().min(1).max(10_000).default(50),
      interval_seconds: z.number().int().min(1).max(31_536_000).default(3600),
    })
    .prefault({}),
});

/**
 * Limits on HTTP connections and uploads (docs/operations.md "Connections and uploads"). A
 * request must send its headers within `headers_timeout_ms`; its body may idle at most
 * `body_timeout_ms` and, past that first `body_timeout_ms`, must average `min_body_bytes_per_second`,
 * else the connection is cut; `request_timeout_ms` bounds receiving a whole request (0: no bound).
 */
export const HttpConfigSchema = z
  .strictObject({
    headers_timeout_ms: z.number().int().min(100).max(600_000).default(10_000),
    body_timeout_ms: z.number().int().min(100).max(3_600_000).default(30_000),
    min_body_bytes_per_second: z
      .number()
      .int()
      .min(0)
      .default(64 * 1024),
    request_timeout_ms: z.number().int().min(0).max(86_400_000).default(7_200_000),
    /** How long an idle keep-alive connection stays open. */
    keep_alive_timeout_ms: z.number().int().min(100).max(600_000).default(10_000),
    /** Open connections from one peer address; more are closed when accepted. */
    max_connections_per_peer: z.number().int().min(1).max(1_000_000).default(256),
    /**
     * Requests one principal may have in flight at once, over all addresses (HTTP/1.1
     * holds a connection per request): the next is answered QUOTA_EXCEEDED and its connection closed, and
     * a connection of a principal holding more open ones than this is closed after its answer. Keep it
     * well under max_connections_per_peer, so the principals behind one address keep a reserve.
     */
    max_connections_per_principal: z.number().int().min(1).max(1_000_000).default(64),
    /** Open connections in all (0: no bound beyond the descriptor limit). */
    max_connections: z.number().int().min(0).max(10_000_000).default(8192),
    /** Uploads (`PUT /api/v1/blobs`) one principal may have in flight. */
    max_uploads_per_principal: z.number().int().min(1).max(1024).default(4),
    /**
     * Body bytes per second one principal's uploads may stream together; past it a body is paused (0: no
     * bound). Keep it at least max_uploads_per_principal × min_body_bytes_per_second.
     */
    upload_bytes_per_second_per_principal: z
      .number()
      .int()
      .min(0)
      .default(64 * 1024 * 1024),
    /** Raise the soft RLIMIT_NOFILE to the hard limit at start (with util-linux `prlimit`). */
    raise_nofile: z.boolean().default(true),
  })
  .superRefine((h, ctx) => {
    // Paced below the minimum body rate, a principal's uploads in flight would be cut as too slow.
    const rate = h.upload_bytes_per_second_per_principal;
    const needed = h.max_uploads_per_principal * h.min_body_bytes_per_second;
    if (rate > 0 && rate < needed)
      ctx.addIssue({
        code: 'custom',
        path: ['upload_bytes_per_second_per_principal'],
        message: `must be 0 or at least max_uploads_per_principal × min_body_bytes_per_second (${needed}): a principal's uploads share it, and each must keep the minimum rate`,
      });
    // A paced body is not read while it waits: the longest wait (every upload of the principal holding a
    // socket read of up to 64 KiB) must stay well inside the idle cut, or an honest upload is cut as stalled.
    const longestWaitMs = rate > 0 ? (h.max_uploads_per_principal * 64 * 1024 * 1000) / rate : 0;
    if (longestWaitMs * 2 > h.body_timeout_ms)
      ctx.addIssue({
        code: 'custom',
        path: ['upload_bytes_per_second_per_principal'],
        message: `too low for body_timeout_ms ${h.body_timeout_ms}: a paced upload may wait ${Math.ceil(longestWaitMs)} ms for one socket read, which must be under half of body_timeout_ms`,
      });
  });

/**
 * Per-principal caps on proposals and revisions (docs/operations.md "Quotas and
 * pruning"); over one, create/revise answer QUOTA_EXCEEDED naming the cap. null turns a cap off.
 */
export const QuotasConfigSchema = z.strictObject({
  max_open_proposals: z.number().int().min(1).nullable().default(100),
  max_revisions_per_proposal: z.number().int().min(1).nullable().default(200),
  max_revisions_per_hour: z.number().int().min(1).nullable().default(600),
  max_revision_bytes: z
    .number()
    .int()
    .min(0)
    .nullable()
    .default(512 * 1024 * 1024),
  /** get_revision calls of one reader computed at once (ADR 0035); its further calls wait in its queue. */
  diff_calls_per_reader: z.number().int().min(1).max(64).default(2),
  /** get_revision calls of one reader that may wait for a place; past it UNAVAILABLE (retryable). */
  diff_queued_per_reader: z.number().int().min(0).max(1024).default(8),
  /**
   * Calls of tools the catalog marks `heavy` (src/broker/tools/tool-cost.ts) one principal runs at once
   * (docs/security.md "Fair share between principals"); its further heavy calls wait in its own queue.
   */
  heavy_calls_per_principal: z.number().int().min(1).max(64).default(2),
  /**
   * Heavy calls of one principal that may wait for a place; past it UNAVAILABLE (retryable). As many as
   * its requests in flight (http.max_connections_per_principal): a client following 20 tasks at once
   * (Promise.all of get_task_logs) waits its turn rather than failing; the HTTP cap bounds the queue.
   */
  heavy_queued_per_principal: z.number().int().min(0).max(1024).default(64),
  /**
   * Milliseconds of event-loop time one principal's heavy calls may take per second, averaged: a call
   * waits for its turn while the principal is over it (a fifth of one core by default).
   */
  heavy_ms_per_second: z.number().min(1).max(1000).default(200),
  /** The burst of that budget: heavy work a quiet principal may spend at once. */
  heavy_burst_ms: z.number().min(1).max(600_000).default(1000),
  /** Long-polls (`wait_for_*`) one principal holds at once; the next is QUOTA_EXCEEDED. */
  waits_per_principal: z.number().int().min(1).max(4096).default(16),
  /** Grant requests (REQUESTED) one principal may have made and still pending. */
  max_pending_grant_requests: z.number().int().min(1).nullable().default(20),
  /** Bytes (scope and reason, as stored) of one principal's pending grant requests together. */
  max_pending_grant_request_bytes: z
    .number()
    .int()
    .min(1024)
    .nullable()
    .default(1024 * 1024),
});

/**
 * Pruning of abandoned proposals and old unreviewed revisions (src/domain/retention/proposal-pruning.ts).
 * 0 days turns a rule off.
 */
export const PruningConfigSchema = z.strictObject({
  enabled: z.boolean().default(true),
  revision_days: z.number().min(0).max(36_500).default(14),
  proposal_days: z.number().min(0).max(36_500).default(14),
  interval_seconds: z.number().int().min(1).max(31_536_000).default(3600),
  /** Revisions or proposals examined per transaction; the loop yields to the event loop between batches. */
  batch_size: z.number().int().min(1).max(10_000).default(200),
});

/** The whole master config file. */
export const MasterConfigSchema = z.strictObject({
  listen: z.string().default('127.0.0.1:8443'),
  tls: z
    .strictObject({
      mode: z.enum(['auto', 'off']).default('auto'),
      sans: z.array(z.string().min(1)).max(64).default([]),
    })
    .default({ mode: 'auto', sans: [] }),
  allowed_origins: z.array(z.string()).max(64).default([]),
  /**
   * The interpreter the bundled qualification workload runs under on workers (it needs torch; Debian's
   * python3-torch installs for /usr/bin/python3, a GPU host may have torch in another python).
   */
  qualification_python: z.string().startsWith('/').default('/usr/bin/python3'),
  policy: PolicySchema.default(PolicySchema.parse({})),
  timing: TimingSchema.default(TimingSchema.parse({})),
  scheduling: SchedulingConfigSchema.default(SchedulingConfigSchema.parse({})),
  storage: StorageConfigSchema.default(StorageConfigSchema.parse({})),
  audit: AuditConfigSchema.default(AuditConfigSchema.parse({})),
  http: HttpConfigSchema.default(HttpConfigSchema.parse({})),
  quotas: QuotasConfigSchema.default(QuotasConfigSchema.parse({})),
  pruning: PruningConfigSchema.default(PruningConfigSchema.parse({})),
  grants: GrantsConfigSchema.default(GrantsConfigSchema.parse({})),
  /** What agent reviewers may approve (src/contracts/agent-ceiling.ts). */
  review: ReviewConfigSchema.default(ReviewConfigSchema.parse({})),
});

/** A validated master config. */
export type MasterConfig = z.infer<typeof MasterConfigSchema>;
/** Master config as written in a file (defaults not applied). */
export type MasterConfigInput = z.input<typeof MasterConfigSchema>;

/** Reads and validates a config file; a bad file is a clear error naming the key. */
export function loadConfigFile(path: string): MasterConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new BrokerError(
      'INVALID_INPUT',
      `cannot read config ${path}: ${(err as Error).message}`,
      'Pass a JSON file.',
    );
  }
  return parseConfig(raw, path);
}

/** Validates a config value (from a file or built in code). */
export function parseConfig(raw: unknown, source = 'config'): MasterConfig {
  const parsed = MasterConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new BrokerError(
      'INVALID_INPUT',
      `invalid ${source}: ${issues}`,
      'See docs/operations.md for the config keys.',
    );
  }
  return parsed.data;
}

/** Splits `HOST:PORT` (IPv6 in brackets) into its parts. */
export function parseListen(listen: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(listen);
  if (!m)
    throw new BrokerError(
      'INVALID_INPUT',
      `bad listen address "${listen}"`,
      'Use HOST:PORT, e.g. 127.0.0.1:8443',
    );
  const host = (m[1] ?? m[2])!;
  const port = Number(m[3]);
  if (port > 65535) throw new BrokerError('INVALID_INPUT', `bad port in "${listen}"`, 'Ports are 0..65535.');
  return { host, port };
}

/** True for addresses only this machine can reach; plain HTTP is allowed only there. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}
