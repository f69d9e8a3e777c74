import { afterEach, describe, expect, it } from 'vitest';
import type { BrokerError } from '../../../../src/contracts/errors.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';

/**
 * Attack on get_usage's times (src/broker/tools/accounts.ts timeOf/getUsage): `until` at the earliest
 * time a Date can hold parses, and the default `since` (7 days before it) is then outside Date's range:
 * iso(since) throws a RangeError, which reaches the edge as an internal error instead of INVALID_INPUT.
 */
let f: BrokerFixture | undefined;
afterEach(() => f?.close());

describe('attack: get_usage with times at the edge of Date', () => {
  it('an until whose default since is out of range is INVALID_INPUT, not an internal error', async () => {
    f = makeBrokerDeps();
    const alice = f.principal('alice', ['submitter']);
    const err = (await f.invoke(alice, 'get_usage', { until: '-271821-04-20T00:00:00Z' }).then(
      () => null,
      (e: unknown) => e,
    )) as BrokerError | null;
    expect(err).not.toBeNull();
    expect(err?.code).toBe('INVALID_INPUT');
  });
});
