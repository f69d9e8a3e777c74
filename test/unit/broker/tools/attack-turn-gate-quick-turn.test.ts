import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { bindTool, invokeTool } from '../../../../src/broker/tools/dispatch.js';
import { defineTool, EVERYONE, READ_ONLY } from '../../../../src/contracts/tool-def.js';
import { makeBrokerDeps } from '../../../support/deps.js';

/**
 * Attack on QUICK_TURN_MS (src/broker/tools/dispatch.ts parseAndRun): a part runs inline, without the
 * TurnGate, when the *previous* part's turn began less than 2 ms ago; the check looks at the time already
 * spent, never at how long the next part will take, and the inline part's duration is never added to the
 * principal's rest (TurnGate.run computes the rest in its finally, before the inline part starts). A heavy
 * call whose prepare steps alternate quick and slow (a spec naming a tiny input, then a huge one, and so
 * on) therefore runs every slow step in the quick step's turn, with no rest after it: its principal holds
 * the event loop nearly all the time instead of at most half of it.
 */
const busy = (ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end);
};

describe('attack: quick part followed by a slow one in the same TurnGate turn', () => {
  it('a slow step is followed by a rest as long as it ran (at most half the loop per principal)', async () => {
    const f = makeBrokerDeps();
    const mallory = f.principal('mallory', ['submitter']);
    const ran: Array<{ start: number; end: number }> = [];
    const def = defineTool({
      name: 'attack_heavy',
      title: 'attack',
      description: 'a heavy read whose prepare steps alternate 0 ms and 25 ms',
      roles: EVERYONE,
      mutating: false,
      annotations: READ_ONLY,
      input: z.strictObject({}),
      output: z.object({ ok: z.boolean() }),
    });
    const tool = bindTool(
      def,
      () => ({ ok: true }),
      'heavy',
      () =>
        Array.from({ length: 12 }, (_, i) => () => {
          const start = performance.now();
          busy(i % 2 === 0 ? 0 : 25);
          ran.push({ start, end: performance.now() });
        }),
    );
    await invokeTool(tool, { deps: f.deps, principal: mallory }, {});
    // After each slow step, mallory's next step must wait at least as long as the slow step ran.
    const gaps: number[] = [];
    for (let i = 1; i + 1 < ran.length; i += 2) gaps.push(ran[i + 1]!.start - ran[i]!.end);
    const minGap = Math.min(...gaps);
    expect(minGap).toBeGreaterThanOrEqual(20);
  });
});
