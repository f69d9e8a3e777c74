import { BrokerError } from '../../contracts/errors.js';
import type { FlagValues } from '../../platform/args.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CliIo, CommandRunner } from '../common/io.js';
import { type MasterClient, withMaster } from '../common/master-client.js';
import { emit, reportError, table } from '../common/output.js';
import { GRANT } from './grant-command-specs.js';
import { formatGrantShow, type GrantShow } from './grant-format.js';

/** `gpu-broker grant request|list|show|approve|reject|revoke|explain` over the REST mirror. */

type GrantFlags = FlagValues<typeof GRANT.flags>;

interface GrantView {
  grant_id: string;
  state: string;
  grantee: string;
  decided_by: string | null;
  expires_at: string;
  budget: { runs_used: number; max_runs: number; card_hours_charged: number; max_card_hours: number };
  scope: unknown;
}

interface Coverage {
  covered: boolean;
  grant_id: string | null;
  failing: { clause: string; message: string } | null;
}

const num = (v: string | undefined, name: string, fallback?: number): number | undefined => {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0)
    throw new BrokerError('INVALID_INPUT', `--${name} must be a positive number`, `e.g. --${name} 4`);
  return n;
};

const path = (id: string, tail = '') => `/api/v1/grants/${encodeURIComponent(id)}${tail}`;

const oneLine = (g: GrantView) =>
  `${g.grant_id} ${g.state} grantee ${g.grantee}, runs ${g.budget.runs_used}/${g.budget.max_runs}, card-hours ${g.budget.card_hours_charged}/${g.budget.max_card_hours}, expires ${g.expires_at}`;

/** `grant request`: drafts a grant from a revision that ran. */
async function request(c: MasterClient, io: CliIo, v: GrantFlags): Promise<number> {
  if (!v.base || !v.reason)
    throw new BrokerError(
      'INVALID_INPUT',
      '--base and --reason are required',
      'gpu-broker grant request --help',
    );
  const scope: Record<string, unknown> = { mutable_inputs: v.mutable ?? [] };
  const maxCards = num(v['max-cards'], 'max-cards');
  const maxTime = num(v['max-time'], 'max-time');
  if (maxCards !== undefined) scope['max_cards'] = maxCards;
  if (maxTime !== undefined) scope['max_time_limit_seconds'] = maxTime;
  const maxRuns = num(v['max-runs'], 'max-runs', 10) ?? 10;
  const out = await c.post<{ grant: GrantView; next_action: string }>('/api/v1/grants', {
    base_revision_id: v.base,
    scope,
    max_runs: maxRuns,
    // Each run reserves cards × its time limit until it ends: one card-hour per run by default, so a
    // one-card, one-hour base is not cut off after its first run.
    max_card_hours: num(v['card-hours'], 'card-hours', maxRuns * (maxCards ?? 1)),
    ttl_seconds: num(v.ttl, 'ttl', 86400),
    concurrency: num(v.concurrency, 'concurrency', 1),
    reason: v.reason,
    ...(v.supersedes ? { supersedes: v.supersedes } : {}),
  });
  emit(io, v.json, out, () => `${oneLine(out.grant)}\n${out.next_action}`);
  return 0;
}

/** `grant explain`: would a revision be covered, and if not, the first failing clause. Exit 1 if not. */
async function explain(c: MasterClient, io: CliIo, v: GrantFlags): Promise<number> {
  if (!v.revision)
    throw new BrokerError(
      'INVALID_INPUT',
      '--revision is required',
      'gpu-broker grant explain --revision REV',
    );
  const out = await c.post<{ results: Coverage[] }>('/api/v1/grants/explain', {
    revision_id: v.revision,
    ...(v.grant ? { grant_id: v.grant } : {}),
  });
  emit(io, v.json, out, () =>
    out.results.length === 0
      ? 'no active grant'
      : out.results
          .map(
            (r) =>
              `${r.grant_id}: ${r.covered ? 'covered' : `not covered: ${r.failing?.clause}: ${r.failing?.message}`}`,
          )
          .join('\n'),
  );
  return out.results.some((r) => r.covered) ? 0 : 1;
}

/** Runs one subcommand on a connected master. */
async function dispatch(c: MasterClient, io: CliIo, sub: string, id: string | undefined, v: GrantFlags) {
  const need = (): string => {
    if (!id) throw new BrokerError('INVALID_INPUT', 'which grant?', `gpu-broker grant ${sub} GRANT_ID`);
    return id;
  };
  switch (sub) {
    case 'request':
      return await request(c, io, v);
    case 'explain':
      return await explain(c, io, v);
    case 'list': {
      const out = await c.get<{ grants: GrantView[] }>(
        `/api/v1/grants${v.state ? `?state=${encodeURIComponent(v.state)}` : ''}`,
      );
      emit(io, v.json, out, () =>
        table(
          ['GRANT', 'STATE', 'GRANTEE', 'RUNS', 'CARD-H', 'EXPIRES'],
          out.grants.map((g) => [
            g.grant_id,
            g.state,
            g.grantee,
            `${g.budget.runs_used}/${g.budget.max_runs}`,
            `${g.budget.card_hours_charged}/${g.budget.max_card_hours}`,
            g.expires_at,
          ]),
        ),
      );
      return 0;
    }
    case 'show': {
      const out = await c.get<GrantShow>(path(need()));
      emit(io, v.json, out, () => formatGrantShow(out));
      return 0;
    }
    case 'approve':
    case 'reject': {
      const out = await c.post<{ grant: GrantView }>(path(need(), '/decide'), {
        decision: sub === 'approve' ? 'APPROVE' : 'REJECT',
        ...(v.comment ? { comment: v.comment } : {}),
      });
      emit(io, v.json, out, () => oneLine(out.grant));
      return 0;
    }
    default: {
      const out = await c.post<{ grant: GrantView; cancelled_task_ids: string[] }>(path(need(), '/revoke'), {
        ...(v['cancel-running'] ? { cancel_running: true } : {}),
        ...(v.comment ? { comment: v.comment } : {}),
      });
      emit(
        io,
        v.json,
        out,
        () => `${oneLine(out.grant)}\ncancelled: ${out.cancelled_task_ids.join(', ') || 'none'}`,
      );
      return 0;
    }
  }
}

/** `gpu-broker grant …`. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(GRANT, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [sub, id, extra] = parsed.positionals;
  if (!sub || !GRANT.subcommands?.includes(sub))
    return usageError(
      io,
      GRANT,
      sub ? `unknown subcommand "${sub}"` : `which subcommand: ${GRANT.subcommands?.join(', ')}?`,
    );
  if (extra !== undefined || (id !== undefined && ['request', 'list', 'explain'].includes(sub)))
    return usageError(io, GRANT, `unexpected "${extra ?? id}"`);
  try {
    return await withMaster(values, io, (c) => dispatch(c, io, sub, id, values));
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
