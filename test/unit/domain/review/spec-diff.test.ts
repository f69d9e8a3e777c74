import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../../../src/contracts/canonical-json.js';
import { diffSpecs } from '../../../../src/domain/review/spec-diff.js';
import { validSpec } from '../../../support/spec.js';

/** The reviewer's view of what changed between two revisions. */

describe('diffSpecs', () => {
  it('is empty for equal specs and lists changed, added and removed leaves, sorted by path', () => {
    const a = validSpec();
    expect(diffSpecs(a, structuredClone(a))).toEqual([]);
    const b = validSpec({
      cards: { count: 2, model: 'H100' },
      runtime: { kind: 'process', argv: ['/bin/sh', '-c', 'nvidia-smi'] },
      outputs: [],
    });
    delete (b as { notes?: string }).notes;
    expect(diffSpecs(a, b)).toEqual([
      { path: 'cards.count', before: 1, after: 2 },
      { path: 'cards.model', after: 'H100' },
      { path: 'notes', before: a.notes },
      { path: 'outputs', after: [] },
      { path: 'outputs[0].path', before: 'result.json' },
      { path: 'outputs[0].required', before: true },
      { path: 'runtime.argv[2]', before: a.runtime.argv[2], after: 'nvidia-smi' },
    ]);
  });

  it('reports an env variable added by name', () => {
    const a = validSpec();
    const b = validSpec({ runtime: { ...a.runtime, env: { LD_PRELOAD: '/x.so' } } });
    expect(diffSpecs(a, b)).toEqual([{ path: 'runtime.env.LD_PRELOAD', after: '/x.so' }]);
  });

  it('finds a difference exactly when the canonical JSON differs (spec-like keys)', () => {
    const { value } = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        fc.integer({ min: -3, max: 3 }),
        fc.constantFrom('', 'a', 'b'),
        fc.boolean(),
        fc.constant(null),
        tie('arr'),
        tie('obj'),
      ),
      arr: fc.array(tie('value'), { maxLength: 3 }),
      obj: fc.dictionary(fc.constantFrom('a', 'b', 'c', 'env', 'MY_VAR'), tie('value'), { maxKeys: 3 }),
    }));
    fc.assert(
      fc.property(value, value, (a, b) => {
        const changes = diffSpecs(a, b);
        expect(changes.length === 0).toBe(canonicalJson(a) === canonicalJson(b));
        const paths = changes.map((c) => c.path);
        expect(paths).toEqual([...new Set(paths)].sort());
        expect(diffSpecs(a, a)).toEqual([]);
        // Symmetric: the same paths, with before and after swapped.
        expect(diffSpecs(b, a).map((c) => c.path)).toEqual(paths);
      }),
      { numRuns: 500 },
    );
  });
});
