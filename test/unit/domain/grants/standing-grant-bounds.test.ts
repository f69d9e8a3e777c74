import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { currentScope, type GrantScope, GrantScopeSchema } from '../../../../src/contracts/standing-grant.js';
import { type TaskSpec, TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import { COVERAGE_CLAUSES, type CoverageInput, coverage } from '../../../../src/domain/grants/coverage.js';
import { SPEC_FIELD_RULES, unnamedChange } from '../../../../src/domain/grants/fields.js';
import { extraArgsReach, type StandingGrant, scopeProblems } from '../../../../src/domain/grants/grant.js';

// ADR 0029, pure: extra arguments reach only a reviewed script, whatever the launcher; every spec
// field is decided by a named clause or is free text (a test walks the schema), and a field no clause
// names may not change.

const sha = (c: string) => c.repeat(64);
const LIMITS = { memory_mib: 4096, pids: 512, cpu_weight: 100, tmp_mib: 256, shm_mib: 64, disk_mib: 1024 };
const PY = '/usr/bin/python3';

const spec = (argv: string[], over: Record<string, unknown> = {}): TaskSpec =>
  TaskSpecSchema.parse({
    title: 't',
    objective: 'o',
    success_criteria: 's',
    cards: { count: 1 },
    runtime: { kind: 'process', argv },
    inputs: [
      { path: 'train.py', sha256: sha('1'), size: 10 },
      { path: 'Makefile', sha256: sha('2'), size: 10 },
    ],
    time_limit_seconds: 600,
    ...over,
  });

const scope = (argv_prefix: string[], extra_args: GrantScope['extra_args']): GrantScope =>
  GrantScopeSchema.parse({
    argv_prefix,
    extra_args,
    mutable_inputs: ['train.py'],
    max_cards: 1,
    max_time_limit_seconds: 600,
    limits: LIMITS,
    workers: null,
    env: [],
    image: null,
    max_priority: 0,
  });

const grant = (s: GrantScope): StandingGrant => ({
  id: 'grt_1',
  grantee_id: 'p_agent',
  state: 'ACTIVE',
  scope: s,
  max_runs: 5,
  max_card_seconds: 10 * 3600,
  concurrency: 2,
  expires_at: 1_000_000,
  breaker_k: 3,
  runs_used: 0,
  card_seconds_charged: 0,
  card_seconds_reserved: 0,
  running: 0,
  consecutive_failures: 0,
});

function input(s: GrantScope, base: TaskSpec, candidate: TaskSpec, interpreters = [PY]): CoverageInput {
  return {
    grant: grant(s),
    base: { spec: base, findings: [] },
    spec: candidate,
    findings: [],
    limits: LIMITS,
    script_interpreters: interpreters,
    now: 1000,
  };
}
const failing = (i: CoverageInput) => {
  const c = coverage(i);
  return c.covered ? null : c.failing;
};

describe('extra arguments reach only a reviewed script', () => {
  const base = spec([PY, 'train.py']);

  it('a script input under a policy interpreter takes extra arguments; ./train.py is the same file', () => {
    expect(
      coverage(input(scope([PY, 'train.py'], 'script'), base, spec([PY, 'train.py', '-c', 'x']))).covered,
    ).toBe(true);
    const dotted = spec([PY, './train.py']);
    expect(
      coverage(input(scope([PY, './train.py'], 'script'), dotted, spec([PY, './train.py', '--lr', '1'])))
        .covered,
    ).toBe(true);
    expect(scopeProblems(scope([PY, './train.py'], 'script'), { spec: dotted, interpreters: [PY] })).toEqual(
      [],
    );
  });

  it('launchers and unknown executables get a fixed argv: extra arguments are refused under "script"', () => {
    const launchers = [
      ['/usr/bin/make', 'train'],
      ['/usr/bin/accelerate', 'launch'],
      ['/usr/bin/uv', 'run'],
      ['/opt/conda/bin/conda', 'run'],
      ['/usr/bin/poetry', 'run'],
      ['/usr/bin/pipenv', 'run'],
      ['/usr/bin/npx', 'train'],
      // argv[1] is an input, but the executable is not an interpreter the policy runs scripts with.
      ['/usr/bin/torchrun', 'train.py'],
      ['/usr/bin/deepspeed', 'train.py'],
      ['/usr/local/bin/my-launcher', 'train.py'],
    ];
    for (const prefix of launchers) {
      const b = spec(prefix);
      const s = scope(prefix, 'script');
      expect(scopeProblems(s, { spec: b, interpreters: [PY] }).join()).toMatch(
        /is not an input the policy runs/,
      );
      const f = failing(input(s, b, spec([...prefix, '--eval=$(shell id)'])));
      expect(f?.clause, prefix.join(' ')).toBe('argv');
      expect(f?.message).toMatch(/would reach/);
      // The exact argv is still covered, and "none" says so without any script.
      expect(coverage(input(s, b, spec(prefix))).covered).toBe(true);
      expect(failing(input(scope(prefix, 'none'), b, spec([...prefix, 'x'])))?.message).toMatch(/fixes argv/);
      // Widened on purpose: then they are covered, and every view says WIDENED.
      expect(coverage(input(scope(prefix, 'any_unsafe'), b, spec([...prefix, 'x']))).covered).toBe(true);
    }
  });

  it('a script that is not an input, or an interpreter that is not a rule’s, takes no extra arguments', () => {
    const notInput = spec([PY, 'other.py']);
    expect(
      failing(input(scope([PY, 'other.py'], 'script'), notInput, spec([PY, 'other.py', 'x'])))?.clause,
    ).toBe('argv');
    expect(
      failing(input(scope([PY, 'train.py'], 'script'), base, spec([PY, 'train.py', 'x']), []))?.clause,
    ).toBe('argv');
    // A script the run removed (its glob lets it go) is no script any more: the arguments would reach python.
    const gone = spec([PY, 'train.py', 'x'], { inputs: [{ path: 'Makefile', sha256: sha('2'), size: 10 }] });
    expect(failing(input(scope([PY, 'train.py'], 'script'), base, gone))?.message).toMatch(/would reach/);
    // A container runs argv inside its image: no policy script rule applies there.
    const image = `localhost/x@sha256:${sha('a')}`;
    const inImage = (argv: string[]) => spec(argv, { runtime: { kind: 'container', image, argv } });
    const s = { ...scope([PY, 'train.py'], 'script'), image };
    expect(failing(input(s, inImage([PY, 'train.py']), inImage([PY, 'train.py', 'x'])))?.clause).toBe('argv');
  });

  it('code in argv or a wrapper first pins nothing, whatever extra_args says', () => {
    for (const prefix of [
      [PY, '-m', 'pkg'],
      [PY, '-m'],
      ['/usr/bin/python3', '-c', 'import os'],
      ['/bin/bash', '-c', 'id'],
      ['/usr/bin/env', 'python3', 'train.py'],
      [PY],
    ])
      for (const extra of ['script', 'any_unsafe'] as const) {
        expect(scopeProblems(scope(prefix, extra)), prefix.join(' ')).not.toEqual([]);
        expect(failing(input(scope(prefix, extra), spec(prefix), spec([...prefix, 'x'])))?.clause).toBe(
          'argv',
        );
      }
  });

  it('says in words what extra arguments reach', () => {
    expect(extraArgsReach(scope([PY, 'train.py'], 'script'))).toBe(
      'extra arguments go to the reviewed script train.py',
    );
    expect(extraArgsReach(scope(['/usr/bin/make', 'train'], 'none'))).toBe('none: argv is fixed');
    expect(extraArgsReach(scope(['/usr/bin/make', 'train'], 'any_unsafe'))).toBe(
      'WIDENED: extra arguments reach `make`, which can run any command',
    );
  });

  it('reads a stored grant of before ADR 0029’s amendment: true as "script" (narrower), false as "none"', () => {
    const stored = (x: unknown) => ({ ...scope([PY, 'train.py'], 'none'), extra_args: x });
    expect(currentScope(stored(true)).extra_args).toBe('script');
    expect(currentScope(stored(false)).extra_args).toBe('none');
    expect(currentScope(stored('any_unsafe')).extra_args).toBe('any_unsafe');
    expect(currentScope(stored('bogus')).extra_args).toBe('none');
  });
});

/** Every leaf path of a zod schema, in SPEC_FIELD_RULES' notation (`a.b`, `a[].b`). */
function leafPaths(schema: z.ZodType, path = ''): string[] {
  const def = (schema as unknown as { def: Record<string, unknown> & { type: string } }).def;
  switch (def.type) {
    case 'optional':
    case 'nullable':
    case 'default':
    case 'prefault':
    case 'readonly':
    case 'nonoptional':
      return leafPaths(def['innerType'] as z.ZodType, path);
    case 'pipe':
      return leafPaths(def['in'] as z.ZodType, path);
    case 'object':
      return Object.entries(def['shape'] as Record<string, z.ZodType>).flatMap(([k, v]) =>
        leafPaths(v, path === '' ? k : `${path}.${k}`),
      );
    case 'union':
      return [...new Set((def['options'] as z.ZodType[]).flatMap((o) => leafPaths(o, path)))];
    case 'array': {
      const element = def['element'] as z.ZodType;
      const inner = leafPaths(element, `${path}[]`);
      // An array of objects is walked; an array of strings is one field.
      return inner.some((p) => p.startsWith(`${path}[].`)) ? inner : [path];
    }
    default:
      return [path];
  }
}

describe('every spec field is decided (by construction)', () => {
  const clauses = new Set(COVERAGE_CLAUSES.map((c) => c.clause));
  const walked = leafPaths(TaskSpecSchema);

  it('the walk finds the fields (it reads the schema, not a copy of the table)', () => {
    expect(walked).toContain('cards.model');
    expect(walked).toContain('runtime.image');
    expect(walked).toContain('inputs[].executable');
    expect(walked).toContain('limits.shm_mib');
  });

  it('each TaskSpec field is compared by a named clause or is free text; adding one without a rule fails here', () => {
    const rules: Record<string, string> = SPEC_FIELD_RULES;
    expect(walked.filter((p) => rules[p] === undefined)).toEqual([]);
    // And the table names nothing the schema lacks, and only clauses that exist.
    expect(Object.keys(rules).filter((p) => !walked.includes(p))).toEqual([]);
    for (const [path, rule] of Object.entries(rules))
      expect(rule === 'free_text' || clauses.has(rule), `${path}: ${rule}`).toBe(true);
  });

  it('a field no clause names may not change (refused, not ignored)', () => {
    const base = spec([PY, 'train.py']);
    const sneaky = { ...base, gpu_hint: 'anything' } as unknown as TaskSpec;
    expect(unnamedChange(base, sneaky)).toBe('gpu_hint');
    const nested = { ...base, cards: { ...base.cards, interconnect: 'nvlink' } } as unknown as TaskSpec;
    expect(unnamedChange(base, nested)).toBe('cards.interconnect');
    const inRuntime = { ...base, runtime: { ...base.runtime, user: 'root' } } as unknown as TaskSpec;
    expect(failing(input(scope([PY, 'train.py'], 'script'), base, inRuntime))).toEqual({
      clause: 'unchanged',
      message: "runtime.user differs from the base revision's (no clause compares it, so it may not change)",
    });
    // Free text changes nothing that runs.
    expect(
      unnamedChange(base, { ...base, title: 'new', notes: 'n', outputs: [{ path: 'o', required: true }] }),
    ).toBe(null);
  });

  it('the card model and memory floor are compared with the base revision', () => {
    const base = spec([PY, 'train.py'], { cards: { count: 1, model: 'A100' } });
    const s = scope([PY, 'train.py'], 'script');
    expect(failing(input(s, base, spec([PY, 'train.py'], { cards: { count: 1, model: 'H100' } })))).toEqual({
      clause: 'cards',
      message: 'cards.model "H100" differs from the base revision\'s "A100"',
    });
    expect(failing(input(s, base, spec([PY, 'train.py'], { cards: { count: 1 } })))?.clause).toBe('cards');
    expect(
      failing(
        input(s, base, spec([PY, 'train.py'], { cards: { count: 1, model: 'A100', min_memory_mib: 1 } })),
      )?.message,
    ).toMatch(/min_memory_mib 1 differs/);
  });

  it('a grant for whole cards covers no MIG slice request, nor the other way round (ADR 0046)', () => {
    const s = scope([PY, 'train.py'], 'script');
    const whole = spec([PY, 'train.py'], { cards: { count: 1 } });
    const slice = spec([PY, 'train.py'], { cards: { count: 1, mig_profile: '1g.10gb' } });
    const anySlice = spec([PY, 'train.py'], { cards: { count: 1, allow_mig: true } });
    expect(failing(input(s, whole, slice))).toEqual({
      clause: 'cards',
      message: 'cards.mig_profile "1g.10gb" differs from the base revision\'s null',
    });
    expect(failing(input(s, slice, whole))?.message).toMatch(/mig_profile null differs/);
    expect(
      failing(input(s, slice, spec([PY, 'train.py'], { cards: { count: 1, mig_profile: '3g.40gb' } })))
        ?.message,
    ).toMatch(/mig_profile "3g.40gb" differs/);
    expect(failing(input(s, whole, anySlice))?.message).toMatch(/allow_mig true differs/);
    expect(failing(input(s, slice, slice))).toBeNull();
  });
});

describe('attack: a grant widens neither preemption nor CPUs', () => {
  const s = scope([PY, 'train.py'], 'none');
  it('a run less preemptible than its base, or with a longer grace, goes to a person; more preemptible passes', () => {
    const base = spec([PY, 'train.py'], { preemptible: true, preemption_grace_seconds: 30 });
    expect(failing(input(s, base, spec([PY, 'train.py'])))?.clause).toBe('preemption');
    expect(failing(input(s, base, spec([PY, 'train.py'], { preemptible: false })))?.clause).toBe(
      'preemption',
    );
    expect(
      failing(input(s, base, spec([PY, 'train.py'], { preemptible: true, preemption_grace_seconds: 600 })))
        ?.clause,
    ).toBe('preemption');
    // The base's grace left to the operator's kill grace: any grace of the run's own is a person's to read.
    const bare = spec([PY, 'train.py'], { preemptible: true });
    expect(
      failing(input(s, bare, spec([PY, 'train.py'], { preemptible: true, preemption_grace_seconds: 1 })))
        ?.clause,
    ).toBe('preemption');
    expect(
      failing(input(s, spec([PY, 'train.py']), spec([PY, 'train.py'], { preemptible: true }))),
    ).toBeNull();
    expect(
      failing(input(s, base, spec([PY, 'train.py'], { preemptible: true, preemption_grace_seconds: 10 }))),
    ).toBeNull();
  });

  it('a run asking other CPUs than its base (more, fewer, none, or some where the base asked none) goes to a person', () => {
    const base = spec([PY, 'train.py'], { limits: { cpus: 4 } });
    for (const cpus of [8, 2, undefined])
      expect(
        failing(input(s, base, spec([PY, 'train.py'], cpus === undefined ? {} : { limits: { cpus } })))
          ?.clause,
        String(cpus),
      ).toBe('placement');
    expect(
      failing(input(s, spec([PY, 'train.py']), spec([PY, 'train.py'], { limits: { cpus: 1 } })))?.clause,
    ).toBe('placement');
    expect(failing(input(s, base, spec([PY, 'train.py'], { limits: { cpus: 4 } })))).toBeNull();
  });
});
