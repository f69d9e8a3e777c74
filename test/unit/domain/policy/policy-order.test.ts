import { describe, expect, it } from 'vitest';
import { PolicySchema } from '../../../../src/contracts/policy.js';
import { TaskSpecSchema } from '../../../../src/contracts/task-spec.js';
import { evaluatePolicy } from '../../../../src/domain/policy/evaluate.js';
import { DISALLOWED_EXECUTABLE, TEST_POLICY, validSpec } from '../../../support/spec.js';

/**
 * `evaluatePolicy` runs its steps in a fixed order (what runs, network, inputs, mounts, env, limits,
 * placement, ceilings, reviewer aids) and lists the findings in that order: reviewers and agents read them
 * top down, and the splitting of the function into steps must not reorder them.
 */
const policy = PolicySchema.parse(TEST_POLICY);
const evaluate = (over: Parameters<typeof validSpec>[0]) =>
  evaluatePolicy(TaskSpecSchema.parse(validSpec(over)), policy, { fileDigests: {}, offeredMounts: [] }).map(
    (f) => `${f.severity}:${f.code}:${f.path}`,
  );

describe('the order of policy findings', () => {
  it('lists every step of a spec that trips them all in step order', () => {
    expect(
      evaluate({
        runtime: {
          kind: 'process',
          argv: [DISALLOWED_EXECUTABLE],
          env: { LD_PRELOAD: '/x.so', MY_TOKEN: 'y' },
        },
        network: 'host',
        mounts: ['imagenet'],
        cards: { count: 16 },
        limits: { pids: 4_000_000 },
        time_limit_seconds: 99_999,
        outputs: [],
        notes: ' ',
      }),
    ).toEqual([
      `error:EXECUTABLE_NOT_ALLOWED:runtime.argv[0]`,
      'error:NETWORK_NOT_ALLOWED:network',
      'warning:MOUNT_NOT_OFFERED:mounts[0]',
      'error:ENV_REFUSED:runtime.env.LD_PRELOAD',
      'warning:ENV_LOOKS_SECRET:runtime.env.MY_TOKEN',
      'error:LIMIT_OVER_POLICY:limits.pids',
      'error:TOO_MANY_CARDS:cards.count',
      'error:TIME_LIMIT_TOO_LONG:time_limit_seconds',
      'warning:NO_OUTPUTS:outputs',
      'warning:NO_NOTES:notes',
    ]);
  });

  it('puts the multi-node placement warning after the limits and before the ceilings', () => {
    expect(evaluate({ cards: { count: 16, per_node: 8 }, notes: '' })).toEqual([
      'warning:MULTI_NODE_WITHOUT_NETWORK:network',
      'error:TOO_MANY_CARDS:cards.count',
      'warning:NO_NOTES:notes',
    ]);
  });

  it('a policy that forbids MIG slices makes a slice request an error, after placement (ADR 0046)', () => {
    const forbid = PolicySchema.parse({ ...TEST_POLICY, mig: 'forbid' });
    const codes = (cards: object, p = forbid) =>
      evaluatePolicy(TaskSpecSchema.parse(validSpec({ cards } as never)), p, {
        fileDigests: {},
        offeredMounts: [],
      }).map((f) => `${f.severity}:${f.code}:${f.path}`);
    expect(codes({ count: 1, mig_profile: '1g.10gb' })).toEqual(['error:MIG_FORBIDDEN:cards.mig_profile']);
    expect(codes({ count: 1, allow_mig: true })).toEqual(['error:MIG_FORBIDDEN:cards.allow_mig']);
    expect(codes({ count: 1 })).toEqual([]);
    expect(codes({ count: 1, mig_profile: '1g.10gb' }, policy)).toEqual([]);
  });

  it('the spec refuses slice asks that cannot be met (ADR 0046)', () => {
    const parse = (cards: object) => TaskSpecSchema.safeParse(validSpec({ cards } as never)).success;
    expect(parse({ count: 2, allow_mig: true })).toBe(false);
    expect(parse({ count: 1, mig_profile: '1g.10gb', allow_mig: false })).toBe(false);
    expect(parse({ count: 16, per_node: 8, mig_profile: '1g.10gb' })).toBe(false);
    expect(parse({ count: 1, mig_profile: '1g.10gb; rm -rf /' })).toBe(false);
    expect(parse({ count: 1, mig_profile: '../1g.10gb' })).toBe(false);
    for (const ok of ['1g.10gb', '3g.40gb', '1g.10gb+me', '1c.3g.40gb', '7g.141gb'])
      expect(parse({ count: 3, mig_profile: ok })).toBe(true);
  });

  it('reports nothing for the valid spec', () => {
    expect(evaluate({})).toEqual([]);
  });
});
