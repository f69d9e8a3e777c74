import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { makeBrokerDeps } from '../../../support/deps.js';

/**
 * Children's nominal shares of a card model sum within their parent's (ADR 0048) on every path: whatever
 * sequence of model-quota changes, account creations and moves an operator (or a careless script) sends
 * over the tools, after each one — accepted or refused — every account's children hold at most its nominal
 * share of each model it has one for, and a refused call changed nothing.
 */

const NAMES = ['a', 'b', 'c', 'd', 'e'] as const;

const op = fc.oneof(
  fc.record({
    kind: fc.constant('quota' as const),
    name: fc.constantFrom(...NAMES),
    model: fc.constantFrom('H100', 'h100', 'A100'),
    nominal: fc.option(fc.integer({ min: 0, max: 8 }), { nil: null }),
  }),
  fc.record({
    kind: fc.constant('move' as const),
    name: fc.constantFrom(...NAMES),
    parent: fc.constantFrom('root', ...NAMES),
  }),
  fc.record({
    kind: fc.constant('create' as const),
    name: fc.constantFrom(...NAMES),
    parent: fc.constantFrom('root', ...NAMES),
    model: fc.constantFrom('H100', 'A100'),
    nominal: fc.integer({ min: 0, max: 8 }),
  }),
);

describe('model quota sums on every path', () => {
  it('after any sequence of creates, sets and moves, children sum within their parent per model', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 14 }), async (ops) => {
        const f = makeBrokerDeps();
        try {
          const ops_ = f.principal('ops', ['operator']);
          let n = 0;
          const snapshot = () =>
            JSON.stringify([f.deps.store.accounts.list(), f.deps.store.accounts.modelQuotas()]);
          for (const o of ops) {
            const input =
              o.kind === 'quota'
                ? { name: o.name, model: o.model, nominal_cards: o.nominal }
                : o.kind === 'move'
                  ? { name: o.name, parent: o.parent }
                  : { name: o.name, parent: o.parent, model: o.model, nominal_cards: o.nominal };
            const before = snapshot();
            const tool = o.kind === 'create' ? 'create_account' : 'set_account';
            const refused = await f
              .invoke(ops_, tool, { ...input, idempotency_key: `k${++n}` })
              .then(() => false)
              .catch((e: unknown) => {
                expect((e as { code?: string }).code).toMatch(
                  /^(INVALID_INPUT|NOT_FOUND|ALREADY_EXISTS|INVALID_STATE|CONFLICT)$/,
                );
                return true;
              });
            if (refused) expect(snapshot()).toBe(before);
            const accounts = f.deps.store.accounts.list();
            const quotas = f.deps.store.accounts.modelQuotas();
            for (const q of quotas) {
              if (q.nominal_cards === null) continue;
              const children = accounts.filter((a) => a.parent === q.account).map((a) => a.name);
              const sum = quotas
                .filter((c) => children.includes(c.account) && c.model_key === q.model_key)
                .reduce((s, c) => s + (c.nominal_cards ?? 0), 0);
              expect(sum, `${q.account} ${q.model_key} after ${JSON.stringify(o)}`).toBeLessThanOrEqual(
                q.nominal_cards,
              );
            }
          }
        } finally {
          f.close();
        }
      }),
      { numRuns: 100 },
    );
  });
});
