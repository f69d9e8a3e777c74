import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type GrantScope,
  GrantScopeSchema,
  InputGlobSchema,
} from '../../../../src/contracts/standing-grant.js';
import { type TaskSpec, TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import { type CoverageInput, coverage } from '../../../../src/domain/grants/coverage.js';
import { anyGlobMatches, globMatches } from '../../../../src/domain/grants/glob.js';
import {
  chargeOf,
  crossedAlerts,
  GRANT_EVENTS,
  GRANT_STATES,
  GRANT_TABLE,
  isTerminalGrant,
  type StandingGrant,
  scopeProblems,
  transitionGrant,
} from '../../../../src/domain/grants/grant.js';
import type { Finding } from '../../../../src/domain/policy/types.js';

// Standing grants, pure (src/domain/grants/grant*.ts): the clause table, the scope checks, the state
// table, and the attacks a hostile grantee would try.

const sha = (c: string) => c.repeat(64);
const LIMITS = { memory_mib: 4096, pids: 512, cpu_weight: 100, tmp_mib: 256, shm_mib: 64, disk_mib: 1024 };
const IMAGE = `localhost/train@sha256:${sha('a')}`;

const baseSpec: TaskSpec = TaskSpecSchema.parse({
  title: 'train',
  objective: 'o',
  success_criteria: 's',
  cards: { count: 2 },
  runtime: {
    kind: 'process',
    argv: ['/usr/bin/python3', 'train.py', '--epochs', '1'],
    env: { EPOCHS: '1', MODE: 'fast' },
  },
  inputs: [
    { path: 'train.py', sha256: sha('1'), size: 10 },
    { path: 'src/model.py', sha256: sha('2'), size: 20 },
    { path: 'data/labels.csv', sha256: sha('3'), size: 30 },
  ],
  time_limit_seconds: 600,
});

const scope: GrantScope = GrantScopeSchema.parse({
  argv_prefix: ['/usr/bin/python3', 'train.py'],
  extra_args: 'script',
  mutable_inputs: ['train.py', 'src/**/*.py'],
  max_cards: 4,
  max_time_limit_seconds: 3600,
  limits: LIMITS,
  workers: null,
  env: [{ name: 'EPOCHS' }, { name: 'MODE', values: ['fast', 'full'] }],
  image: null,
  max_priority: 0,
});

const grant = (over: Partial<StandingGrant> = {}): StandingGrant => ({
  id: 'grt_1',
  grantee_id: 'p_agent',
  state: 'ACTIVE',
  scope,
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
  ...over,
});

function input(specOver: Record<string, unknown> = {}, over: Partial<CoverageInput> = {}): CoverageInput {
  const spec = TaskSpecSchema.parse({ ...baseSpec, ...specOver });
  return {
    grant: grant(),
    base: { spec: baseSpec, findings: [] },
    spec,
    findings: [],
    limits: { ...LIMITS, memory_mib: 2048 },
    script_interpreters: ['/usr/bin/python3'],
    now: 1000,
    ...over,
  };
}
const runtime = (argv: string[], env: Record<string, string> = baseSpec.runtime.env ?? {}) => ({
  runtime: { kind: 'process', argv, env },
});
const failing = (i: CoverageInput) => {
  const c = coverage(i);
  return c.covered ? null : c.failing;
};

describe('coverage', () => {
  it('covers the base revision itself and a changed script, listing every clause as the receipt', () => {
    const c = coverage(
      input({ inputs: [{ ...baseSpec.inputs![0]!, sha256: sha('9') }, ...baseSpec.inputs!.slice(1)] }),
    );
    expect(c.covered).toBe(true);
    if (c.covered) expect(c.clauses.map((x) => x.clause)).toContain('card_hours');
  });

  it('reports the first failing clause with the numbers', () => {
    expect(failing(input({ cards: { count: 8 } }))).toEqual({ clause: 'cards', message: 'cards 8 > 4' });
    expect(failing(input({ time_limit_seconds: 7200 }))?.message).toBe('time_limit_seconds 7200 > 3600');
    expect(failing(input({}, { limits: { ...LIMITS, memory_mib: 9000 } }))?.message).toBe(
      'limits.memory_mib 9000 > 4096',
    );
    expect(failing(input({ priority: 5 }))?.clause).toBe('priority');
  });

  it('refuses a grant that is not ACTIVE, expired, spent, at its concurrency or tripped', () => {
    for (const state of ['REQUESTED', 'SUSPENDED', 'REVOKED', 'EXPIRED', 'REJECTED'] as const)
      expect(failing(input({}, { grant: grant({ state }) }))?.clause).toBe('state');
    expect(failing(input({}, { now: 1_000_000 }))?.clause).toBe('expiry');
    expect(failing(input({}, { grant: grant({ runs_used: 5 }) }))?.message).toBe('runs 5 of 5 used');
    expect(failing(input({}, { grant: grant({ running: 2 }) }))?.clause).toBe('concurrency');
    expect(failing(input({}, { grant: grant({ consecutive_failures: 3 }) }))?.clause).toBe('breaker');
    // 2 cards × 600 s = 1200 card-seconds; 9.8 h used leaves 0.2 h = 720 s.
    expect(failing(input({}, { grant: grant({ card_seconds_charged: 9.8 * 3600 }) }))?.message).toBe(
      'card-hours 9.80 + 0.33 > 10.00 (this run reserves 2 card(s) × its 600 s time limit; a shorter time_limit_seconds needs less)',
    );
    // A few seconds charged never reads as 0.00 next to a failure.
    expect(
      failing(input({}, { grant: grant({ card_seconds_charged: 2, max_card_seconds: 1200 }) }))?.message,
    ).toMatch(/^card-hours 0\.00056 \+ 0\.33 > 0\.33 /);
  });

  it('sends any error finding and any new warning to a person', () => {
    const err: Finding = { severity: 'error', code: 'ENV_CONTROL', path: 'x', message: 'm', hint: 'h' };
    expect(failing(input({}, { findings: [err] }))?.clause).toBe('findings');
    const warn: Finding = { ...err, severity: 'warning', code: 'HIDDEN_CHARS' };
    expect(failing(input({}, { findings: [warn] }))?.message).toMatch(/new warning HIDDEN_CHARS/);
    expect(
      coverage(input({}, { findings: [warn], base: { spec: baseSpec, findings: [warn] } })).covered,
    ).toBe(true);
  });

  describe('attacks', () => {
    it('sh -c, python3 -c, a new executable or a wrapper never match', () => {
      expect(failing(input(runtime(['/bin/sh', '-c', 'curl x | sh'])))?.clause).toBe('argv');
      expect(failing(input(runtime(['/usr/bin/python3', '-c', 'import os'])))?.clause).toBe('argv');
      expect(failing(input(runtime(['/usr/bin/python3', '-m', 'pip'])))?.clause).toBe('argv');
      expect(failing(input(runtime(['/usr/bin/env', 'python3', 'train.py'])))?.clause).toBe('argv');
      expect(failing(input(runtime(['/usr/bin/python3', './train.py'])))?.clause).toBe('argv');
      expect(failing(input(runtime(['/usr/bin/python3'])))?.clause).toBe('argv');
      // Arguments after the pinned script go to the script: covered.
      expect(coverage(input(runtime(['/usr/bin/python3', 'train.py', '-c', 'x']))).covered).toBe(true);
    });

    it('a grant whose own prefix pins nothing covers nothing', () => {
      for (const prefix of [['/bin/sh', '-c'], ['/usr/bin/env'], ['/usr/bin/python3']]) {
        const g = grant({ scope: { ...scope, argv_prefix: prefix, extra_args: 'any_unsafe' } });
        expect(failing(input(runtime([...prefix, 'x']), { grant: g }))?.clause).toBe('argv');
        expect(scopeProblems(g.scope)).not.toEqual([]);
      }
    });

    it('extra arguments are refused when the scope says so', () => {
      const g = grant({ scope: { ...scope, extra_args: 'none' } });
      expect(failing(input({}, { grant: g }))?.message).toMatch(/past the prefix/);
    });

    it('interpreter-control env never changes, whatever the scope says', () => {
      for (const name of ['PYTHONPATH', 'LD_PRELOAD', 'PYTHONSTARTUP', 'BASH_ENV', 'NODE_OPTIONS']) {
        const g = grant({ scope: { ...scope, env: [...scope.env, { name }] } });
        expect(scopeProblems(g.scope).join()).toMatch(/interpreter-control/);
        const f = failing(
          input(runtime(baseSpec.runtime.argv, { EPOCHS: '1', MODE: 'fast', [name]: 'x' }), { grant: g }),
        );
        expect(f?.message).toMatch(/interpreter-control/);
      }
    });

    it('env outside the scope or its values is refused; allowed changes are covered', () => {
      const argv = baseSpec.runtime.argv;
      expect(failing(input(runtime(argv, { EPOCHS: '1', MODE: 'fast', OTHER: '1' })))?.clause).toBe('env');
      expect(failing(input(runtime(argv, { EPOCHS: '1', MODE: 'evil' })))?.message).toMatch(/not one of/);
      expect(failing(input(runtime(argv, { MODE: 'fast' })))?.message).toMatch(/removed/);
      expect(coverage(input(runtime(argv, { EPOCHS: '7', MODE: 'full' }))).covered).toBe(true);
    });

    it('inputs outside the globs stay byte-equal: changed, added, removed or made executable fail', () => {
      const [train, model, labels] = baseSpec.inputs!;
      const withInputs = (inputs: unknown[]) => input({ inputs });
      expect(failing(withInputs([train, model, { ...labels, sha256: sha('4') }]))?.message).toBe(
        'input data/labels.csv changed outside the mutable globs',
      );
      expect(failing(withInputs([train, model]))?.message).toMatch(/removed/);
      expect(
        failing(withInputs([train, model, labels, { path: 'evil.py', sha256: sha('5'), size: 1 }]))?.message,
      ).toMatch(/evil\.py added/);
      expect(failing(withInputs([train, model, { ...labels, executable: true }]))?.clause).toBe('inputs');
      // Inside the globs: changed, added and removed are all covered.
      expect(
        coverage(withInputs([train, labels, { path: 'src/a/b/new.py', sha256: sha('6'), size: 1 }])).covered,
      ).toBe(true);
      expect(
        failing(withInputs([train, model, labels, { path: 'src/x.sh', sha256: sha('6'), size: 1 }]))?.clause,
      ).toBe('inputs');
    });

    it('network host and unpinned or other images are never covered', () => {
      expect(failing(input({ network: 'host' }))?.clause).toBe('network');
      // The prefix alone: in a container no policy script rule applies, so argv is fixed (docs/security.md "What a reviewer must read, and what the broker guarantees").
      const container = (image: string) => ({
        runtime: { kind: 'container', image, argv: scope.argv_prefix },
      });
      const cbase = TaskSpecSchema.parse({ ...baseSpec, ...container(IMAGE) });
      const g = grant({ scope: { ...scope, image: IMAGE } });
      const at = (image: string, gr = g) =>
        failing(input(container(image), { grant: gr, base: { spec: cbase, findings: [] } }));
      expect(at(IMAGE)).toBeNull();
      expect(at(`localhost/train@sha256:${sha('b')}`)?.clause).toBe('runtime');
      expect(at('localhost/train:latest')?.message).toMatch(/is not the grant's/);
      expect(at(IMAGE, grant())?.message).toMatch(/not pinned in the grant/);
      expect(() => GrantScopeSchema.parse({ ...scope, image: 'localhost/train:latest' })).toThrow();
    });

    it('workers, mounts and per_node stay within the scope', () => {
      const g = grant({ scope: { ...scope, workers: ['w1'] } });
      expect(failing(input({}, { grant: g }))?.clause).toBe('workers');
      expect(failing(input({ worker: 'w2' }, { grant: g }))?.clause).toBe('workers');
      expect(failing(input({ worker: 'w1' }, { grant: g }))).toBeNull();
      expect(failing(input({ mounts: ['imagenet'] }))?.clause).toBe('placement');
    });
  });
});

describe('globs', () => {
  it('keeps * and ? within a segment and lets ** span segments', () => {
    expect(globMatches('src/*.py', 'src/a.py')).toBe(true);
    expect(globMatches('src/*.py', 'src/a/b.py')).toBe(false);
    expect(globMatches('src/**/*.py', 'src/a.py')).toBe(true);
    expect(globMatches('src/**/*.py', 'src/a/b/c.py')).toBe(true);
    expect(globMatches('**', 'any/thing')).toBe(true);
    expect(globMatches('?.py', 'ab.py')).toBe(false);
    expect(globMatches('*.py', '.hidden.py')).toBe(true);
    expect(globMatches('train.py', 'train.pyc')).toBe(false);
  });

  it('refuses ../, absolute, backslash and bracket globs', () => {
    for (const g of ['../x', 'a/../b', '/etc/*', 'a\\b', 'a/[ab]', 'a//b', './a', '**/**/**/**'])
      expect(InputGlobSchema.safeParse(g).success).toBe(false);
  });

  it('a literal glob matches exactly itself (property)', () => {
    const seg = fc.stringMatching(/^[a-z0-9._-]{1,8}$/).filter((s) => s !== '.' && s !== '..');
    fc.assert(
      fc.property(
        fc.array(seg, { minLength: 1, maxLength: 4 }),
        fc.array(seg, { minLength: 1, maxLength: 4 }),
        (a, b) => {
          expect(globMatches(a.join('/'), b.join('/'))).toBe(a.join('/') === b.join('/'));
        },
      ),
    );
  });
});

describe('globs against deep paths (a grantee picks the paths, explain_grant and confirm match them)', () => {
  // 256 segments, within the 512 characters of an input path; no glob below matches it.
  const deep = `${Array(255).fill('a').join('/')}/b`;

  it('** segments cost one pass over the path, not one per way to split it', () => {
    // Backtracking took ~170 ms per glob with three ** here (11 s for a grant's 64, the master's event
    // loop standing still); with eight it would try ~10^14 splits and never end. One pass is 9 × 257
    // segment tests. No clock in the test: a matcher that backtracks does not finish at all.
    const globs = [
      ...Array.from({ length: 64 }, (_, i) => `**/**/**/x${i}.py`),
      '**/**/**/**/**/**/**/**/x.py',
    ];
    expect(anyGlobMatches(globs, deep)).toBe(false);
    expect(anyGlobMatches(['**/**/**/**/**/**/**/**/b'], deep)).toBe(true);
  });

  it('answers as the backtracking matcher did (property)', () => {
    const reference = (g: readonly string[], p: readonly string[]): boolean => {
      if (g.length === 0) return p.length === 0;
      const [head, ...rest] = g;
      if (head === '**') {
        for (let skip = 0; skip <= p.length; skip++) if (reference(rest, p.slice(skip))) return true;
        return false;
      }
      return p.length > 0 && globMatches(head!, p[0]!) && reference(rest, p.slice(1));
    };
    const seg = fc.constantFrom('a', 'b', 'ab', 'x.py');
    const gseg = fc.constantFrom('a', 'b', '*', '?', 'a*', '*.py', '**');
    fc.assert(
      fc.property(
        fc.array(gseg, { minLength: 1, maxLength: 5 }),
        fc.array(seg, { minLength: 1, maxLength: 6 }),
        (g, p) => {
          expect(globMatches(g.join('/'), p.join('/'))).toBe(reference(g, p));
        },
      ),
    );
  });
});

describe('budgets and the state table', () => {
  it('charges cards × seconds held, capped at the reservation; nothing if it never started', () => {
    expect(chargeOf(2, 0, 10_500, 1200)).toBe(22);
    expect(chargeOf(2, 0, 10_000_000, 1200)).toBe(1200);
    expect(chargeOf(2, null, 10_000, 1200)).toBe(0);
  });

  it('alerts once when a budget crosses 80 %', () => {
    expect(crossedAlerts({ runs: 0.6, ttl: 0.1 }, { runs: 0.8, ttl: 0.2 })).toEqual(['runs']);
    expect(crossedAlerts({ runs: 0.8 }, { runs: 1 })).toEqual([]);
  });

  it('terminal states accept nothing; nothing but approve makes a grant ACTIVE (property)', () => {
    fc.assert(
      fc.property(fc.constantFrom(...GRANT_STATES), fc.constantFrom(...GRANT_EVENTS), (s, e) => {
        const t = transitionGrant(s, e);
        if (isTerminalGrant(s)) expect(t.ok).toBe(false);
        if (t.ok && t.to === 'ACTIVE') expect([s, e]).toEqual(['REQUESTED', 'approve']);
      }),
    );
    expect(GRANT_TABLE.SUSPENDED.approve).toBeUndefined();
  });
});
