import { LIMIT_NAMES, type ResolvedLimits } from '../../contracts/task-limits.js';
import type { InputFile, TaskSpec } from '../../contracts/task-spec.js';
import { envControlOf } from '../policy/env-control.js';
import type { Finding } from '../policy/types.js';
import { unnamedChange } from './fields.js';
import { anyGlobMatches } from './glob.js';
import { argvPrefixProblem, prefixScript, reservationOf, type StandingGrant } from './grant.js';

/**
 * Whether a standing grant covers a revision (ADR 0029): a TABLE of named clauses evaluated in
 * order, like src/domain/scheduling; the first that fails is the answer (`cards 8 > 4`), and when all
 * hold their messages are the receipt. Pure; the broker gathers the facts and applies the decision in
 * one transaction (src/broker/tools/grant-approval.ts).
 *
 * Fail-closed by construction: every spec field is mapped to the clause that compares it or to free
 * text (title, objective, success_criteria, notes, outputs: what an agent edits between runs) in
 * ./standing-grant-fields.ts, a test fails on a spec field the map lacks, and the `unchanged` clause
 * refuses a change to any field the map does not name.
 */

/** The facts one coverage question needs. */
export interface CoverageInput {
  grant: StandingGrant;
  /** The spec and findings of the revision the grant was made from. */
  base: { spec: TaskSpec; findings: readonly Finding[] };
  /** The candidate revision: its spec, findings and its limits resolved under the policy. */
  spec: TaskSpec;
  findings: readonly Finding[];
  limits: ResolvedLimits;
  /** The interpreters the policy runs a script from the inputs with (extra_args "script" needs one). */
  script_interpreters: readonly string[];
  now: number;
}

/** The answer. */
export type Coverage =
  | { covered: true; clauses: Array<{ clause: string; message: string }> }
  | { covered: false; failing: { clause: string; message: string } };

type Check = (c: CoverageInput) => { ok: boolean; message: string };

const pass = (message: string) => ({ ok: true, message });
const fail = (message: string) => ({ ok: false, message });
const cmp = (what: string, value: number, max: number) =>
  value <= max ? pass(`${what} ${value} <= ${max}`) : fail(`${what} ${value} > ${max}`);

/** The clauses, in the order they are evaluated. */
export const COVERAGE_CLAUSES: ReadonlyArray<{ clause: string; check: Check }> = [
  {
    clause: 'state',
    check: ({ grant: g }) => (g.state === 'ACTIVE' ? pass('ACTIVE') : fail(`grant is ${g.state}`)),
  },
  {
    clause: 'expiry',
    check: ({ grant: g, now }) => (now < g.expires_at ? pass('not expired') : fail('grant expired')),
  },
  { clause: 'findings', check: checkFindings },
  {
    clause: 'network',
    check: ({ spec }) =>
      (spec.network ?? 'none') === 'none'
        ? pass('network none')
        : fail(`network ${spec.network} (grants cover network none only)`),
  },
  { clause: 'runtime', check: checkRuntime },
  { clause: 'argv', check: checkArgv },
  { clause: 'inputs', check: checkInputs },
  { clause: 'env', check: checkEnv },
  { clause: 'cards', check: checkCards },
  {
    clause: 'time_limit',
    check: ({ grant, spec }) =>
      cmp('time_limit_seconds', spec.time_limit_seconds, grant.scope.max_time_limit_seconds),
  },
  { clause: 'limits', check: checkLimits },
  { clause: 'workers', check: checkWorkers },
  { clause: 'placement', check: checkPlacement },
  {
    clause: 'priority',
    check: ({ grant, spec }) => cmp('priority', spec.priority ?? 0, grant.scope.max_priority),
  },
  { clause: 'preemption', check: checkPreemption },
  {
    clause: 'unchanged',
    check: ({ base, spec }) => {
      const path = unnamedChange(base.spec, spec);
      return path === null
        ? pass('every other field as in the base revision')
        : fail(`${path} differs from the base revision's (no clause compares it, so it may not change)`);
    },
  },
  {
    clause: 'runs',
    check: ({ grant: g }) =>
      g.runs_used < g.max_runs
        ? pass(`runs ${g.runs_used + 1} of ${g.max_runs}`)
        : fail(`runs ${g.runs_used} of ${g.max_runs} used`),
  },
  { clause: 'card_hours', check: checkCardHours },
  {
    clause: 'concurrency',
    check: ({ grant: g }) =>
      g.running < g.concurrency
        ? pass(`running ${g.running + 1} of ${g.concurrency}`)
        : fail(`running ${g.running} of ${g.concurrency} allowed at once`),
  },
  {
    clause: 'breaker',
    check: ({ grant: g }) =>
      g.consecutive_failures < g.breaker_k
        ? pass(`failures in a row ${g.consecutive_failures} < ${g.breaker_k}`)
        : fail(`failures in a row ${g.consecutive_failures} >= ${g.breaker_k}`),
  },
];

/** Evaluates the clauses in order; the first failure is the answer. */
export function coverage(input: CoverageInput): Coverage {
  const clauses: Array<{ clause: string; message: string }> = [];
  for (const { clause, check } of COVERAGE_CLAUSES) {
    const r = check(input);
    if (!r.ok) return { covered: false, failing: { clause, message: r.message } };
    clauses.push({ clause, message: r.message });
  }
  return { covered: true, clauses };
}

/**
 * A covered run may be stopped at least as readily as the base revision: preemptible where the base was,
 * with no longer a grace (a run that cannot be preempted, or holds its cards longer once asked, is a
 * person's to approve; docs/operations.md "Borrowing and reclaim").
 */
function checkPreemption({ base, spec }: CoverageInput) {
  const was = base.spec.preemptible === true;
  const is = spec.preemptible === true;
  if (was && !is) return fail('not preemptible, though the base revision was');
  if (is && was) {
    const before = base.spec.preemption_grace_seconds;
    const after = spec.preemption_grace_seconds;
    if (after !== undefined && (before === undefined || after > before))
      return fail(
        `preemption_grace_seconds ${after} > the base revision's ${before ?? "(the operator's kill grace)"}`,
      );
  }
  return pass(is ? 'preemptible, as the base revision or more' : 'not preemptible, as the base revision');
}

/** Any error finding, or a warning code the base revision did not have, goes to a person. */
function checkFindings({ base, findings }: CoverageInput) {
  const error = findings.find((f) => f.severity === 'error');
  if (error) return fail(`error finding ${error.code} at ${error.path}`);
  const known = new Set(base.findings.map((f) => f.code));
  const fresh = findings.find((f) => !known.has(f.code));
  if (fresh) return fail(`new warning ${fresh.code} at ${fresh.path} (the base revision had none)`);
  return pass('no error finding, no new warning');
}

function checkRuntime({ grant, base, spec }: CoverageInput) {
  const rt = spec.runtime;
  if (rt.kind !== base.spec.runtime.kind)
    return fail(`runtime ${rt.kind} differs from the base revision's ${base.spec.runtime.kind}`);
  if (rt.kind === 'process')
    return grant.scope.image === null ? pass('process runtime') : fail('the grant pins an image');
  if (grant.scope.image === null) return fail(`image ${rt.image} is not pinned in the grant`);
  return rt.image === grant.scope.image
    ? pass(`image ${rt.image}`)
    : fail(`image ${rt.image} is not the grant's ${grant.scope.image}`);
}

/**
 * argv starts with the prefix, token by token; arguments past it only as `extra_args` says: `none`
 * never, `script` only when the prefix runs an input as a script under a policy interpreter (they go to
 * that reviewed script, not to a launcher such as `make`), `any_unsafe` always (widened on purpose).
 */
function checkArgv({ grant, spec, script_interpreters }: CoverageInput) {
  const { argv_prefix: prefix, extra_args } = grant.scope;
  const problem = argvPrefixProblem(prefix, extra_args);
  if (problem) return fail(problem);
  const argv = spec.runtime.argv;
  for (let i = 0; i < prefix.length; i++)
    if (argv[i] !== prefix[i])
      return fail(`argv[${i}] ${JSON.stringify(argv[i] ?? null)} is not ${JSON.stringify(prefix[i])}`);
  const extra = argv.length - prefix.length;
  if (extra === 0) return pass(`argv is ${JSON.stringify(prefix)}`);
  if (extra_args === 'none')
    return fail(`argv has ${extra} argument(s) past the prefix; the grant fixes argv (extra_args "none")`);
  if (extra_args === 'script') {
    const script = prefixScript(prefix, spec, script_interpreters);
    if (script === undefined)
      return fail(
        `argv has ${extra} argument(s) past the prefix, and ${JSON.stringify(prefix[1])} is not an input the policy runs as a script under ${prefix[0]}: they would reach ${prefix[0]} itself`,
      );
    return pass(
      `argv starts with ${JSON.stringify(prefix)}; ${extra} argument(s) go to the script ${script}`,
    );
  }
  return pass(
    `argv starts with ${JSON.stringify(prefix)}; ${extra} argument(s) reach ${prefix[0]} (WIDENED)`,
  );
}

/**
 * Cards: at most the grant's count, and the same card model, memory floor and MIG ask as the base
 * revision: a grant for whole cards does not cover a slice request, nor the other way round (ADR 0046).
 */
function checkCards({ grant, base, spec }: CoverageInput) {
  const was = base.spec.cards;
  const is = spec.cards;
  if (is.model !== was.model)
    return fail(
      `cards.model ${JSON.stringify(is.model ?? null)} differs from the base revision's ${JSON.stringify(was.model ?? null)}`,
    );
  if (is.min_memory_mib !== was.min_memory_mib)
    return fail(
      `cards.min_memory_mib ${is.min_memory_mib ?? 'unset'} differs from the base revision's ${was.min_memory_mib ?? 'unset'}`,
    );
  if (is.mig_profile !== was.mig_profile)
    return fail(
      `cards.mig_profile ${JSON.stringify(is.mig_profile ?? null)} differs from the base revision's ${JSON.stringify(was.mig_profile ?? null)}`,
    );
  if ((is.allow_mig ?? false) !== (was.allow_mig ?? false))
    return fail(
      `cards.allow_mig ${is.allow_mig ?? false} differs from the base revision's ${was.allow_mig ?? false}`,
    );
  return cmp('cards', is.count, grant.scope.max_cards);
}

const sameFile = (a: InputFile, b: InputFile) =>
  a.sha256 === b.sha256 && a.size === b.size && (a.executable ?? false) === (b.executable ?? false);

function checkInputs({ grant, base, spec }: CoverageInput) {
  const globs = grant.scope.mutable_inputs;
  const before = new Map((base.spec.inputs ?? []).map((i) => [i.path, i]));
  const after = new Map((spec.inputs ?? []).map((i) => [i.path, i]));
  let changed = 0;
  for (const path of new Set([...before.keys(), ...after.keys()])) {
    const b = before.get(path);
    const a = after.get(path);
    if (a && b && sameFile(a, b)) continue;
    if (!anyGlobMatches(globs, path)) {
      const what = !b ? 'added' : !a ? 'removed' : 'changed';
      return fail(`input ${path} ${what} outside the mutable globs`);
    }
    changed++;
  }
  return pass(`${changed} input(s) changed, all within ${JSON.stringify(globs)}`);
}

function checkEnv({ grant, base, spec }: CoverageInput) {
  const before = base.spec.runtime.env ?? {};
  const after = spec.runtime.env ?? {};
  const rules = new Map(grant.scope.env.map((r) => [r.name, r]));
  const changed: string[] = [];
  for (const name of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (before[name] === after[name]) continue;
    if (envControlOf(name)) return fail(`env ${name} is an interpreter-control variable`);
    const rule = rules.get(name);
    if (!rule) return fail(`env ${name} changed; the grant does not let it change`);
    const value = after[name];
    if (value === undefined) return fail(`env ${name} removed; the grant lets only its value change`);
    if (rule.values && !rule.values.includes(value))
      return fail(`env ${name}=${JSON.stringify(value)} is not one of ${JSON.stringify(rule.values)}`);
    changed.push(name);
  }
  return pass(changed.length ? `env changed: ${changed.join(', ')}` : 'env unchanged');
}

function checkLimits({ grant, limits }: CoverageInput) {
  for (const name of LIMIT_NAMES)
    if (limits[name] > grant.scope.limits[name])
      return fail(`limits.${name} ${limits[name]} > ${grant.scope.limits[name]}`);
  return pass('resolved limits within the grant');
}

function checkWorkers({ grant, spec }: CoverageInput) {
  const allowed = grant.scope.workers;
  if (allowed === null) return pass(spec.worker ? `worker ${spec.worker}` : 'any worker');
  if (spec.worker === undefined) return fail(`no worker named; the grant allows only ${allowed.join(', ')}`);
  return allowed.includes(spec.worker)
    ? pass(`worker ${spec.worker}`)
    : fail(`worker ${spec.worker} is not one of ${allowed.join(', ')}`);
}

/** Mounts and multi-node shape stay as reviewed: data sets are not the grantee's to add. */
function checkPlacement({ base, spec }: CoverageInput) {
  const mounts = new Set(base.spec.mounts ?? []);
  const extra = (spec.mounts ?? []).find((m) => !mounts.has(m));
  if (extra) return fail(`mount ${extra} is not among the base revision's mounts`);
  if (spec.cards.per_node !== base.spec.cards.per_node)
    return fail(`cards.per_node ${spec.cards.per_node ?? 'unset'} differs from the base revision's`);
  // CPUs asked for hold a share of a host's CPUs: as the base revision asked, or a person decides.
  if (spec.limits?.cpus !== base.spec.limits?.cpus)
    return fail(`limits.cpus ${spec.limits?.cpus ?? 'unset'} differs from the base revision's`);
  return pass('mounts, per_node and limits.cpus as in the base revision');
}

function checkCardHours({ grant: g, spec }: CoverageInput) {
  const need = reservationOf(spec.cards.count, spec.time_limit_seconds);
  const used = g.card_seconds_charged + g.card_seconds_reserved;
  return used + need <= g.max_card_seconds
    ? pass(`card-hours ${hours(used)} + ${hours(need)} <= ${hours(g.max_card_seconds)}`)
    : fail(
        `card-hours ${hours(used)} + ${hours(need)} > ${hours(g.max_card_seconds)} (this run reserves ${spec.cards.count} card(s) × its ${spec.time_limit_seconds} s time limit; a shorter time_limit_seconds needs less)`,
      );
}

/** Card-seconds as hours: two decimals, more when a non-zero amount would read as 0.00. */
function hours(cardSeconds: number): string {
  const h = cardSeconds / 3600;
  return h > 0 && h < 0.005 ? h.toPrecision(2) : h.toFixed(2);
}
