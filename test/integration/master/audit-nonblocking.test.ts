import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Store } from '../../../src/store/store.js';
import { appendChain } from '../../fixtures/audit-chain.js';
import { closeAllTestMasters, startTestMaster } from '../../support/master.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * docs/operations.md "Audit retention": with a 200k-event audit chain, a full verification runs in batches between event-loop
 * turns, so requests are answered while it runs (shown structurally: responses arrive before the pass
 * finishes), and `/healthz` answers from the last result instead of walking the chain.
 */

const EVENTS = 200_000;

afterAll(async () => {
  await closeAllTestMasters();
  removeTempDirs();
});

describe('audit verification does not block requests', () => {
  it('answers /healthz, /status and /cards while a full pass over 200k events runs', async () => {
    const dataDir = makeTempDir('audit-big');
    const seed = Store.open(join(dataDir, 'broker.db'));
    appendChain(seed, EVENTS, () => Date.now());
    seed.close();

    const m = await startTestMaster({ dataDir });
    const audit = m.master.audit;
    // The start-up pass (no checkpoint yet) is walking the chain; a full pass on demand queues after it.
    expect(audit.busy()).toBe(true);
    const rest = m.rest(m.operatorToken);
    let finished = false;
    const full = audit.verifyAll().then((s) => {
      finished = true;
      return s;
    });
    const answeredDuringPass: string[] = [];
    for (const path of ['/healthz', '/api/v1/status', '/api/v1/cards', '/healthz', '/api/v1/status']) {
      const res = await rest.get(path);
      expect(res.status).toBe(200);
      if (!finished) answeredDuringPass.push(path);
    }
    const result = await full;
    expect(result.ok).toBe(true);
    expect(result.events).toBeGreaterThanOrEqual(EVENTS);
    // Every request completed while the pass was still walking the chain.
    expect(answeredDuringPass).toEqual([
      '/healthz',
      '/api/v1/status',
      '/api/v1/cards',
      '/healthz',
      '/api/v1/status',
    ]);
  }, 120_000);
});
